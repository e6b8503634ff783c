"""The search against the kernels written by hand (benchmarks/kernels/), side by side.

    python benchmarks/hand_vs_search.py --budget 5m            # the table of the README
    python benchmarks/hand_vs_search.py --budget 2m --specs matmul mla_decode

For each spec with a hand-written kernel: its baseline, the hand kernel's cycles, what
greedy (the rewrite rules to a fixpoint, stochopt/transform/greedy.py) reaches and how long
it took, and the best of `stochopt optimize --proposer mixed --chains 2` after the
budget; then the search's share of the hand kernel (hand / search, 1.00 = as fast).
Prints a markdown table; the run directories stay under --out for `stochopt report`.
Greedy runs in this process, the searches one after the other, so the figures are
comparable only when the machine is otherwise quiet.
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
from stochopt.backend.machine import load_machine  # noqa: E402
from stochopt.kernel_file import read_kernel_file  # noqa: E402
from stochopt.lower.lowering import lower  # noqa: E402
from stochopt.spec import load_spec  # noqa: E402
from stochopt.transform.greedy import greedy_fixpoint  # noqa: E402

SPECS = ("attention_scores", "matmul", "attention_decode", "mla_decode")


def search_best(spec: Path, budget: str, seed: int, run_dir: Path) -> tuple[int, bool]:
    """Best cycles of a 2-chain mixed search and whether that kernel was proved."""
    cmd = [sys.executable, "-m", "stochopt", "optimize", str(spec), "--proposer", "mixed",
           "--chains", "2", "--budget", budget, "--seed", str(seed), "--run-dir",
           str(run_dir), "--quiet"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr.strip()[-800:]}")
    best = json.loads((run_dir / "best.json").read_text())
    return best["cycles"], bool((best.get("verdict") or {}).get("equivalent"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", default="5m", help="search budget per spec (5m, 120s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--specs", nargs="+", default=list(SPECS), choices=SPECS)
    parser.add_argument("--out", type=Path, default=Path("/tmp/stochopt-hand-vs-search"))
    parser.add_argument("--no-greedy", action="store_true", help="skip greedy (slow on mla)")
    args = parser.parse_args()
    machine = load_machine("mncore2")
    rows = []
    for name in args.specs:
        spec_path = ROOT / "specs" / f"{name}.py"
        spec = load_spec(spec_path)
        baseline = lower(spec, machine)
        hand_kernel, _ = read_kernel_file(ROOT / "benchmarks" / "kernels" / f"{name}.leir",
                                          machine)
        hand = cost(hand_kernel, machine).cycles
        greedy = "—"
        if not args.no_greedy:
            result = greedy_fixpoint(baseline, spec, machine, seed=args.seed)
            greedy = f"{result.cycles:,} ({result.seconds:.0f} s)"
        started = time.perf_counter()
        found, proved = search_best(spec_path, args.budget, args.seed, args.out / name)
        took = time.perf_counter() - started
        rows.append((name, cost(baseline, machine).cycles, hand, greedy, found, proved, took))
        print(f"{name}: done ({took:.0f} s)", file=sys.stderr)
    print(f"search: `python -m stochopt optimize specs/X.py --proposer mixed --chains 2 "
          f"--budget {args.budget} --seed {args.seed}`; greedy: `greedy_fixpoint(lower(spec), "
          f"spec, MNCORE2, seed={args.seed})`\n")
    print("| spec | baseline | by hand | greedy | search | hand / search |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, base, hand, greedy, found, proved, _ in rows:
        mark = "" if proved else " (unproved)"
        print(f"| {name} | {base:,} | {hand:,} | {greedy} | {found:,}{mark} | "
              f"{hand / found:.2f} |")


if __name__ == "__main__":
    main()
