"""The search against greedy and the kernels written by hand, side by side, every spec.

    python benchmarks/hand_vs_search.py --budget 5m                  # all 12 bundled specs
    python benchmarks/hand_vs_search.py --budget 2m --specs matmul mla_decode

For each bundled spec: its baseline (the lowering), what greedy (the rewrite rules to a
fixpoint, stochopt/transform/greedy.py, its result fully checked) reaches and how long it
took, the kernel written by hand where benchmarks/kernels/ has one, and the best of
`stochopt optimize --proposer mixed --chains 2` after the budget: proved, and the fastest
found whose check did not finish, and candidates per second. Then search / greedy and
hand / search (1.00 = as fast). Prints a markdown table and writes it as JSON (--json);
the run directories stay under --out for `stochopt report`. Greedy runs in this process
and the searches one after the other, so the figures are comparable only when the
machine is otherwise quiet.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from stochopt.backend.cost import cost  # noqa: E402
from stochopt.kernel_file import read_kernel_file  # noqa: E402
from stochopt.lower.lowering import lower  # noqa: E402
from stochopt.machine import load_machine  # noqa: E402
from stochopt.rundir import PROOF_LOWERING  # noqa: E402
from stochopt.spec import load_spec  # noqa: E402
from stochopt.transform.greedy import greedy_fixpoint  # noqa: E402

KERNELS = ROOT / "benchmarks" / "kernels"
SPECS = sorted(p.stem for p in (ROOT / "specs").glob("*.py") if not p.name.startswith("_"))


def search_best(spec: Path, budget: str, seed: int, run_dir: Path) -> dict:
    """What a 2-chain mixed search found: proved best, fastest unproved, rate."""
    cmd = [sys.executable, "-m", "stochopt", "optimize", str(spec), "--proposer", "mixed",
           "--chains", "2", "--budget", budget, "--seed", str(seed), "--run-dir",
           str(run_dir), "--quiet", "--no-db"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr.strip()[-800:]}")
    best = json.loads((run_dir / "best.json").read_text())
    state = json.loads((run_dir / "checkpoint.json").read_text())
    proved = bool((best.get("verdict") or {}).get("equivalent")) or \
        best.get("proof") == PROOF_LOWERING
    return {"cycles": best["cycles"], "proved": proved,
            "unproved": (best.get("unproved") or {}).get("cycles"),
            "rate": state["proposals"] / max(state["elapsed_s"], 1e-9)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", default="5m", help="search budget per spec (5m, 120s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--specs", nargs="+", default=SPECS, choices=SPECS)
    parser.add_argument("--out", type=Path, default=Path("/tmp/stochopt-hand-vs-search"))
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--no-greedy", action="store_true", help="skip greedy")
    args = parser.parse_args()
    machine = load_machine("mncore2")
    rows = []
    for name in args.specs:
        spec_path = ROOT / "specs" / f"{name}.py"
        spec = load_spec(spec_path)
        baseline = lower(spec, machine)
        row = {"spec": name, "baseline": cost(baseline, machine).cycles, "hand": None,
               "greedy": None, "greedy_s": None}
        if (KERNELS / f"{name}.leir").is_file():
            hand_kernel, _ = read_kernel_file(KERNELS / f"{name}.leir", machine)
            row["hand"] = cost(hand_kernel, machine).cycles
        if not args.no_greedy:
            result = greedy_fixpoint(baseline, spec, machine, seed=args.seed)
            row.update(greedy=result.cycles, greedy_s=round(result.seconds, 1))
        started = time.perf_counter()
        row["search"] = search_best(spec_path, args.budget, args.seed, args.out / name)
        rows.append(row)
        print(f"{name}: done ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    print(f"search: `python -m stochopt optimize specs/X.py --proposer mixed --chains 2 "
          f"--budget {args.budget} --seed {args.seed}`; greedy: `greedy_fixpoint(lower(spec), "
          f"spec, MNCORE2, seed={args.seed})`\n")
    print("| spec | baseline | greedy (s) | search, proved | found, not proved | cand/s | "
          "greedy / search | by hand | hand / search |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        found = r["search"]
        greedy = "—" if r["greedy"] is None else f"{r['greedy']:,} ({r['greedy_s']:.0f})"
        versus = "—" if r["greedy"] is None else f"{r['greedy'] / found['cycles']:.2f}"
        unproved = "—" if found["unproved"] is None else f"{found['unproved']:,}"
        hand = "—" if r["hand"] is None else f"{r['hand']:,}"
        share = "—" if r["hand"] is None else f"{r['hand'] / found['cycles']:.2f}"
        print(f"| {r['spec']} | {r['baseline']:,} | {greedy} | {found['cycles']:,} | "
              f"{unproved} | {found['rate']:,.0f} | {versus} | {hand} | {share} |")
    if args.json:
        args.json.write_text(json.dumps({"budget": args.budget, "seed": args.seed,
                                         "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
