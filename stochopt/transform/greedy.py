"""The classical compiler as a peer: the rewrite rules applied to a fixpoint.

At every step every rule of rewrite.RULES is tried at every site it finds (through the
same interface the proposer uses), the rewrite that lowers the cycle count most (and
still passes the screening inputs) is kept, and the rewrite ends at the fixpoint, where
no rule helps. Rules that draw a parameter draw it from one generator seeded by
``seed``, so a seed gives one result. The result must pass the full check like any
search result; when it does not (a lossy rewrite slipped through screening), the
counterexample joins the screening inputs and greedy descends again from the start, as a
chain's opening does (at most REDESCENTS times; then it gives back the start kernel with
no steps). Benchmarks run it beside the stochastic
search, and a chain's first proposal is the same descent (``descend``: screened by the
chain, then fully checked like any candidate), so the search starts from where the
classical compiler stops rather than racing it from the lowering.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import islice
from typing import NamedTuple

from stochopt.backend.cost import cost
from stochopt.errors import StochoptError
from stochopt.leir.ir import Kernel
from stochopt.spec import Spec
from stochopt.transform.lookahead import escape
from stochopt.transform.plan import Step, every_step
from stochopt.verify.check import check
from stochopt.verify.screening import ScreeningSet

REDESCENTS = 3  # descents made again after the full check refuted the last one
ESCAPES = 3     # escapes from a fixpoint in a row (escape_and_descend)
SCREENED = 8    # end points of one escape screened before it gives up


@dataclass
class GreedyResult:
    kernel: Kernel
    cycles: int
    steps: list[tuple[str, int]]   # (rule, cycles after it)
    candidates: int
    seconds: float
    verified: bool
    plan: list[Step] = field(default_factory=list)  # the steps, replayable (plan.py)


class Descent(NamedTuple):
    kernel: Kernel
    cycles: int
    steps: list[tuple[str, int]]   # (rule, cycles after it)
    candidates: int                # rewrites tried
    plan: list[Step]               # the steps taken, as a plan from the start kernel


def greedy_fixpoint(kernel: Kernel, spec: Spec, machine, baseline: Kernel | None = None,
                    max_steps: int = 200, examples: int = 200, seed: int = 0) -> GreedyResult:
    """Apply the best improving rewrite until none improves (the fixpoint), then check
    the result in full."""
    start = time.perf_counter()
    baseline = baseline or kernel
    screening = ScreeningSet(spec, baseline, machine, seed=seed)
    candidates = 0
    for _ in range(1 + REDESCENTS):
        current, cycles, steps, tried, plan = descend(kernel, machine, screening.error,
                                                      random.Random(seed), max_steps)
        candidates += tried
        if not steps:
            break
        verdict = check(current, spec, examples=examples, seed=seed, machine=machine,
                        baseline=baseline)
        if verdict.equivalent or verdict.counterexample is None:  # proved, or no input
            break                                                   # to steer by
        # a lossy rewrite slipped through screening: its counterexample joins the
        # screening inputs, and the descent from the start is steered past that step
        screening.add(verdict.counterexample.inputs)
    if steps and not verdict.equivalent:  # refused every time: the start kernel
        current, cycles, steps, plan = kernel, cost(kernel, machine).cycles, [], []
    return GreedyResult(current, cycles, steps, candidates, time.perf_counter() - start,
                        True, plan)


def descend(kernel: Kernel, machine, screening_error: Callable[[Kernel], float],
            rng: random.Random, max_steps: int = 200, deadline: float | None = None,
            choose: int = 1) -> Descent:
    """The rewrite rules to a fixpoint, screened but not fully checked: at each step the
    rewrite that lowers the cycles most and keeps every screening input exact. Returns
    the kernel, its cycles, the steps taken (rule, cycles after it), how many rewrites
    were tried and the plan that replays the steps. ``rng`` is for the rules that draw a
    parameter (a divisor). Past ``deadline`` (time.monotonic) it stops with the steps
    already taken. ``choose`` > 1: a randomized descent (GRASP's), each step drawn from
    ``rng`` among the ``choose`` fastest improving rewrites that keep the screening
    inputs exact, so that descents from one kernel end in different basins."""
    current, cycles = kernel, cost(kernel, machine).cycles
    steps: list[tuple[str, int]] = []
    plan: list[Step] = []
    candidates = 0
    for _ in range(max_steps):
        options = []
        for step, out in every_step(current, machine, rng):
            if deadline is not None and time.monotonic() > deadline:
                return Descent(current, cycles, steps, candidates, plan)
            candidates += 1
            c = _cycles(out, machine)
            if c is not None and c < cycles:
                options.append((c, step, out))
        options.sort(key=lambda o: o[0])
        passing = ((c, step, out) for c, step, out in options if screening_error(out) == 0)
        better = list(islice(passing, choose))
        if not better:
            break  # the fixpoint: no rule lowers the cycle count
        cycles, step, current = better[0] if choose == 1 else rng.choice(better)
        steps.append((step.rule, cycles))
        plan.append(step)
    return Descent(current, cycles, steps, candidates, plan)


def escape_and_descend(kernel: Kernel, machine, screening_error: Callable[[Kernel], float],
                       seed: int, depth: int = 3, limit: int = 20000,
                       share: tuple[int, int] = (0, 1), deadline: float | None = None
                       ) -> Descent:
    """Past a fixpoint: the shortest plans faster than it of a breadth-first search by
    cycles (lookahead.escape), the fastest of them that keeps the screening inputs
    exact, then the descent again from it; again until an escape finds nothing faster
    (at most ESCAPES times). The steps and the plan are those from ``kernel``; none when
    no escape helped."""
    current, current_cycles = kernel, cost(kernel, machine).cycles
    steps: list[tuple[str, int]] = []
    plan: list[Step] = []
    tried = 0
    for _ in range(ESCAPES):
        end, made = None, 0
        for ends, made_so_far in escape(current, machine, depth, limit, share, deadline):
            made = made_so_far
            end = next((e for e in ends[:SCREENED] if screening_error(e.kernel) == 0), None)
            if end is not None:
                break
        tried += made
        if end is None:
            break
        steps += [(s.rule, c) for s, c in zip(end.steps, end.along, strict=True)]
        plan += end.steps
        descent = descend(end.kernel, machine, screening_error, random.Random(seed),
                          deadline=deadline)
        current, current_cycles = descent.kernel, descent.cycles
        steps += descent.steps
        plan += descent.plan
        tried += descent.candidates
    return Descent(current, current_cycles, steps, tried, plan)


def _cycles(out: Kernel | None | StochoptError, machine) -> int | None:
    """The cycles of what a rewrite made; None when it declined, refused or cannot be
    costed."""
    if out is None or isinstance(out, StochoptError):
        return None
    try:
        return cost(out, machine).cycles
    except StochoptError:
        return None
