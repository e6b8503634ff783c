"""Proposers share one interface: ``propose(kernel, rng, machine) -> (move, kernel | None)``.

The builtin arms: ``mutate`` (blind moves), ``rewrite`` (one rule at one site),
``compound`` (a short plan of rules judged at its end, stochopt/transform/compound.py)
and ``lookahead`` (the best end of a beam over plans by the cost model alone,
stochopt/transform/lookahead.py). ``mixed`` is a bandit that shares the chain's work
among them (and the LLM) by improvement per cost unit spent on each, never starving any
of them. A builtin proposal costs the kernels it made and costed (one for a mutation or
most rewrites, six for a list schedule: Rule.units; a compound move its steps', the
lookahead half a unit for every kernel it made): counts, so a seeded run is reproducible. An LLM
proposal costs the builtin proposals its latency could have paid for.
``ChainProposer`` is the chain's transform: it draws an arm, asks it for a candidate and
feeds the chain's verdict back to the bandit and the LLM.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from stochopt.errors import ConstraintError, ParseError, StochoptError
from stochopt.leir.ir import Kernel
from stochopt.rundir import INVALID, PARSE_ERROR, WRONG
from stochopt.search.chain import Candidate
from stochopt.transform.compound import propose_compound
from stochopt.transform.lookahead import Lookahead
from stochopt.transform.mutate import propose_mutation
from stochopt.transform.plan import Step, applicable, plan_units, propose_step

# a builtin arm: (kernel, rng, machine, weights, the rules that apply to the kernel with
# their sites) -> (move, kernel or None where it does not apply, the plan from the kernel
# to it or None where it is no plan)
Drawn = tuple[str, Kernel | None, list[Step] | None]


def _mutate(kernel: Kernel, rng: random.Random, machine, weights, found) -> Drawn:
    move, out = propose_mutation(kernel, rng, machine, weights)
    return move, out, None  # a blind move: no plan reaches it


def _rewrite(kernel: Kernel, rng: random.Random, machine, weights, found) -> Drawn:
    step, out = propose_step(kernel, rng, machine, weights, found=found)
    return ("none", None, None) if step is None else (step.rule, out, [step])


BUILTIN: dict[str, Callable[..., Drawn]] = {"mutate": _mutate, "rewrite": _rewrite,
                                            "compound": propose_compound}
NAMES = ("mixed", "mutate", "rewrite", "compound", "lookahead", "llm")
MIXED = ("mutate", "rewrite", "compound", "lookahead")  # the builtin arms of mixed
WRONG_KEPT = 10_000  # value keys of refuted rule-made kernels the lookahead avoids
# a kernel the lookahead makes is built and costed but never screened: about half the
# work of a candidate (measured per unit: a third on softmax, a quarter on layernorm,
# one and a half on mla_decode, whose screening is mostly cached)
LOOKAHEAD_UNIT = 0.5


@dataclass
class Arm:
    proposals: int = 0
    units: float = 0.0         # cost units spent (decayed): one per builtin proposal
    improvement: float = 0.0   # decrease in the chain's cost it brought (decayed)
    spent: float = 0.0         # cost units spent in all (not decayed): units per proposal

    def units_per_proposal(self) -> float:
        return self.spent / self.proposals if self.proposals and self.spent else 1.0


@dataclass
class Bandit:
    """Improvement per cost unit, with a floor so every arm keeps being tried. The
    shares are shares of the chain's work: an arm whose proposals cost many units (a
    lookahead costs every kernel it made) is drawn that many times less often, so its
    floor and its share bound the work it takes from the others. The LLM's units are
    its latency, spent on a server, not on the chain: its draws are not scaled."""
    arms: dict[str, Arm] = field(default_factory=dict)
    floor: float = 0.1

    def choose(self, rng: random.Random, exclude: str | None = None) -> str:
        names = sorted(n for n in self.arms if n != exclude)
        scores = [(self.arms[n].improvement + 0.01) / (self.arms[n].units + 1.0)
                  for n in names]
        total = sum(scores)
        weights = [(self.floor / len(names) + (1 - self.floor) * s / total) /
                   (1.0 if n == "llm" else self.arms[n].units_per_proposal())
                   for n, s in zip(names, scores, strict=True)]
        return rng.choices(names, weights)[0]

    decay: float = 0.999  # recent proposals weigh more: what helped early may be spent

    def update(self, name: str, improvement: float, units: float) -> None:
        for a in self.arms.values():
            a.units *= self.decay
            a.improvement *= self.decay
        arm = self.arms.setdefault(name, Arm())
        arm.proposals += 1
        arm.units += units
        arm.spent += units
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
        return list(MIXED) + (["llm"] if llm_available else [])
    return [name]


class ChainProposer:
    """The chain's transform: an arm drawn by the bandit (or the only one) proposes."""

    def __init__(self, arms: list[str], machine, move_weights: dict[str, float] | None = None,
                 llm=None, lookahead: dict | None = None) -> None:
        """``lookahead``: the Lookahead's depth, beam and width (its defaults if None)."""
        self.arms, self.machine, self.llm = arms, machine, llm
        self.weights = move_weights or None
        self.lookahead = Lookahead(machine, weights=self.weights, **(lookahead or {})) \
            if "lookahead" in arms else None
        self.bandit = Bandit()
        for a in arms:
            self.bandit.arms.setdefault(a, Arm())
        self.view = None  # what the LLM proposer reads of the chain (a ChainRun)
        # the chain's first proposal, made once: kernel -> Candidate, or None to go on
        # with a drawn arm (the rules to a fixpoint, see ChainRun)
        self.opening: Callable[[Kernel], Candidate | None] | None = None
        self.opened: Candidate | None = None  # what the opening proposed
        self.found: tuple[Kernel, list] | None = None  # the rules that apply to a kernel

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
                                 "came", outcome=INVALID)
            # no reply ready yet: another arm, by its share, keeps the chain busy (the llm
            # arm is charged only for its candidates, so its score does not fall while
            # none arrive: always mutating here starved the rewrite arm)
            arm = self.bandit.choose(rng, exclude="llm")
        if arm == "lookahead":
            return self._lookahead(kernel, rng)
        for attempt in range(16):  # a move that does not apply here is redrawn
            try:
                move, proposed, steps = BUILTIN[arm](kernel, rng, self.machine,
                                                     self._weights(arm),
                                                     self._applicable(kernel, arm))
            except ParseError as e:
                return Candidate(arm, getattr(e, "move", "?"), error=str(e),
                                 outcome=PARSE_ERROR)
            except ConstraintError as e:
                return Candidate(arm, getattr(e, "move", "?"), error=str(e), outcome=INVALID)
            if proposed is not None:
                return Candidate(arm, move, proposed, steps=steps,
                                 units=plan_units(steps) if steps else 1.0)
            if attempt >= 3:
                arm = "mutate"  # nothing of this proposer applies to the current kernel
        return Candidate(arm, "none", error="no move applies", outcome=INVALID)

    def _applicable(self, kernel: Kernel, arm: str) -> list | None:
        """The rules that apply to the kernel, with their sites, found once per kernel:
        most proposals are refused, so the chain stays on one kernel for many of them."""
        if arm == "mutate":
            return None
        if self.found is None or self.found[0] is not kernel:
            self.found = (kernel, applicable(kernel))
        return self.found[1]

    def _lookahead(self, kernel: Kernel, rng: random.Random) -> Candidate:
        """The best end point of a beam over plans from the kernel, by cycles alone (one
        reached through a lossy rule screened first); it costs the bandit half a unit
        per kernel it made."""
        if self.lookahead.screen is None and self.view is not None:
            screening = self.view.screening
            self.lookahead.screen = lambda k: screening.error(k, 0.0) == 0
        found = self.lookahead.search(kernel, rng)
        units = max(1.0, LOOKAHEAD_UNIT * found.units)
        if found.kernel is None:
            return Candidate("lookahead", "none", error="every end point the lookahead "
                             "reaches from here was proposed already", outcome=INVALID,
                             units=units)
        move = "+".join(s.rule for s in found.steps)
        return Candidate("lookahead", move, found.kernel, steps=found.steps, units=units)

    def _weights(self, arm: str):
        """The move weights of one draw: the rewrite arm's rules weigh more after the
        LLM's plans that used them were accepted (bounded and decaying, stochopt/llm/
        steering.py)."""
        steer = getattr(self.llm, "rule_weights", None) if arm == "rewrite" else None
        return steer(self.weights) if steer is not None else self.weights

    def feedback(self, cand: Candidate, event: dict, improvement: float) -> None:
        """The chain's verdict: into the LLM's next prompt, the lookahead's knowledge of
        wrong values and the bandit's scores."""
        if cand.proposer == "llm" and self.llm is not None:
            self.llm.record(event, cand)  # outcomes and counterexamples feed the next prompt
        if self.lookahead is not None and event["outcome"] == WRONG and \
                cand.steps is not None and cand.kernel is not None:
            wrong = self.lookahead.wrong_values  # a screening verdict is one of values
            if len(wrong) >= WRONG_KEPT:
                wrong.clear()
            wrong.add(cand.kernel.native_key)
        if cand is self.opened:  # not the bandit's draw: its gain would skew the shares
            return
        units = cand.units if cand.proposer != "llm" else max(1.0, 200 * cand.latency_s)
        self.bandit.update(cand.proposer, improvement, units)
