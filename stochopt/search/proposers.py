"""Proposers share one interface: ``propose(kernel, rng, machine) -> (move, kernel | None)``.

``mixed`` is a bandit that shares proposals among the others by improvement per second
spent on them (and, once an LLM is in, per dollar), never starving any of them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from stochopt.errors import StochoptError
from stochopt.transform.mutate import propose_mutation
from stochopt.transform.rewrite import propose_rewrite

BUILTIN = {"mutate": propose_mutation, "rewrite": propose_rewrite}
NAMES = ("mixed", "mutate", "rewrite", "llm")


@dataclass
class Arm:
    proposals: int = 0
    seconds: float = 0.0       # cost units spent (decayed): one per builtin proposal
    improvement: float = 0.0   # decrease in the chain's cost it brought (decayed)


@dataclass
class Bandit:
    """Improvement per second, with a floor so every arm keeps being tried."""
    arms: dict[str, Arm] = field(default_factory=dict)
    floor: float = 0.1

    def choose(self, rng: random.Random) -> str:
        names = sorted(self.arms)
        scores = [(self.arms[n].improvement + 0.01) / (self.arms[n].seconds + 1.0)
                  for n in names]
        total = sum(scores)
        weights = [self.floor / len(names) + (1 - self.floor) * s / total for s in scores]
        return rng.choices(names, weights)[0]

    decay: float = 0.999  # recent proposals weigh more: what helped early may be spent

    def update(self, name: str, improvement: float, units: float) -> None:
        for a in self.arms.values():
            a.seconds *= self.decay
            a.improvement *= self.decay
        arm = self.arms.setdefault(name, Arm())
        arm.proposals += 1
        arm.seconds += units
        arm.improvement += max(0.0, improvement)

    def state(self) -> dict:
        return {n: vars(a).copy() for n, a in self.arms.items()}

    @classmethod
    def from_state(cls, state: dict) -> Bandit:
        return cls({n: Arm(**a) for n, a in state.items()})


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
