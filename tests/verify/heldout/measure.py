"""Measure a checkout's verifier on the held-out kernels (tests/verify/heldout/README.md).

    python tests/verify/heldout/measure.py [--checkout DIR] [--seeds 0 1 2]
                                           [--examples 200] [--kernels NAME ...]
                                           [--set wrong|equivalent|both] [--json OUT]

Each kernel is checked with stochopt.verify (the public API, so any checkout that has it
can be measured) on each seed, and each wrong kernel is replayed on its witness input
(witness/NAME.npz, built by witnesses.py). A line per kernel gives the verdict per seed
with the defence that refused it (the static range analysis, or the check that failed
and the inputs that found it), or its largest precision error where it was accepted;
the summary lines count the wrong kernels refused and the equivalent ones accepted,
per seed. --checkout measures another checkout's stochopt (a git worktree of another
commit, or the improved verifier's branch) on the kernels and witnesses of this one.
Not a test: a full run takes tens of minutes on a loaded machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
SETS = ("wrong", "equivalent")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, default=REPO,
                        help="the checkout whose stochopt is measured (default: this one)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--set", choices=(*SETS, "both"), default="both")
    parser.add_argument("--kernels", nargs="+", default=None, metavar="NAME",
                        help="only these kernels (file stems), in this order")
    parser.add_argument("--no-witness", action="store_true",
                        help="skip the replays of the wrong kernels on their witnesses")
    parser.add_argument("--json", type=Path, default=None, help="also write the results")
    return parser.parse_args()


def kernels(args: argparse.Namespace) -> list[tuple[str, Path]]:
    """(set, path) of every kernel measured, in set and name order or as --kernels says."""
    found = [(s, p) for s in SETS if args.set in (s, "both")
             for p in sorted((HERE / s).glob("*.leir"))]
    if args.kernels is None:
        return found
    by_name = {p.stem: (s, p) for s, p in found}
    missing = [n for n in args.kernels if n not in by_name]
    if missing:
        raise SystemExit(f"no held-out kernel named {', '.join(missing)}")
    return [by_name[n] for n in args.kernels]


def defence(verdict) -> str:
    """What refused a kernel: the range analysis (and the input that then showed it), or
    the check that failed and the inputs that found it."""
    cex = verdict.counterexample
    if verdict.interrupted:
        return "interrupted"
    if verdict.range_refusal:
        shown = cex is not None and cex.mismatch.check != "range"
        return "range analysis" + (f" (then {cex.mismatch.check})" if shown else "")
    return f"{cex.mismatch.check}, {cex.found_by}" if cex else "refused"


def measure(verify, path: Path, seed: int, examples: int, inputs: Path | None = None
            ) -> dict:
    start = time.process_time()
    verdict = verify(str(path), examples=examples, seed=seed,
                     inputs=None if inputs is None else str(inputs))
    out = {"refused": not verdict.equivalent, "examples": verdict.examples,
           "cpu_s": round(time.process_time() - start, 2),
           "max_precision_error": verdict.max_precision_error}
    if not verdict.equivalent:
        out["defence"] = defence(verdict)
        cex = verdict.counterexample
        if cex is not None and cex.mismatch.check != "range":
            out["excess"] = cex.mismatch.error  # how far past its limit (> 1 fails)
    return out


def describe(result: dict) -> str:
    if not result["refused"]:
        return f"accepted ({result['max_precision_error']:.3g})"
    excess = result.get("excess")
    past = "" if excess is None else (f", {excess:.3g}x" if excess < float("inf") else
                                      ", non-finite")
    return f"REFUSED by {result['defence']}{past}"


def main() -> None:
    args = parse_args()
    sys.path.insert(0, str(args.checkout.resolve()))  # the measured checkout's stochopt
    os.chdir(REPO)  # '# spec:' lines are relative to this repository's root
    import stochopt
    from stochopt.errors import StochoptError

    print(f"stochopt from {Path(stochopt.__file__).resolve().parent}; "
          f"{args.examples} examples, seeds {args.seeds}; load average "
          f"{os.getloadavg()[0]:.2f}, {os.cpu_count()} cpus", flush=True)
    results: dict[str, dict] = {}
    for kind, path in kernels(args):
        row: dict = {"set": kind, "spec": re.match(r"# spec: (\S+)", path.read_text())[1]}
        try:
            for seed in args.seeds:
                row[f"seed {seed}"] = measure(stochopt.verify, path, seed, args.examples)
            witness = HERE / "witness" / f"{path.stem}.npz"
            if kind == "wrong" and not args.no_witness:
                row["witness"] = measure(stochopt.verify, path, 0, 1, witness)
        except StochoptError as e:  # a checkout that cannot read the kernel or its input
            row["error"] = str(e)
        results[path.stem] = row
        cells = [f"seed {s}: {describe(row[f'seed {s}'])}" for s in args.seeds
                 if f"seed {s}" in row]
        if "witness" in row:
            cells.append(f"witness: {describe(row['witness'])}")
        if "error" in row:
            cells.append(f"error: {row['error']}")
        print(f"  {kind:10s} {path.stem:56s} " + "; ".join(cells), flush=True)
    summarize(results, args.seeds)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=float) + "\n")


def summarize(results: dict[str, dict], seeds: list[int]) -> None:
    for kind, good, word in (("wrong", True, "refused"), ("equivalent", False, "accepted")):
        rows = {n: r for n, r in results.items() if r["set"] == kind}
        if not rows:
            continue
        per_seed = []
        for seed in seeds:
            ok = [n for n, r in rows.items()
                  if f"seed {seed}" in r and r[f"seed {seed}"]["refused"] == good]
            per_seed.append(f"seed {seed} {len(ok)}/{len(rows)}")
        always = [n for n, r in rows.items()
                  if all(f"seed {s}" in r and r[f"seed {s}"]["refused"] == good
                         for s in seeds)]
        line = (f"{kind} kernels {word}: " + ", ".join(per_seed)
                + f"; on every seed {len(always)}/{len(rows)}")
        if kind == "wrong":
            replays = [r["witness"]["refused"] for r in rows.values() if "witness" in r]
            line += f"; refused on their witness {sum(replays)}/{len(replays)}"
        print(line)


if __name__ == "__main__":
    main()
