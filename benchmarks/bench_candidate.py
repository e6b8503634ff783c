"""What one candidate costs after parse + check + cost: screening, the full check, and the
chain's whole step; and how many candidates a mutate chain gets through per second.

    python benchmarks/bench_candidate.py                 # softmax and mla_decode
    python benchmarks/bench_candidate.py --profile       # where a chain step's time goes
    python benchmarks/bench_candidate.py --run 60        # optimize, mutate, 2 chains, 60 s
    python benchmarks/bench_candidate.py --run 60 --runs 3   # median and spread of 3 runs
    python benchmarks/bench_candidate.py --run 60 --proposer mixed   # every builtin arm
    python benchmarks/bench_candidate.py --steps 5000     # one chain: per CPU second

Medians and spreads over repetitions (time.perf_counter). A compound move or a lookahead
is one candidate, the kernel it ends in, however many kernels it made on the way. No
assertions: these are measurements, the test suite never times anything.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time
from pathlib import Path

from bench_inner_loop import timings

from stochopt.backend.cost import cost
from stochopt.lower import lower
from stochopt.machine import MNCORE2
from stochopt.search.chain import ChainConfig
from stochopt.search.chain_run import ChainRun
from stochopt.spec import load_spec
from stochopt.verify import ScreeningSet, check

SPECS = Path(__file__).resolve().parents[1] / "specs"


def spread(samples: list[float], unit: float = 1e3, name: str = "ms") -> str:
    q = statistics.quantiles(samples, n=10) if len(samples) > 1 else samples * 9
    return (f"median {statistics.median(samples) * unit:8.2f} {name}  "
            f"p10 {q[0] * unit:8.2f}  p90 {q[-1] * unit:8.2f}")


def timed(fn, repeat: int) -> list[float]:
    return timings(fn, repeat, warmup=1)


def chain_rate(spec, baseline, seconds: float, arms: list[str], seed: int,
               full_examples: int = 200) -> float:
    chain = ChainRun(0, spec, baseline, cost(baseline, MNCORE2).cycles, baseline, MNCORE2,
                     arms, seed, ChainConfig(full_examples=full_examples))
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        chain.step()
        n += 1
    screening = chain.screening
    if hasattr(screening, "hits"):  # the value caches (absent from older versions)
        print(f"    seed {seed}: {n / seconds:.0f}/s, screening verdicts from the cache "
              f"{screening.hits}/{screening.hits + screening.misses}, node values "
              f"computed {screening.node_values.computed}, full checks {chain.checks.full_checks}")
    return n / seconds


def chain_steps(spec, baseline, steps: int, seed: int = 0,
                arms: tuple[str, ...] = ("mutate",)) -> None:
    """One mutate chain in this process for a fixed number of steps, full checks handed
    off as with a check pool: candidates per CPU second (time.process_time, so a shared
    machine's load matters less than for wall time) and a digest of the events, which
    is the same before and after a change that keeps behaviour."""
    import hashlib
    import json
    from dataclasses import replace

    from stochopt.leir.render import render
    chain = ChainRun(0, spec, baseline, cost(baseline, MNCORE2).cycles, baseline, MNCORE2,
                     list(arms), seed, ChainConfig())
    chain.checks.checks_elsewhere = True
    digest = hashlib.sha256()
    started = time.process_time()
    for _ in range(steps):
        event, _, _ = chain.step()
        chain.checks.submissions.clear()
        event.pop("seconds")
        digest.update(json.dumps(event, sort_keys=True, default=str).encode())
    cpu = time.process_time() - started
    digest.update(render(replace(chain.current, spec_path=None)).encode())  # not its path
    print(f"  {steps} steps: {steps / cpu:.0f} candidates per CPU second, events "
          f"{digest.hexdigest()[:16]}")


def run_rate(spec_path: Path, seconds: float, chains: int, full_examples: int,
             runs: int = 1, proposer: str = "mutate") -> None:
    """`optimize --proposer mutate` (or ``proposer``) with N chains, candidates per
    second of the run (its full checks included, of full_examples each); with
    ``runs`` > 1, the median and spread of that many runs. CPU seconds (this process,
    and the chain and check processes it started) say how much of the machine the runs
    got, which matters on a shared one."""
    import resource
    import tempfile

    from stochopt.search.optimize import optimize
    rates = []
    for run in range(runs):
        before = [resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                        resource.RUSAGE_CHILDREN)]
        with tempfile.TemporaryDirectory() as tmp:
            result = optimize(str(spec_path), budget=seconds, proposer=proposer,
                              chains=chains, run_dir=str(Path(tmp) / "run"),
                              config=ChainConfig(full_examples=full_examples), db=False)
        cpu = [_cpu(resource.getrusage(who)) - _cpu(was) for who, was in
               zip((resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN), before, strict=True)]
        rates.append(result.proposals / seconds)
        unproved = f", unproved {result.unproved_cycles}" if result.unproved_cycles else ""
        print(f"  run {run + 1}: optimize --proposer {proposer}, {chains} chains, "
              f"{seconds:.0f} s: "
              f"{result.proposals} candidates, {rates[-1]:.0f}/s of budget; best "
              f"{result.best_cycles} cycles{unproved}; CPU s main {cpu[0]:.1f}, "
              f"chains and checks {cpu[1]:.1f}")
    if runs > 1:
        print(f"  median {statistics.median(rates):.0f}/s, min {min(rates):.0f}, "
              f"max {max(rates):.0f} ({runs} runs)")


def _cpu(usage) -> float:
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specs", default="softmax,mla_decode")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--seconds", type=float, default=10.0, help="per chain-rate sample")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--run", type=float, default=0.0, metavar="SECONDS",
                    help="only time a whole `optimize --proposer mutate` run per spec")
    ap.add_argument("--chains", type=int, default=2, help="chains of the --run")
    ap.add_argument("--runs", type=int, default=1, help="how many --run runs per spec")
    ap.add_argument("--proposer", default="mutate",
                    help="the proposer of the --run and --steps runs")
    ap.add_argument("--steps", type=int, default=0,
                    help="only run one chain for this many steps (CPU time, events digest)")
    ap.add_argument("--full-examples", type=int, default=200,
                    help="examples per full check in the chains (1: time the chain's own "
                         "path, as when full checks run beside the chains)")
    args = ap.parse_args()
    for name in args.specs.split(","):
        if args.run:
            print(f"== {name}")
            run_rate(SPECS / f"{name}.py", args.run, args.chains, args.full_examples,
                     args.runs, args.proposer)
            continue
        spec = load_spec(SPECS / f"{name}.py")
        baseline = lower(spec)
        if args.steps:
            print(f"== {name}")
            from stochopt.search.proposers import check_proposer
            chain_steps(spec, baseline, args.steps,
                        arms=tuple(check_proposer(args.proposer, llm_available=False)))
            continue
        screening = ScreeningSet(spec, baseline, MNCORE2)
        print(f"== {name} ({len(baseline.nodes)} ops)")
        print(f"  screen ({len(screening)} inputs)    "
              f"{spread(timed(lambda s=screening, k=baseline: s.error(k), args.repeat))}")
        full = timed(lambda s=spec, k=baseline: check(k, s, examples=200, baseline=k), 3)
        print(f"  full check (200 examples) {spread(full, 1, 's')}")
        if args.profile:
            chain = ChainRun(0, spec, baseline, cost(baseline).cycles, baseline, MNCORE2,
                             ["mutate"], 1, ChainConfig())
            prof = cProfile.Profile()
            prof.enable()
            end = time.perf_counter() + args.seconds
            while time.perf_counter() < end:
                chain.step()
            prof.disable()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(18)
        rates = [chain_rate(spec, baseline, args.seconds, ["mutate"], s, args.full_examples)
                 for s in range(3)]
        print(f"  mutate chain              median {statistics.median(rates):8.0f} "
              f"candidates/s  min {min(rates):.0f}  max {max(rates):.0f} (3 seeds, "
              f"{args.seconds:.0f} s each, full checks included)")


if __name__ == "__main__":
    main()
