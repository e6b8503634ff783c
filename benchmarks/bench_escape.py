"""What an escape from greedy's fixpoint finds on each bundled spec, and what it costs.

    python benchmarks/bench_escape.py                        # every bundled spec
    python benchmarks/bench_escape.py --specs layernorm rmsnorm --limit 20000

For each spec: greedy's descent from the lowering (screened, seed 0), then one escape
from its fixpoint as a chain alone makes it (stochopt/transform/lookahead.py `escape`,
every first step, up to --depth steps, at most --limit kernels made): the level it stopped
at, the kernels made, the CPU seconds, and the fastest end points with their plans and
whether they keep the screening inputs exact. One process, one BLAS thread; CPU time
(time.process_time), so load matters less than for wall time. No assertions: these are
measurements, the test suite never times anything.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from stochopt.lower import lower  # noqa: E402
from stochopt.machine import MNCORE2  # noqa: E402
from stochopt.spec import load_spec  # noqa: E402
from stochopt.transform.greedy import descend  # noqa: E402
from stochopt.transform.lookahead import escape  # noqa: E402
from stochopt.verify import ScreeningSet  # noqa: E402

SPECS = sorted(p.stem for p in (ROOT / "specs").glob("*.py") if p.stem != "__init__")


def one(name: str, depth: int, limit: int, shown: int) -> None:
    spec = load_spec(ROOT / "specs" / f"{name}.py")
    baseline = lower(spec)
    screening = ScreeningSet(spec, baseline, MNCORE2)
    fixpoint = descend(baseline, MNCORE2, screening.error, random.Random(0))
    started = time.process_time()
    levels = list(escape(fixpoint.kernel, MNCORE2, depth, limit))
    seconds = time.process_time() - started
    made = levels[-1][1]
    stopped = "the limit" if made >= limit else f"depth {len(levels)}"
    ends = sorted((e for level, _ in levels for e in level),
                  key=lambda e: (e.cycles, len(e.steps)))
    print(f"{name}: fixpoint {fixpoint.cycles} cycles; escape made {made} kernels in "
          f"{seconds:.1f} s CPU, stopped at {stopped}; {len(ends)} end points faster")
    for end in ends[:shown]:
        exact = "screened exact" if screening.error(end.kernel) == 0 else "refuted"
        steps = " -> ".join(f"{s.rule}" for s in end.steps)
        print(f"  {end.cycles}  {steps}  (cycles along: {end.along}; {exact})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specs", nargs="*", default=SPECS)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--limit", type=int, default=20000, help="kernels made, at most")
    ap.add_argument("--shown", type=int, default=3, help="end points printed per spec")
    args = ap.parse_args()
    from threadpoolctl import threadpool_limits
    threadpool_limits(1)
    for name in args.specs:
        one(name, args.depth, args.limit, args.shown)


if __name__ == "__main__":
    main()
