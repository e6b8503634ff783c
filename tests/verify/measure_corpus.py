"""Measure the verifier on its corpora at the full default check (docs/verification.md).

    python tests/verify/measure_corpus.py [--examples 200] [--seeds 0 1 2] [--timing-runs 3]
                                          [--timing-only] [--compare-with CHECKOUT]
                                          [--corpus both|wrong|equivalent]
                                          [--kernels NAME ...]

Prints the kill rate (wrong kernels refused / total, per seed) with the defence that
refused each (the static range analysis, or the check that failed and which inputs
showed it), the false rejections (equivalent kernels refused, per seed), and the time
of a full check of the baseline kernel on softmax and on mla_decode. With
--compare-with (a git worktree of an older commit) the timings of both checkouts run
side by side, alternating, each in its own process. Not a test: it takes minutes, and
its times depend on the machine (see the note on OPENBLAS_NUM_THREADS in
docs/verification.md).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # this checkout's stochopt, not an installed one

from stochopt.leir import parse  # noqa: E402
from stochopt.lower import lower  # noqa: E402
from stochopt.spec import load_spec  # noqa: E402
from stochopt.verify import check  # noqa: E402
from stochopt.verify.bank import CheckContext  # noqa: E402

CORPUS = Path(__file__).resolve().parent / "corpus"


def _read(path: Path, cache: dict):
    """(kernel, spec, baseline, check context): the kernels of one spec share a context
    (verify/bank.py), as a run's checks do; one spec's context is kept at a time."""
    text = path.read_text()
    spec_path = re.match(r"# spec: (\S+)\n", text).group(1)
    if spec_path not in cache:
        spec = load_spec(REPO / spec_path)
        cache[spec_path] = (spec, lower(spec))
    spec, baseline = cache[spec_path]
    if cache.get("context", (None,))[0] != spec_path:
        cache["context"] = (spec_path, CheckContext(spec, baseline))
    return parse(text), spec, baseline, cache["context"][1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--timing-runs", type=int, default=3)
    parser.add_argument("--timing-only", action="store_true", help="skip the corpora")
    parser.add_argument("--corpus", choices=("both", "wrong", "equivalent"), default="both",
                        help="which corpus to measure (each takes minutes per seed)")
    parser.add_argument("--kernels", nargs="+", default=None, metavar="NAME",
                        help="only these kernels (file names without .leir), in this order")
    parser.add_argument("--compare-with", type=Path, default=None,
                        help="an older checkout to time side by side")
    args = parser.parse_args()
    cache: dict = {}
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}, "
          f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cpus")

    if not args.timing_only:
        _corpora(args, cache)
    if args.timing_runs > 0:
        _timing(args)


def _selected(args, paths: list[Path]) -> list[Path]:
    if args.kernels is None:
        return paths
    by_name = {p.stem: p for p in paths}
    return [by_name[name] for name in args.kernels if name in by_name]


def _defence(v) -> str:
    """Which defence refused a kernel: the range analysis, or the failed check and the
    inputs that showed it."""
    cex = v.counterexample
    if v.range_refusal:
        return "range analysis" + (f" (then {cex.mismatch.check}, {cex.found_by[16:]})"
                                   if cex.mismatch.check != "range" else "")
    return f"{cex.mismatch.check}, {cex.found_by}"


def _corpora(args, cache: dict) -> None:
    if args.corpus != "equivalent":
        _wrong(args, cache)
    if args.corpus != "wrong":
        _equivalent(args, cache)


def _wrong(args, cache: dict) -> None:
    wrong = _selected(args, sorted((CORPUS / "wrong").glob("*.leir")))
    accepted: dict[int, list[str]] = {seed: [] for seed in args.seeds}
    by_defence: dict[str, int] = {}
    for path in wrong:
        kernel, spec, baseline, context = _read(path, cache)
        line = []
        for seed in args.seeds:
            v = check(kernel, spec, examples=args.examples, seed=seed, baseline=baseline,
                      context=context)
            if v.equivalent:
                accepted[seed].append(path.stem)
                line.append(f"seed {seed} ACCEPTED")
                continue
            line.append(f"seed {seed} after {v.examples}")
            if seed == args.seeds[0]:
                kind = _defence(v)
                by_defence[kind] = by_defence.get(kind, 0) + 1
                line.append(kind)
        red = "red-team" if "# witness:" in path.read_text() else "old"
        print(f"  wrong {red:8s} {path.stem:48s} " + "; ".join(line), flush=True)
    for seed in args.seeds:
        print(f"kill rate (seed {seed}): {len(wrong) - len(accepted[seed])}/{len(wrong)} "
              f"refused; accepted: {accepted[seed]}")
    print(f"defences (seed {args.seeds[0]}): {by_defence}")


def _equivalent(args, cache: dict) -> None:
    equivalent = _selected(args, sorted((CORPUS / "equivalent").glob("*.leir")))
    for seed in args.seeds:
        rejected = []
        for path in equivalent:
            kernel, spec, baseline, context = _read(path, cache)
            start = time.perf_counter()
            v = check(kernel, spec, examples=args.examples, seed=seed, baseline=baseline,
                      context=context)
            took = time.perf_counter() - start
            if not v.equivalent:
                rejected.append(path.stem)
            print(f"  equivalent {path.stem:45s} {'accepted' if v.equivalent else 'REFUSED'}"
                  f"  seed {seed}  {took:6.2f} s  precision {v.max_precision_error:.3f}"
                  + (f"  {v.counterexample.describe()}" if v.counterexample else ""),
                  flush=True)
        print(f"false rejections (seed {seed}): {len(rejected)}/{len(equivalent)} {rejected}")


# one full check of a baseline (lowering included) with the stochopt of a checkout, in
# a fresh interpreter so that no other checkout's stochopt is already imported
_TIME_ONE = """
import sys, time
sys.path.insert(0, sys.argv[1])
from stochopt.lower import lower
from stochopt.spec import load_spec
from stochopt.verify import check
spec = load_spec(sys.argv[2])
start, cpu = time.perf_counter(), time.process_time()
verdict = check(lower(spec), spec, examples=int(sys.argv[3]))
took, cpu_took = time.perf_counter() - start, time.process_time() - cpu
assert verdict.equivalent
print(f"{took:.4f} {cpu_took:.4f}")
"""


def _timing(args) -> None:
    checkouts = [("this checkout", REPO)]
    if args.compare_with is not None:
        checkouts.append((str(args.compare_with), args.compare_with))
    for name in ("softmax", "mla_decode"):
        # wall-clock seconds and CPU seconds of the process: on a loaded machine the
        # wall clock counts the waits for a core, the CPU time much less so
        times: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in checkouts}
        for _ in range(args.timing_runs):
            for label, checkout in checkouts:  # alternating, so load hits both alike
                out = subprocess.run([sys.executable, "-c", _TIME_ONE,
                                      str(Path(checkout).resolve()),
                                      str(REPO / "specs" / f"{name}.py"), str(args.examples)],
                                     capture_output=True, text=True, check=True)
                wall, cpu = out.stdout.split()[-2:]
                times[label].append((float(wall), float(cpu)))
        for label, values in times.items():
            walls, cpus = [v[0] for v in values], [v[1] for v in values]
            print(f"full check of the {name} baseline, {args.examples} examples, {label}: "
                  f"median {statistics.median(walls):.2f} s wall, "
                  f"{statistics.median(cpus):.2f} s CPU over {len(values)} runs "
                  f"(wall {', '.join(f'{t:.2f}' for t in walls)}; "
                  f"CPU {', '.join(f'{t:.2f}' for t in cpus)})")
        if len(checkouts) == 2:
            new, old = (times[label] for label, _ in checkouts)
            for i, what in enumerate(("wall", "CPU")):
                ratio = statistics.median(v[i] for v in new) / statistics.median(
                    v[i] for v in old)
                print(f"  ratio this / {checkouts[1][0]}, {what}: {ratio:.2f}x")

if __name__ == "__main__":
    main()
