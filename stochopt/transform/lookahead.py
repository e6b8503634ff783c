"""Lookahead by the cost model alone: a beam over plans of depth 2-4 from a kernel.

Costing a kernel takes about a millisecond; screening and proving it take far longer.
So a lookahead explores rule sequences from the chain's current kernel by cycles only
and hands the chain one candidate, the best end point it found: the chain still screens
it (a lossy rule may have made it wrong) and the full check still proves it. Where the
best two- or three-step plan passes through slower kernels, the chain gets its end in
one proposal, which no single rewrite and no greedy descent reaches.

At each depth every kernel of the beam draws ``width`` steps (rules by weight among
those that apply, as the rewrite proposer draws them), each child is costed, and the
``beam`` fastest children not seen before go on (at most ``per_rule`` of them made by
the same rule, so that one rule's variants do not fill the beam). Kernels are keyed by
their hash-consed terms and their program order (what the cost model reads), so a kernel
reached twice is expanded once; the children of every kernel expanded are kept (least
recently used out), and so is what was already handed out from each start, so a chain
that rejected the best end point gets the next one when it asks again. An end point
reached through a lossy rule (a bf16 rounding) is screened before it is handed out, and
a refuted one's values are never handed out again.
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from stochopt.backend.cost import cycles
from stochopt.errors import StochoptError
from stochopt.leir.ir import Kernel
from stochopt.transform.compound import changed_region, site_nodes
from stochopt.transform.plan import (
    RULES_BY_NAME,
    Step,
    all_steps,
    applicable,
    draw_step,
    made_by,
    plan_units,
)

KEPT_PARENTS = 256   # kernels whose children are kept
KEPT_STARTS = 256    # starts whose handed-out end points are remembered


def kernel_key(kernel: Kernel) -> tuple:
    """What the cost model reads of a kernel: its terms and its program order."""
    return kernel.terms, tuple(n.args for n in kernel.nodes), kernel.output


@dataclass
class Found:
    steps: list[Step]        # the plan from the start to the end point
    kernel: Kernel | None    # the end point (None: nothing new to hand out)
    cycles: int | None
    made: int                # kernels this search made and costed (the cached aside)
    units: float = 0.0       # their work (plan.plan_units of the steps that made them)


@dataclass
class Lookahead:
    machine: object
    depth: int = 3
    beam: int = 3
    width: int = 8
    per_rule: int = 2
    weights: Mapping[str, float] | None = None
    # key -> (the kernel, its rules and sites, {step: the kernel it makes or None})
    children: OrderedDict = field(default_factory=OrderedDict)
    handed: OrderedDict = field(default_factory=OrderedDict)    # start key -> end keys
    # native value keys of kernels known wrong (a chain's screening refuted one with the
    # same values): no end point, no way through
    wrong_values: set = field(default_factory=set)
    # kernel -> True where it passes the chain's screening: an end point whose plan uses
    # a lossy rule is screened before it is handed out (at most ``screened`` a search)
    screen: Callable[[Kernel], bool] | None = None
    screened: int = 3

    def search(self, kernel: Kernel, rng: random.Random) -> Found:
        """The fastest end point of the plans explored from ``kernel`` that was not
        handed out from it before (its kernel None when there is none)."""
        start = kernel_key(kernel)
        seen = {start}
        frontier: list[tuple[Kernel, list[Step]]] = [(kernel, [])]
        ends: list[tuple[int, int, tuple, Kernel, list[Step]]] = []
        made, units = 0, 0.0
        for _ in range(self.depth):
            children = []
            for parent, steps in frontier:
                expanded, fresh = self._expand(parent, rng)
                made += len(fresh)
                units += plan_units(fresh) if fresh else 0.0
                for step, child in expanded:
                    key = kernel_key(child)
                    if key in seen:
                        continue
                    seen.add(key)
                    if child.native_key in self.wrong_values:
                        continue
                    try:
                        c = cycles(child, self.machine)
                    except StochoptError:  # does not fit: no end point, no way through
                        continue
                    children.append((c, len(ends) + len(children), key, child,
                                     steps + [step]))
            if not children:
                break
            children.sort(key=lambda c: (c[0], c[1]))
            ends += children
            frontier = [(child, steps) for _, _, _, child, steps in
                        self._diverse(children)]
        handed = self.handed.setdefault(start, set())
        self.handed.move_to_end(start)
        if len(self.handed) > KEPT_STARTS:
            self.handed.popitem(last=False)
        screenings = 0
        for c, _, key, child, steps in sorted(ends, key=lambda e: (e[0], e[1])):
            if key in handed or child.native_key in self.wrong_values:
                continue
            handed.add(key)
            if self.screen is not None and any(RULES_BY_NAME[s.rule].lossy for s in steps):
                if screenings == self.screened:
                    continue
                screenings += 1
                units += 1.0  # a screening: about a candidate's work
                if not self.screen(child):
                    self.wrong_values.add(child.native_key)
                    continue
            return Found(steps, child, c, made, units)
        return Found([], None, None, made, units)

    def _diverse(self, children: list) -> list:
        """The ``beam`` fastest children, at most ``per_rule`` by the same last rule."""
        out, per_rule = [], {}
        for child in children:
            rule = child[4][-1].rule
            if per_rule.get(rule, 0) < self.per_rule:
                per_rule[rule] = per_rule.get(rule, 0) + 1
                out.append(child)
                if len(out) == self.beam:
                    break
        return out

    def _expand(self, kernel: Kernel, rng: random.Random
                ) -> tuple[list[tuple[Step, Kernel]], list[Step]]:
        """Up to ``width`` distinct steps drawn from ``kernel`` and the kernels they make
        (from the cache where they were made before); and the steps made now."""
        key = kernel_key(kernel)
        entry = self.children.get(key)
        if entry is None:
            entry = self.children[key] = (kernel, applicable(kernel), {})
            if len(self.children) > KEPT_PARENTS:
                self.children.popitem(last=False)
        else:
            self.children.move_to_end(key)
        # the sites were found in the kernel first expanded under this key: an equal one
        kernel, found, known = entry
        out: list[tuple[Step, Kernel]] = []
        drawn: set[Step] = set()
        made: list[Step] = []
        for _ in range(3 * self.width):
            if len(drawn) == self.width:
                break
            draw = draw_step(kernel, found, rng, self.machine, self.weights)
            if draw is None:
                break  # no rule applies
            rule, site, step = draw
            if step in drawn:
                continue
            drawn.add(step)
            if step not in known:
                made.append(step)
                known[step] = _made(rule, kernel, site, step, self.machine)
            if known[step] is not None:
                out.append((step, known[step]))
        return out, made


def _made(rule, kernel: Kernel, site, step: Step, machine) -> Kernel | None:
    """The kernel a drawn step makes; None where the rule declines or refuses."""
    out = made_by(rule, kernel, site, step, machine)
    return None if isinstance(out, StochoptError) else out


@dataclass
class End:
    cycles: int
    steps: list[Step]        # the plan from the start
    kernel: Kernel
    along: list[int]         # the cycles after each step


def escape(kernel: Kernel, machine, depth: int = 3, limit: int = 20000,
           share: tuple[int, int] = (0, 1), deadline: float | None = None
           ) -> Iterator[tuple[list[End], int]]:
    """Every plan of up to ``depth`` steps from ``kernel``, breadth first, by cycles
    alone; level by level, (the end points of the level faster than the kernel, fastest
    first; how many kernels it has made so far), so a caller takes the shortest plans
    that help and stops there. Where greedy's descent stops, no single step helps, but a
    plan of two or three often does (on layernorm a spread factor gathered, the layout
    propagated and the tree spread further: 7,580 -> 10,920 -> 10,920 -> 6,664 cycles).
    Depth 1 takes every option of every rule at every site, those numbered ``share[0]``
    modulo ``share[1]`` (chain i of n takes its share, so the chains of a run divide the
    work); each deeper level expands the kernels of the level above fastest first, and
    only at sites connected to what the steps before changed (compound.changed_region),
    as a compound move's follow-ups are: a plan that crosses a valley works on one
    region, and a level stays a few thousand kernels. It stops after ``limit`` kernels
    made or at ``deadline`` (time.monotonic), the level it was making its last."""
    start = cycles(kernel, machine)
    original = frozenset(kernel.terms)
    seen = {kernel_key(kernel)}
    level = [End(start, [], kernel, [])]
    made = 0
    for d in range(depth):
        below: list[End] = []
        for parent in sorted(level, key=lambda e: e.cycles):
            region = changed_region(parent.kernel, original) if d else None
            for j, (rule, site, step) in enumerate(all_steps(parent.kernel, machine)):
                if d == 0 and j % share[1] != share[0]:
                    continue
                nodes = site_nodes(rule.name, site) if d else None
                if nodes is not None and not nodes & region:
                    continue
                if made >= limit or (deadline is not None and time.monotonic() > deadline):
                    yield _fastest(below, start), made
                    return
                made += 1
                out = _made(rule, parent.kernel, site, step, machine)
                if out is None:
                    continue
                key = kernel_key(out)
                if key in seen:
                    continue
                seen.add(key)
                try:
                    c = cycles(out, machine)
                except StochoptError:  # does not fit: no end point, no way through
                    continue
                below.append(End(c, parent.steps + [step], out, parent.along + [c]))
        yield _fastest(below, start), made
        level = below


def _fastest(ends: list[End], start: int) -> list[End]:
    return sorted((e for e in ends if e.cycles < start),
                  key=lambda e: (e.cycles, len(e.steps)))
