"""The classical compiler as a peer: rewrite rules applied greedily to a fixpoint.

No randomness: at every step each rule is tried at every place it applies, the rewrite
that lowers the cycle count most (and still passes the screening inputs) is kept, and
the loop ends when nothing helps. The result must pass the full check like any search
result. Benchmarks run it beside the stochastic search, and a chain's first proposal is
the same descent (``descend``, screened by the chain, fully checked like any candidate),
so the search starts from where the classical compiler stops rather than competing with
it from the lowering.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from stochopt.backend.cost import cost
from stochopt.errors import StochoptError
from stochopt.leir.ir import Kernel
from stochopt.search.rewrite import RULES, apply_rule
from stochopt.spec import Spec
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
    """Apply the best improving rewrite until none improves, then check the result in
    full; a result that fails it gives way to the starting kernel."""
    start = time.perf_counter()
    baseline = baseline or kernel
    screening = ScreeningSet(spec, baseline, machine, seed=seed)
    current, cycles, steps, candidates = descend(kernel, machine, screening.error,
                                                 random.Random(seed), max_steps)
    verdict = check(current, spec, examples=examples, seed=seed, machine=machine,
                    baseline=baseline)
    if not verdict.equivalent:  # a lossy rewrite slipped through screening: the start
        current, cycles, steps = kernel, cost(kernel, machine).cycles, []
    return GreedyResult(current, cycles, steps, candidates, time.perf_counter() - start,
                        verdict.equivalent or not steps)


def descend(kernel: Kernel, machine, screening_error: Callable[[Kernel], float],
            rng: random.Random, max_steps: int = 200, deadline: float | None = None
            ) -> tuple[Kernel, int, list[tuple[str, int]], int]:
    """The rewrite rules to a fixpoint, screened but not fully checked: at each step the
    rewrite that lowers the cycles most and keeps every screening input exact. Returns
    the kernel, its cycles, the steps taken and how many rewrites were costed. ``rng``
    is only drawn from by the spread rule, to pick its divisor. Past ``deadline``
    (time.monotonic) it stops with the steps already taken."""
    current, cycles = kernel, cost(kernel, machine).cycles
    steps: list[tuple[str, int]] = []
    candidates = 0
    for _ in range(max_steps):
        options = []
        for r in RULES:
            for site in r.find(current):
                if deadline is not None and time.monotonic() > deadline:
                    return current, cycles, steps, candidates
                candidates += 1
                try:
                    out = apply_rule(r, current, site, machine, rng)
                    c = cost(out, machine).cycles if out is not None else None
                except StochoptError:
                    continue
                if c is not None and c < cycles:
                    options.append((c, r.name, out))
        options.sort(key=lambda o: o[0])
        for c, name, out in options:
            if screening_error(out) == 0:
                current, cycles = out, c
                steps.append((name, c))
                break
        else:
            break
    return current, cycles, steps, candidates
