"""The search's inner loop on one candidate: parse + check + cost of a kernel.

    python benchmarks/bench_inner_loop.py                 # both softmax examples
    python benchmarks/bench_inner_loop.py --repeat 5000 --machine small
    python benchmarks/bench_inner_loop.py --profile       # cProfile of the whole loop

Prints, per kernel and per step, the median time and its spread (10th-90th percentile)
over many repetitions, timed with time.perf_counter. The target is well under a
millisecond per candidate for a softmax kernel.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

from stochopt.backend.cost import cost
from stochopt.leir import parse, typecheck
from stochopt.machine import load_machine

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"
KERNELS = ("softmax_plain.leir", "softmax_fast.leir")


def timings(fn, repeat: int, warmup: int = 50) -> list[float]:
    """Seconds per call of fn, repeat times, after a few warm-up calls."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def summary(samples: list[float]) -> str:
    deciles = statistics.quantiles(samples, n=10)
    return (f"median {statistics.median(samples) * 1e6:7.1f} us   "
            f"p10 {deciles[0] * 1e6:7.1f}   p90 {deciles[-1] * 1e6:7.1f}")


def steps(text: str, machine) -> dict:
    kernel = parse(text, machine)
    return {
        "parse": lambda: parse(text, machine),
        "typecheck": lambda: typecheck(kernel, machine),
        "cost": lambda: cost(kernel, machine),
        "parse+typecheck+cost": lambda: cost(typecheck(parse(text, machine), machine), machine),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2000)
    ap.add_argument("--machine", default="mncore2")
    ap.add_argument("--profile", action="store_true", help="cProfile the whole loop")
    ap.add_argument("kernels", nargs="*", help="kernel files (default: the softmax examples)")
    args = ap.parse_args(argv)
    machine = load_machine(args.machine)
    paths = [Path(p) for p in args.kernels] or [EXAMPLES / k for k in KERNELS]
    print(f"python {sys.version.split()[0]}, machine {machine.name}, "
          f"{args.repeat} repetitions")
    for path in paths:
        text = path.read_text()
        print(f"\n{path.name}: {cost(parse(text, machine), machine).cycles} cycles")
        for step, fn in steps(text, machine).items():
            print(f"  {step:17} {summary(timings(fn, args.repeat))}")
        if args.profile:
            loop = steps(text, machine)["parse+typecheck+cost"]
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(args.repeat):
                loop()
            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
    return 0


if __name__ == "__main__":
    sys.exit(main())
