"""How long the command line takes to answer: `stochopt --help`, `stochopt specs` and
`stochopt report RUN` (terminal), each started afresh as a user's shell starts it.

    python benchmarks/bench_startup.py                  # median of 10 of each
    python benchmarks/bench_startup.py --repeat 20 --json out.json
    python benchmarks/bench_startup.py --importtime     # the 15 slowest imports of each

Wall-clock seconds of the whole process (time.perf_counter around subprocess.run), after
one warm-up run of each (so the OS's file cache is warm, as it is for a user calling the
tool in a loop). Medians and the 10th and 90th percentiles. No assertions: the test
suite never times anything. Measure on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _report_run(where: Path) -> Path:
    """A finished run directory to report on: a short search of softmax."""
    run = where / "run"
    subprocess.run([sys.executable, "-m", "stochopt", "optimize", str(ROOT / "specs" /
                    "softmax.py"), "--budget", "15s", "--chains", "1", "--max-proposals",
                    "300", "--run-dir", str(run), "--quiet"], check=True,
                   capture_output=True, cwd=ROOT)
    return run


def commands(run: Path) -> dict[str, list[str]]:
    return {"--help": ["--help"], "specs": ["specs"], "report RUN": ["report", str(run)]}


def time_once(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "stochopt", *argv], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    return time.perf_counter() - start


def slowest_imports(argv: list[str], count: int = 15) -> list[tuple[float, str]]:
    """(cumulative seconds, module) of the slowest imports, from python -X importtime."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "stochopt", *argv],
                          capture_output=True, text=True, cwd=ROOT)
    rows = []
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = line[len("import time:"):].split("|")
            if cumulative.strip().isdigit():
                rows.append((int(cumulative) / 1e6, name.rstrip()))
    return sorted(rows, reverse=True)[:count]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--json", help="write the samples and medians here")
    ap.add_argument("--importtime", action="store_true",
                    help="also list each command's slowest imports")
    args = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        run = _report_run(Path(tmp))
        for name, argv in commands(run).items():
            time_once(argv)  # warm-up
            samples = [time_once(argv) for _ in range(args.repeat)]
            q = statistics.quantiles(samples, n=10)
            results[name] = {"median_s": statistics.median(samples), "p10_s": q[0],
                             "p90_s": q[-1], "samples_s": samples}
            print(f"stochopt {name:<12} median {statistics.median(samples):.3f} s  "
                  f"p10 {q[0]:.3f}  p90 {q[-1]:.3f}  ({args.repeat} runs)")
            if args.importtime:
                for seconds, module in slowest_imports(argv):
                    print(f"    {seconds:7.3f} s  {module}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
