"""Proposers share one interface: ``propose(kernel, rng, machine) -> (move, kernel | None)``.

``mixed`` is a bandit that shares proposals among the others by improvement per cost
unit spent on them, never starving any of them. A builtin proposal costs one unit, so a
seeded run is reproducible; an LLM proposal costs the builtin proposals its latency
could have paid for. ``ChainProposer`` is the chain's transform: it draws an arm, asks it
for a candidate and feeds the chain's verdict back to the bandit and the LLM.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from stochopt.errors import ConstraintError, ParseError, StochoptError
from stochopt.leir.ir import Kernel
from stochopt.search.chain import Candidate
from stochopt.transform.mutate import propose_mutation
from stochopt.transform.rewrite import propose_rewrite

BUILTIN = {"mutate": propose_mutation, "rewrite": propose_rewrite}
NAMES = ("mixed", "mutate", "rewrite", "llm")


@dataclass
class Arm:
    proposals: int = 0
    units: float = 0.0         # cost units spent (decayed): one per builtin proposal
    improvement: float = 0.0   # decrease in the chain's cost it brought (decayed)


@dataclass
class Bandit:
    """Improvement per cost unit, with a floor so every arm keeps being tried."""
    arms: dict[str, Arm] = field(default_factory=dict)
    floor: float = 0.1

    def choose(self, rng: random.Random, exclude: str | None = None) -> str:
        names = sorted(n for n in self.arms if n != exclude)
        scores = [(self.arms[n].improvement + 0.01) / (self.arms[n].units + 1.0)
                  for n in names]
        total = sum(scores)
        weights = [self.floor / len(names) + (1 - self.floor) * s / total for s in scores]
        return rng.choices(names, weights)[0]

    decay: float = 0.999  # recent proposals weigh more: what helped early may be spent

    def update(self, name: str, improvement: float, units: float) -> None:
        for a in self.arms.values():
            a.units *= self.decay
            a.improvement *= self.decay
        arm = self.arms.setdefault(name, Arm())
        arm.proposals += 1
        arm.units += units
        arm.improvement += max(0.0, improvement)

    def state(self) -> dict:
        return {n: vars(a).copy() for n, a in self.arms.items()}

    @classmethod
    def from_state(cls, state: dict) -> Bandit:
        # checkpoints written before the rename call an arm's units "seconds"
        return cls({n: Arm(**{"units" if k == "seconds" else k: v for k, v in a.items()})
                    for n, a in state.items()})


def check_proposer(name: str, llm_available: bool) -> list[str]:
    """The arms a --proposer value stands for."""
    if name not in NAMES:
        raise StochoptError(f"unknown proposer {name!r}", hint=f"use one of {', '.join(NAMES)}")
    if name == "llm" and not llm_available:
        raise StochoptError("--proposer llm needs a model",
                            hint="pass --model NAME (and --base-url URL for a local server)")
    if name == "mixed":
        return ["mutate", "rewrite"] + (["llm"] if llm_available else [])
    return [name]


class ChainProposer:
    """The chain's transform: an arm drawn by the bandit (or the only one) proposes."""

    def __init__(self, arms: list[str], machine, move_weights: dict[str, float] | None = None,
                 llm=None) -> None:
        self.arms, self.machine, self.llm = arms, machine, llm
        self.weights = move_weights or None
        self.bandit = Bandit()
        for a in arms:
            self.bandit.arms.setdefault(a, Arm())
        self.view = None  # what the LLM proposer reads of the chain (a ChainRun)
        # the chain's first proposal, made once: kernel -> Candidate, or None to go on
        # with a drawn arm (the rules to a fixpoint, see ChainRun)
        self.opening: Callable[[Kernel], Candidate | None] | None = None
        self.opened: Candidate | None = None  # what the opening proposed

    def propose(self, kernel: Kernel, rng: random.Random) -> Candidate:
        if self.opening is not None:
            opening, self.opening = self.opening, None
            cand = opening(kernel)
            if cand is not None:
                self.opened = cand
                return cand
        arm = self.bandit.choose(rng) if len(self.arms) > 1 else self.arms[0]
        if arm == "llm":
            cand = self.llm.take(self.view)
            if cand is not None:
                return cand
            if self.arms == ["llm"]:  # take() waited for a reply until the run stopped
                return Candidate("llm", "no_reply", error="the run stopped before a reply "
                                 "came", outcome="invalid")
            # no reply ready yet: another arm, by its share, keeps the chain busy (the llm
            # arm is charged only for its candidates, so its score does not fall while
            # none arrive: always mutating here starved the rewrite arm)
            arm = self.bandit.choose(rng, exclude="llm")
        for attempt in range(16):  # a move that does not apply here is redrawn
            try:
                move, proposed = BUILTIN[arm](kernel, rng, self.machine, self._weights(arm))
            except ParseError as e:
                return Candidate(arm, getattr(e, "move", "?"), error=str(e),
                                 outcome="parse_error")
            except ConstraintError as e:
                return Candidate(arm, getattr(e, "move", "?"), error=str(e), outcome="invalid")
            if proposed is not None:
                return Candidate(arm, move, proposed)
            if attempt >= 3:
                arm = "mutate"  # nothing of this proposer applies to the current kernel
        return Candidate(arm, "none", error="no move applies", outcome="invalid")

    def _weights(self, arm: str):
        """The move weights of one draw: the rewrite arm's rules weigh more after the
        LLM's plans that used them were accepted (bounded and decaying, stochopt/llm/
        steering.py)."""
        steer = getattr(self.llm, "rule_weights", None) if arm == "rewrite" else None
        return steer(self.weights) if steer is not None else self.weights

    def feedback(self, cand: Candidate, event: dict, improvement: float) -> None:
        """The chain's verdict: into the LLM's next prompt and the bandit's scores."""
        if cand.proposer == "llm" and self.llm is not None:
            self.llm.record(event, cand)  # outcomes and counterexamples feed the next prompt
        if cand is self.opened:  # not the bandit's draw: its gain would skew the shares
            return
        units = 1.0 if cand.proposer != "llm" else max(1.0, 200 * cand.latency_s)
        self.bandit.update(cand.proposer, improvement, units)
