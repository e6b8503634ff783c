"""The classical compiler as a peer: the rewrite rules applied to a fixpoint.

At every step every rule of rewrite.RULES is tried at every site it finds (through the
same interface the proposer uses), the rewrite that lowers the cycle count most (and
still passes the screening inputs) is kept, and the rewrite ends at the fixpoint, where
no rule helps. Rules that draw a parameter draw it from one generator seeded by
``seed``, so a seed gives one result. The result must pass the full check like any
search result; when it does not (a lossy rewrite slipped through screening), greedy
gives back the start kernel with no steps. Benchmarks run it beside the stochastic
search.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from stochopt.backend.cost import cost
from stochopt.errors import StochoptError
from stochopt.leir.ir import Kernel
from stochopt.spec import Spec
from stochopt.transform.rewrite import rewrites
from stochopt.verify.check import check
from stochopt.verify.screening import ScreeningSet


@dataclass
class GreedyResult:
    kernel: Kernel
    cycles: int
    steps: list[tuple[str, int]]   # (rule, cycles after it)
    candidates: int
    seconds: float
    verified: bool


def greedy_fixpoint(kernel: Kernel, spec: Spec, machine, baseline: Kernel | None = None,
                    max_steps: int = 200, examples: int = 200, seed: int = 0) -> GreedyResult:
    """Apply the best improving rewrite until none improves (the fixpoint)."""
    start = time.perf_counter()
    baseline = baseline or kernel
    screening = ScreeningSet(spec, baseline, machine, seed=seed)
    current, cycles = kernel, cost(kernel, machine).cycles
    steps: list[tuple[str, int]] = []
    candidates = 0
    rng = random.Random(seed)  # for the rules that draw a parameter (a divisor)
    for _ in range(max_steps):
        options = []
        for rule, out in rewrites(current, machine, rng):
            candidates += 1
            c = _cycles(out, machine)
            if c is not None and c < cycles:
                options.append((c, rule.name, out))
        options.sort(key=lambda o: o[0])
        better = next(((c, name, out) for c, name, out in options
                       if screening.error(out) == 0), None)
        if better is None:
            break  # the fixpoint: no rule lowers the cycle count
        cycles, name, current = better
        steps.append((name, cycles))
    verdict = check(current, spec, examples=examples, seed=seed, machine=machine,
                    baseline=baseline)
    if not verdict.equivalent:  # a lossy rewrite slipped through screening: start kernel
        current, cycles, steps = kernel, cost(kernel, machine).cycles, []
    return GreedyResult(current, cycles, steps, candidates, time.perf_counter() - start,
                        verdict.equivalent or not steps)


def _cycles(out: Kernel | None | StochoptError, machine) -> int | None:
    """The cycles of what a rewrite made; None when it declined, refused or cannot be
    costed."""
    if out is None or isinstance(out, StochoptError):
        return None
    try:
        return cost(out, machine).cycles
    except StochoptError:
        return None
