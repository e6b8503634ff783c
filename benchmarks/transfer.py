"""Plans that transfer: a spec at new shapes, run after its bundled twin with a warm
tuning database for a short budget, against a cold run of it for a long one. The specs
at new shapes are in benchmarks/specs/ (attention_decode with a cache twice as long,
mla_decode with twice the heads): measurement specs, not bundled ones.

    python benchmarks/transfer.py                        # 5m cold, 1m warm, seeds 0 and 1
    python benchmarks/transfer.py --cold 2m --warm 30s --seeds 0 --pairs mla_decode:mla_decode_wide

For each pair (bundled spec, spec at other shapes) and seed, in a fresh database:

1. the bundled spec runs for --bundled (default: as long as the cold run) and fills it;
2. the new spec runs for --warm with that database: no kernel of its own there, so it
   starts from the lowering with the plans of its neighbour replayed and the move
   weights its rule statistics give (run.json's tuning says which);
3. the new spec runs cold for --cold (--no-db: what it reaches with nothing learned).

Every run is `stochopt optimize --proposer mixed --chains 2 --seed S`, one after the
other. The table gives each run's proved best and the fastest found (unproved: its
check did not finish), and whether the warm run reached at least what the cold one did
(proved against proved). Raw rows go to --json; run directories stay under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAIRS = ["attention_decode:attention_decode_long", "mla_decode:mla_decode_wide"]


def spec_file(name: str) -> Path:
    """A bundled spec (specs/), or one of the twins at other shapes (benchmarks/specs/)."""
    for folder in (ROOT / "specs", ROOT / "benchmarks" / "specs"):
        if (folder / f"{name}.py").is_file():
            return folder / f"{name}.py"
    raise SystemExit(f"no spec {name}: not in specs/ nor benchmarks/specs/")


def optimize(spec: str, budget: str, seed: int, run_dir: Path, db: Path | None,
             chains: int) -> dict:
    """One CLI run; what it proved and found, and what the database gave it."""
    cmd = [sys.executable, "-m", "stochopt", "optimize", str(spec_file(spec)),
           "--proposer", "mixed", "--chains", str(chains), "--budget", budget, "--seed",
           str(seed), "--run-dir", str(run_dir), "--quiet"]
    cmd += ["--db", str(db)] if db is not None else ["--no-db"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr.strip()[-800:]}")
    best = json.loads((run_dir / "best.json").read_text())
    run = json.loads((run_dir / "run.json").read_text())
    tuning = run.get("tuning") or {}
    moved = tuning.get("transfer") or {}
    return {"spec": spec, "budget": budget, "seed": seed, "run_dir": str(run_dir),
            "baseline": run["baseline_cycles"], "proved": best["cycles"],
            "found": (best.get("unproved") or {}).get("cycles") or best["cycles"],
            "start": tuning.get("start"),
            "plans": [{"from": p["spec"], "steps": p["steps"], "applied": len(p["plan"]),
                       "cycles_after": p["cycles_after"]} for p in moved.get("from", [])],
            "move_weights": moved.get("move_weights", {})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold", default="5m", help="the cold run's budget")
    parser.add_argument("--warm", default="1m", help="the warm run's budget")
    parser.add_argument("--bundled", default=None, help="the bundled spec's budget "
                        "(default: --cold)")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--pairs", nargs="+", default=PAIRS,
                        help="BUNDLED:NEW spec names (specs/ or benchmarks/specs/NAME.py)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/stochopt-transfer"))
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    rows = []
    for pair in args.pairs:
        bundled, new = pair.split(":")
        for seed in (int(s) for s in args.seeds.split(",")):
            where = args.out / f"{new}-seed{seed}"
            where.mkdir(parents=True, exist_ok=False)
            db = where / "tuning.db"
            first = optimize(bundled, args.bundled or args.cold, seed, where / bundled, db,
                             args.chains)
            warm = optimize(new, args.warm, seed, where / "warm", db, args.chains)
            cold = optimize(new, args.cold, seed, where / "cold", None, args.chains)
            rows.append({"pair": pair, "seed": seed, "bundled": first, "warm": warm,
                         "cold": cold, "warm_reaches_cold": warm["proved"] <= cold["proved"]})
            print(f"{new} seed {seed}: warm {args.warm} {warm['proved']} (found "
                  f"{warm['found']}), cold {args.cold} {cold['proved']} (found "
                  f"{cold['found']})", file=sys.stderr, flush=True)
    print(f"| spec | seed | baseline | bundled spec, {args.bundled or args.cold} | "
          f"warm, {args.warm}: proved (found) | cold, {args.cold}: proved (found) | "
          "warm >= cold | plans replayed (steps applied) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for r in rows:
        w, c, b = r["warm"], r["cold"], r["bundled"]
        plans = "; ".join(f"{p['from']} {p['applied']}/{p['steps']}" for p in w["plans"]) \
            or "none"
        print(f"| {w['spec']} | {r['seed']} | {c['baseline']:,} | {b['proved']:,} | "
              f"{w['proved']:,} ({w['found']:,}) | {c['proved']:,} ({c['found']:,}) | "
              f"{'yes' if r['warm_reaches_cold'] else 'no'} | {plans} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
