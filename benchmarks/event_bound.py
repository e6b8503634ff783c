"""The 48-hour bound of events.jsonl, measured: a run directory whose events.jsonl is
what a 48-hour run writes when every per-interval cap of stochopt/search/event_log.py
is full (the worst case: past the caps, the candidate rate adds counts, not lines), and
the time `stochopt report` takes on it.

    python benchmarks/event_bound.py --out /tmp/run48h            # build, then time
    python benchmarks/event_bound.py --out /tmp/run48h --hours 4.8

It copies run.json, spec.py, baseline.leir and best.leir from a real run directory
(--from, default: a 20-candidate run it makes first) and writes the events.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from stochopt.search import event_log
from stochopt.search.event_log import INTERVAL_S, BoundedEventLog

ROOT = Path(__file__).resolve().parents[1]
PER_INTERVAL = 120   # enough to fill every cap once every rest candidate is a sample one


def saturated_events(path: Path, hours: float, chains: int = 64, seed: int = 1) -> int:
    """Write the events of ``hours`` of a run at every cap; return the candidates."""
    every = event_log.SAMPLE_EVERY
    event_log.SAMPLE_EVERY = 1  # every candidate of the rest can be a sampled one
    try:
        return _saturate(BoundedEventLog(path), hours, chains, seed)
    finally:
        event_log.SAMPLE_EVERY = every


def _saturate(log: BoundedEventLog, hours: float, chains: int, seed: int) -> int:
    rng = random.Random(seed)
    long_error = "x" * 2000
    intervals = int(hours * 3600 // INTERVAL_S)
    for interval in range(intervals):
        for i in range(PER_INTERVAL):
            kind = i % 4
            event = {"chain": rng.randrange(chains),
                     "proposer": "llm" if kind == 0 else "mutate", "move": "m",
                     "outcome": "invalid" if kind == 1 else "rejected",
                     "cycles": 5000 + rng.randrange(5000), "tokens": 900, "cost_usd": 0.002,
                     "error": None, "seconds": 0.001,
                     "t": interval * INTERVAL_S + i * INTERVAL_S / PER_INTERVAL}
            if kind == 1:  # a new kind of error each time, with a long text
                event["error"] = "".join(rng.choice("abcdefgh") for _ in range(12)) + \
                    long_error
            log.write(event)
    log.close()
    return intervals * PER_INTERVAL


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--hours", type=float, default=48.0)
    parser.add_argument("--from", dest="source", default=None)
    args = parser.parse_args()
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    source = Path(args.source) if args.source else out.with_name(out.name + "-source")
    if not args.source and not (source / "run.json").is_file():
        from stochopt.search import optimize
        from stochopt.search.chain import ChainConfig
        optimize(str(ROOT / "specs" / "softmax.py"), budget="60s", chains=1,
                 max_proposals=20, run_dir=str(source), config=ChainConfig(full_examples=10),
                 db=False)
    out.mkdir(parents=True)
    for name in ("run.json", "spec.py", "baseline.leir", "best.leir", "best.json",
                 "checkpoint.json"):
        shutil.copyfile(source / name, out / name)
    (out / "counterexamples").mkdir()
    start = time.perf_counter()
    candidates = saturated_events(out / "events.jsonl", args.hours)
    written = time.perf_counter() - start
    size = (out / "events.jsonl").stat().st_size
    lines = sum(1 for _ in open(out / "events.jsonl"))
    print(f"{args.hours:g} h at every cap: {candidates:,} candidates fed, {lines:,} lines, "
          f"{size / 1e6:.1f} MB ({size / 1024**2:.1f} MiB) in {written:.1f} s")
    start = time.perf_counter()
    report = subprocess.run([sys.executable, "-m", "stochopt", "report", str(out), "--json"],
                            capture_output=True, text=True, cwd=ROOT)
    took = time.perf_counter() - start
    facts = json.loads(report.stdout)
    print(f"stochopt report --json: {took:.1f} s (process start included); it counts "
          f"{facts['proposals']:,} candidates")


if __name__ == "__main__":
    main()
