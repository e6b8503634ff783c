"""Coverage of a candidate's decision points (decisions.py) over the inputs a check runs.

Every input the comparison runs is emulated through `Coverage.native`, which computes
the candidate's output as emulate() does and, on the way, the values its decision
points read: which side of each target the input reached, and, for each side not yet
reached, how near it came (the nearest input is where the directed search starts).
A verdict reports the result: the targets, the sides reached by an input compared in
full (a probe of the directed search that reached a side once the compare budget was
spent tested nothing there), and those no input inside the declared ranges can reach.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from stochopt.leir.ir import Kernel
from stochopt.verify import traced
from stochopt.verify.decisions import Target, assess, decision_targets


@dataclass
class Coverage:
    kernel: Kernel
    targets: list[Target]
    reached: dict[int, set[str]] = field(default_factory=dict)
    # (target, side) -> (distance, inputs): the nearest input seen to an open side
    nearest: dict[tuple[int, str], tuple[float, dict]] = field(default_factory=dict)
    # (target, side) -> (score, inputs): the input that reached it nearest the boundary
    closest: dict[tuple[int, str], tuple[float, dict]] = field(default_factory=dict)
    probes: int = 0   # inputs emulated for coverage alone (directed.py), not compared
    # the sides reached by inputs compared in full: what a verdict calls reached (a probe
    # that reaches a side after the compare budget is spent tested nothing there)
    tested: dict[int, set[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.nodes = sorted({n for t in self.targets for n in t.nodes()})
        # the last input's score per side (decisions.assess): <= 0 where it reached it
        self.last_scores: dict[tuple[int, str], float] = {}
        for i in range(len(self.targets)):
            self.reached.setdefault(i, set())
            self.tested.setdefault(i, set())

    def native(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        """The candidate's native output (as emulate gives it), observing coverage."""
        values = traced.run(self.kernel, inputs, self.nodes + [self.kernel.output],
                            exact=False)
        for i, side in self.observe(inputs, values):
            self.tested[i].add(side)
        return values[self.kernel.output]

    def probe(self, inputs: dict[str, np.ndarray]) -> set[tuple[int, str]]:
        """Emulate only what the decision points read; the sides this input reaches."""
        self.probes += 1
        return self.observe(inputs, traced.run(self.kernel, inputs, self.nodes,
                                               exact=False))

    def observe(self, inputs, values: dict[int, np.ndarray]) -> set[tuple[int, str]]:
        """Record the sides this input reaches (returned); keep, per side, the input
        nearest to reaching it (open sides) or reaching it nearest to the boundary."""
        here = set()
        self.last_scores = {}
        for i, target in enumerate(self.targets):
            for side, score in assess(target, values).items():
                key = (i, side)
                if side in target.dead or side not in target.sides:
                    continue
                self.last_scores[key] = score
                if score <= 0:
                    here.add(key)
                    if side not in self.reached[i]:
                        self.reached[i].add(side)
                        self.nearest.pop(key, None)
                    if key not in self.closest or score > self.closest[key][0]:
                        self.closest[key] = (score, inputs)
                elif side not in self.reached[i] and (
                        key not in self.nearest or score < self.nearest[key][0]):
                    self.nearest[key] = (score, inputs)
        return here

    def open_sides(self) -> list[tuple[int, str]]:
        """Sides not reached that the declared ranges do not make dead."""
        return [(i, s) for i, t in enumerate(self.targets) for s in t.sides
                if s not in self.reached[i] and s not in t.dead]

    def summary(self) -> dict:
        """What a verdict reports: targets, sides reached, and the rest by reason."""
        sides = [(i, s) for i, t in enumerate(self.targets) for s in t.sides
                 if not (t.kind == "mask" and s == "band")]
        reached = [(i, s) for i, s in sides if s in self.tested[i]]
        dead = [(i, s) for i, s in sides if s in self.targets[i].dead]
        missed = [(i, s) for i, s in sides if s not in self.tested[i]
                  and s not in self.targets[i].dead]
        return {"targets": len(self.targets), "sides": len(sides),
                "reached": len(reached),
                "not_reachable": [f"{self.targets[i].text} {s}" for i, s in dead],
                "not_reached": [f"{self.targets[i].text} {s}" for i, s in missed],
                "probes": self.probes}


NO_DECISIONS = {"targets": 0, "sides": 0, "reached": 0, "not_reachable": [],
                "not_reached": [], "probes": 0}


def coverage_of(kernel: Kernel, baseline: Kernel | None, spec) -> Coverage | None:
    """Coverage of the kernel's decision points that the baseline lacks; None when it
    has none (the baseline itself, or a rewrite that decides nothing new)."""
    from stochopt.verify.ranges import declared_ranges

    targets = decision_targets(kernel, baseline, declared_ranges(spec))
    return Coverage(kernel, targets) if targets else None


def coverage_warnings(summary: dict | None) -> list[str]:
    """A warning for an equivalent verdict whose inputs left reachable sides untried:
    what the kernel does there was not tested."""
    if not summary or not summary["not_reached"]:
        return []
    return [f"no input reached {len(summary['not_reached'])} side(s) of the kernel's "
            f"decision points that the declared ranges allow: "
            f"{', '.join(summary['not_reached'])}; the kernel was not tested there "
            "(more --examples, or another --seed, may reach them)"]


def untested_sides(verdict: dict | None, recheck: dict | None = None) -> list[str]:
    """The sides of a kernel's decision points that neither its full check nor its
    re-check (a finished one) reached, from their JSON verdicts: equivalent on every
    input tried, but not tested there."""
    missed = ((verdict or {}).get("coverage") or {}).get("not_reached", [])
    if recheck is None or recheck.get("finished") is False:
        return list(missed)
    again = set((recheck.get("coverage") or {}).get("not_reached", []))
    return [side for side in missed if side in again]


def untested_note(sides: list[str]) -> str:
    return (f"best.leir was not tested on {len(sides)} side(s) of its decision points: "
            f"{', '.join(sides)}; stochopt verify best.leir --examples 1000 --strict (or "
            "another --seed) tries harder there")


def describe_coverage(summary: dict | None) -> str:
    """One line for the CLI: how many decision points and sides were covered."""
    if not summary or not summary["targets"]:
        return "no decision points beyond the baseline's"
    count = summary["targets"]
    text = (f"{count} decision point{'s' if count != 1 else ''} the baseline lacks, "
            f"{summary['reached']} of {summary['sides']} sides reached")
    if summary["not_reachable"]:
        text += f"; not reachable under the declared ranges: " \
                f"{', '.join(summary['not_reachable'])}"
    if summary["not_reached"]:
        text += f"; NOT REACHED: {', '.join(summary['not_reached'])}"
    return text
