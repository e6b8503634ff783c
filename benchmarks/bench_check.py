"""What one full check of a kernel costs: cold (a check with nothing computed before, as
`stochopt verify` runs it) and warm (in a check context that has already checked other
kernels of the spec, as a run's check worker holds one: verify/bank.py).

    python benchmarks/bench_check.py benchmarks/kernels/mla_decode.leir
    python benchmarks/bench_check.py greedy --spec specs/mla_decode.py   # greedy's kernel
    python benchmarks/bench_check.py KERNEL.leir --examples 200 --runs 3 --json
    python benchmarks/bench_check.py KERNEL.leir --warm-with OTHER.leir   # warm with others
    python benchmarks/bench_check.py KERNEL.leir --compare-with /tmp/old  # cold, side by side
    python benchmarks/bench_check.py KERNEL.leir --profile              # where the time goes

Each run is a fresh process (one BLAS thread): it times the cold check, then warms a
check context with the --warm-with kernels (default: the spec's lowering) and times the
kernel's check in it. CPU seconds (time.process_time) are the figure to read on a
shared machine; wall seconds count the waits for a core. Medians of --runs runs.
--compare-with runs the cold check of an older checkout (one without verify/bank.py)
in alternation with this one, so load hits both alike. No assertions: these are
measurements, the test suite never times anything.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# one run: argv = checkout, spec, kernel text file, examples, seed, profile, warm texts...
_ONE_RUN = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from stochopt.leir.parser import parse
from stochopt.lower import lower
from stochopt.spec import load_spec
from stochopt.verify.check import check
spec = load_spec(sys.argv[2])
baseline = lower(spec)
kernel = parse(open(sys.argv[3]).read())
examples, seed, profile = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6] == "yes"
warm_with = [parse(open(p).read()) for p in sys.argv[7:]] or [baseline]

def timed(context=None):
    extra = {} if context is None else {"context": context}
    profiler = None
    if profile:
        import cProfile
        profiler = cProfile.Profile()
        profiler.enable()
    wall, cpu = time.perf_counter(), time.process_time()
    verdict = check(kernel, spec, examples=examples, seed=seed, baseline=baseline, **extra)
    out = {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
           "equivalent": verdict.equivalent, "examples": verdict.examples,
           "max_precision_error": verdict.max_precision_error}
    if profiler is not None:
        import io, pstats
        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(30)
        out["profile"] = text.getvalue()
    return out

result = {"cold": timed()}
try:
    from stochopt.verify.bank import CheckContext
except ImportError:  # an older checkout: cold only
    CheckContext = None
if CheckContext is not None:
    context = CheckContext(spec, baseline)
    for other in warm_with:
        check(other, spec, examples=examples, seed=seed, baseline=baseline, context=context)
    result["warm"] = timed(context)
    result["warm_again"] = timed(context)  # the same kernel once more
print("RESULT " + json.dumps(result))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kernel", help="a .leir file, or 'greedy' (greedy's kernel of --spec)")
    parser.add_argument("--spec", default=None, help="the spec (default: the kernel's)")
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warm-with", nargs="*", default=[],
                        help=".leir files checked in the context first (default: the "
                             "spec's lowering)")
    parser.add_argument("--compare-with", type=Path, default=None,
                        help="an older checkout whose cold check runs beside this one's")
    parser.add_argument("--profile", action="store_true", help="cProfile each check")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    spec_path, kernel_file = _kernel(args)
    checkouts = [("this checkout", REPO)]
    if args.compare_with is not None:
        checkouts.append((str(args.compare_with), args.compare_with.resolve()))
    runs: dict[str, list[dict]] = {label: [] for label, _ in checkouts}
    for _ in range(args.runs):
        for label, checkout in checkouts:  # alternating, so load hits both alike
            runs[label].append(_one_run(checkout, spec_path, kernel_file, args))
    summary = {label: _summary(results) for label, results in runs.items()}
    if args.json:
        print(json.dumps({"kernel": args.kernel, "spec": spec_path, "examples": args.examples,
                          "seed": args.seed, "runs": args.runs, "results": summary}))
        return
    for label, results in summary.items():
        for phase, figures in results.items():
            print(f"{label:>16}  {phase:<10} median {figures['cpu_s']:7.2f} s CPU "
                  f"{figures['wall_s']:7.2f} s wall  (CPU {figures['cpu_runs']}), "
                  f"{figures['verdict']}")
    if args.profile:
        for results in runs.values():
            for phase, figures in results[-1].items():
                print(f"\n--- {phase} ---\n{figures.get('profile', '')}")


def _kernel(args) -> tuple[str, str]:
    """(spec path, a file holding the kernel's text)."""
    import tempfile

    from stochopt.kernel_file import spec_for_kernel
    from stochopt.leir.parser import parse
    from stochopt.leir.render import render
    if args.kernel == "greedy":
        if args.spec is None:
            sys.exit("greedy needs --spec")
        import random

        from stochopt.lower import lower
        from stochopt.machine import MNCORE2
        from stochopt.spec import load_spec
        from stochopt.transform.greedy import descend
        from stochopt.verify import ScreeningSet
        spec = load_spec(args.spec)
        baseline = lower(spec)
        screening = ScreeningSet(spec, baseline, MNCORE2, seed=0)
        kernel = descend(baseline, MNCORE2, screening.error, random.Random(0))[0]
        text = render(kernel)
        spec_path = args.spec
    else:
        text = Path(args.kernel).read_text()
        spec_path = args.spec or spec_for_kernel(args.kernel, parse(text)).path
    handle = tempfile.NamedTemporaryFile("w", suffix=".leir", delete=False)
    handle.write(text)
    handle.close()
    return str(Path(spec_path).resolve()), handle.name


def _one_run(checkout: Path, spec_path: str, kernel_file: str, args) -> dict:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(checkout)}
    out = subprocess.run([sys.executable, "-c", _ONE_RUN, str(checkout), spec_path,
                          kernel_file, str(args.examples), str(args.seed),
                          "yes" if args.profile else "no", *args.warm_with],
                         capture_output=True, text=True, env=env, cwd=checkout)
    if out.returncode != 0:
        sys.exit(f"a run failed in {checkout}:\n{out.stderr[-2000:]}")
    line = next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def _summary(results: list[dict]) -> dict:
    out = {}
    for phase in results[0]:
        cpus = [r[phase]["cpu_s"] for r in results]
        walls = [r[phase]["wall_s"] for r in results]
        last = results[-1][phase]
        out[phase] = {"cpu_s": round(statistics.median(cpus), 3),
                      "wall_s": round(statistics.median(walls), 3),
                      "cpu_runs": ", ".join(f"{c:.2f}" for c in cpus),
                      "verdict": f"{'equivalent' if last['equivalent'] else 'NOT equivalent'}"
                                 f", {last['examples']} examples, max precision error "
                                 f"{last['max_precision_error']:.4f}"}
    return out


if __name__ == "__main__":
    main()
