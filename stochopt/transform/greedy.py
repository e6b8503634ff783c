"""The classical compiler as a peer: rewrite rules applied greedily to a fixpoint.

No randomness: at every step each rule is tried at every place it applies, the rewrite
that lowers the cycle count most (and still passes the screening inputs) is kept, and
the loop ends when nothing helps. The result must pass the full check like any search
result. Benchmarks run it beside the stochastic search.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from stochopt.backend.cost import cost
from stochopt.errors import StochoptError
from stochopt.leir.ir import Kernel
from stochopt.spec import Spec
from stochopt.transform.rewrite import RULES, apply_rule
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
    """Apply the best improving rewrite until none improves."""
    start = time.perf_counter()
    baseline = baseline or kernel
    screening = ScreeningSet(spec, baseline, machine, seed=seed)
    current, cycles = kernel, cost(kernel, machine).cycles
    steps: list[tuple[str, int]] = []
    candidates = 0
    rng = random.Random(seed)  # only the spread rule takes one, to pick its divisor
    for _ in range(max_steps):
        options = []
        for r in RULES:
            for site in r.find(current):
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
            if screening.error(out) == 0:
                current, cycles = out, c
                steps.append((name, c))
                break
        else:
            break
    verdict = check(current, spec, examples=examples, seed=seed, machine=machine,
                    baseline=baseline)
    if not verdict.equivalent:  # a lossy rewrite slipped through screening: step back
        current, cycles, steps = kernel, cost(kernel, machine).cycles, []
    return GreedyResult(current, cycles, steps, candidates, time.perf_counter() - start,
                        verdict.equivalent or not steps)
