"""Measure the verifier on its corpora at the full default check (docs/verification.md).

    python tests/verify/measure_corpus.py [--examples 200] [--seeds 0 1 2] [--timing-runs 3]
                                          [--timing-only]

Prints the kill rate (wrong kernels refused / total), the false rejections (equivalent
kernels refused, per seed), and the time of a full check of the baseline kernel on
softmax and on mla_decode. Not a test: it takes minutes, and its times depend on the
machine (see the note on OPENBLAS_NUM_THREADS in docs/verification.md).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import time
from pathlib import Path

from stochopt.leir import parse
from stochopt.lower import lower
from stochopt.spec import load_spec
from stochopt.verify import check

REPO = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent / "corpus"


def _read(path: Path, cache: dict):
    text = path.read_text()
    spec_path = re.match(r"# spec: (\S+)\n", text).group(1)
    if spec_path not in cache:
        spec = load_spec(REPO / spec_path)
        cache[spec_path] = (spec, lower(spec))
    return (parse(text), *cache[spec_path])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--timing-runs", type=int, default=3)
    parser.add_argument("--timing-only", action="store_true", help="skip the corpora")
    args = parser.parse_args()
    cache: dict = {}
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}, "
          f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cpus")

    if not args.timing_only:
        _corpora(args, cache)
    _timing(args)


def _corpora(args, cache: dict) -> None:
    wrong = sorted((CORPUS / "wrong").glob("*.leir"))
    refused, by_check = 0, {}
    for path in wrong:
        kernel, spec, baseline = _read(path, cache)
        v = check(kernel, spec, examples=args.examples, seed=args.seeds[0], baseline=baseline)
        if not v.equivalent:
            refused += 1
            m = v.counterexample.mismatch
            by_check[m.check] = by_check.get(m.check, 0) + 1
        print(f"  wrong      {path.stem:45s} {'refused' if not v.equivalent else 'ACCEPTED'}"
              f"  after {v.examples} inputs"
              + (f"  ({v.counterexample.mismatch.check})" if v.counterexample else ""))
    print(f"kill rate: {refused}/{len(wrong)} refused; by check: {by_check}")

    equivalent = sorted((CORPUS / "equivalent").glob("*.leir"))
    for seed in args.seeds:
        rejected = []
        for path in equivalent:
            kernel, spec, baseline = _read(path, cache)
            start = time.perf_counter()
            v = check(kernel, spec, examples=args.examples, seed=seed, baseline=baseline)
            took = time.perf_counter() - start
            if not v.equivalent:
                rejected.append(path.stem)
            print(f"  equivalent {path.stem:45s} {'accepted' if v.equivalent else 'REFUSED'}"
                  f"  seed {seed}  {took:6.2f} s  precision {v.max_precision_error:.3f}"
                  + (f"  {v.counterexample.describe()}" if v.counterexample else ""))
        print(f"false rejections (seed {seed}): {len(rejected)}/{len(equivalent)} {rejected}")


def _timing(args) -> None:
    for name in ("softmax", "mla_decode"):
        spec = load_spec(REPO / "specs" / f"{name}.py")
        kernel = lower(spec)
        times = []
        for _ in range(args.timing_runs):
            start = time.perf_counter()  # the whole check, lowering the baseline included
            v = check(kernel, spec, examples=args.examples)
            times.append(time.perf_counter() - start)
            assert v.equivalent
        print(f"full check of the {name} baseline, {args.examples} examples: median "
              f"{statistics.median(times):.2f} s over {len(times)} runs "
              f"({', '.join(f'{t:.2f}' for t in times)})")


if __name__ == "__main__":
    main()
