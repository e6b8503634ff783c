"""One Metropolis–Hastings chain over kernels, as in STOKE.

cost(k) = eq(k) + lam * cycles(k) / baseline_cycles, where eq sums the error of k on
the chain's screening inputs (0 when all pass). A proposal k' is accepted when
u < exp(-beta (cost(k') - cost(k))). u is drawn first, so the acceptance threshold is
known before k' is run: a candidate whose cycles alone exceed it is refused without
running a single screening input.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass

from stochopt.backend.cost import cycles as kernel_cycles
from stochopt.errors import ConstraintError, ParseError, StochoptError
from stochopt.leir.ir import Kernel
from stochopt.leir.parser import parse
from stochopt.leir.render import render
from stochopt.search.proposers import BUILTIN, Arm, Bandit
from stochopt.search.values import CachedScreening, Proofs
from stochopt.spec import Spec
from stochopt.verify.check import check, check_signature

OUTCOMES = ("parse_error", "invalid", "wrong", "rejected", "accepted", "best")


@dataclass
class ChainConfig:
    beta: float = 30.0           # inverse temperature: 5% slower is accepted ~22% of the time
    lam: float = 1.0             # weight of performance against correctness
    restart_after: int = 3000    # proposals without a new chain best before a restart
    full_examples: int = 200     # examples of the full check before a kernel becomes best
    screening_inputs: int = 3


@dataclass
class Candidate:
    proposer: str
    move: str
    kernel: Kernel | None = None
    error: str | None = None
    outcome: str | None = None   # preset for parse_error / invalid
    tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0       # wall time an LLM spent on it (the bandit charges for it)


class Chain:
    def __init__(self, index: int, spec: Spec, baseline: Kernel, baseline_cycles: int,
                 start: Kernel, machine, arms: list[str], seed: int,
                 config: ChainConfig | None = None, llm=None) -> None:
        self.index, self.spec, self.baseline, self.machine = index, spec, baseline, machine
        self.baseline_cycles = baseline_cycles
        self.config = config or ChainConfig()
        self.rng = random.Random(seed)
        self.seed = seed
        self.arms = arms
        self.bandit = Bandit()
        for a in arms:
            self.bandit.arms.setdefault(a, Arm())
        self.llm = llm
        self.screening = CachedScreening(spec, baseline, machine,
                                         self.config.screening_inputs, seed)
        self.proofs = Proofs()  # value graphs this chain's full checks proved
        self.proposals = 0
        self.since_improvement = 0
        self.full_checks = 0
        self.best_cycles = baseline_cycles   # the best this chain knows of (global)
        self.counterexample_dir = None
        self.saved_inputs: list[str] = []
        self.set_current(start)
        self.best_text = render(start)       # the best verified kernel known (for prompts)

    # -- state ------------------------------------------------------------------------
    def set_current(self, kernel: Kernel) -> None:
        self.current = kernel
        self.current_cycles = kernel_cycles(kernel, self.machine)
        self.current_eq = self.screening.error(kernel)
        self.current_cost = self.current_eq + self.config.lam * self.perf(self.current_cycles)

    def perf(self, cycles: int) -> float:
        return cycles / self.baseline_cycles

    def state(self) -> dict:
        return {"index": self.index, "current": render(self.current),
                "rng": _rng_state(self.rng), "proposals": self.proposals,
                "since_improvement": self.since_improvement, "full_checks": self.full_checks,
                "bandit": self.bandit.state(), "best_cycles": self.best_cycles,
                "counterexamples": list(self.saved_inputs)}

    def restore(self, state: dict) -> None:
        self.rng.setstate(_rng_from(state["rng"]))
        self.proposals = state["proposals"]
        self.since_improvement = state["since_improvement"]
        self.full_checks = state["full_checks"]
        self.bandit = Bandit.from_state(state["bandit"])
        self.best_cycles = state["best_cycles"]
        from stochopt.verify.replay import load_inputs
        for path in state.get("counterexamples", []):
            self.screening.add(load_inputs(path, self.spec))
            self.saved_inputs.append(path)
        self.set_current(parse(state["current"], self.machine))

    def add_counterexample(self, cex) -> None:
        """A full-check failure joins the screening set (and the run directory)."""
        self.screening.add(cex.inputs)
        if self.counterexample_dir is not None:
            path = self.counterexample_dir / f"chain{self.index}-{len(self.saved_inputs)}.npz"
            cex.save(path)
            self.saved_inputs.append(str(path))

    # -- one proposal -----------------------------------------------------------------
    def propose(self) -> Candidate:
        arm = self.bandit.choose(self.rng) if len(self.arms) > 1 else self.arms[0]
        if arm == "llm":
            cand = self.llm.take(self)
            if cand is not None:
                return cand
            if self.arms == ["llm"]:  # take() waited for a reply until the run stopped
                return Candidate("llm", "no_reply", error="the run stopped before a reply "
                                 "came", outcome="invalid")
            arm = "mutate"  # no reply ready yet: keep the chain busy meanwhile
        for attempt in range(16):  # a move that does not apply here is redrawn
            try:
                move, kernel = BUILTIN[arm](self.current, self.rng, self.machine)
            except ParseError as e:
                return Candidate(arm, getattr(e, "move", "?"), error=str(e),
                                 outcome="parse_error")
            except ConstraintError as e:
                return Candidate(arm, getattr(e, "move", "?"), error=str(e), outcome="invalid")
            if kernel is not None:
                return Candidate(arm, move, kernel)
            if attempt >= 3:
                arm = "mutate"  # nothing of this proposer applies to the current kernel
        return Candidate(arm, "none", error="no move applies", outcome="invalid")

    def step(self, deadline: float | None = None) -> tuple[dict, Kernel | None, dict | None]:
        """Propose, cost, screen, accept or reject. Returns (event, new best kernel or
        None, its verdict facts)."""
        t0 = time.perf_counter()
        cand = self.propose()
        self.proposals += 1
        self.since_improvement += 1
        event = {"chain": self.index, "proposer": cand.proposer, "move": cand.move,
                 "outcome": cand.outcome, "cycles": None, "error": cand.error,
                 "tokens": cand.tokens, "cost_usd": cand.cost_usd}
        best = facts = None
        before = self.current_cost
        if cand.outcome is None:
            best, facts = self._evaluate(cand, event, deadline)
        if cand.proposer == "llm" and self.llm is not None:
            self.llm.record(event, cand)  # outcomes and counterexamples feed the next prompt
        # builtin proposals cost one unit each, so a seeded run is reproducible; an LLM
        # proposal costs the builtin proposals its latency could have paid for
        units = 1.0 if cand.proposer != "llm" else max(1.0, 200 * cand_latency(cand))
        self.bandit.update(cand.proposer, before - self.current_cost, units)
        event["seconds"] = round(time.perf_counter() - t0, 6)
        if self.since_improvement > self.config.restart_after:
            event["restart"] = True
        return event, best, facts

    def _evaluate(self, cand: Candidate, event: dict, deadline):
        kernel = cand.kernel
        try:
            # a move may drop the final cast or rename nothing else: the kernel must still
            # take the spec's inputs and return its dtype and shape
            check_signature(kernel, self.spec)
            if kernel.output_type.shape != self.baseline.output_type.shape:
                raise StochoptError(f"kernel returns shape {kernel.output_type.shape}, the "
                                    f"spec {self.baseline.output_type.shape}")
            cycles = kernel_cycles(kernel, self.machine)
        except StochoptError as e:
            event.update(outcome="invalid", error=str(e))
            return None, None
        event["cycles"] = cycles
        lam_perf = self.config.lam * self.perf(cycles)
        u = self.rng.random()
        threshold = self.current_cost - math.log(max(u, 1e-300)) / self.config.beta
        if lam_perf > threshold:
            event["outcome"] = "rejected"
            return None, None
        eq = self.screening.error(kernel, threshold - lam_perf)
        event["error"] = round(eq, 6)
        if eq + lam_perf > threshold:
            event["outcome"] = "wrong" if eq > 0 else "rejected"
            return None, None
        if eq == 0 and cycles < self.best_cycles:
            facts = self.proofs.earlier(kernel)  # same values as a kernel proved before
            if facts is None:
                facts = self._full_check(kernel, event, deadline)
                if facts is None:
                    return None, None
            else:
                event["proved_earlier"] = facts["value_graph"]
            self.best_cycles = cycles
            self.best_text = render(kernel)
            self.since_improvement = 0
            self.current, self.current_cycles, self.current_eq = kernel, cycles, 0.0
            self.current_cost = lam_perf
            event["outcome"] = "best"
            return kernel, facts
        self.current, self.current_cycles, self.current_eq = kernel, cycles, eq
        self.current_cost = eq + lam_perf
        event["outcome"] = "accepted"
        return None, None

    def _full_check(self, kernel: Kernel, event: dict, deadline) -> dict | None:
        """The full check of a candidate best: its verdict facts when it passes, else
        None (the event says why; a counterexample joins the screening set)."""
        verdict = check(kernel, self.spec, examples=self.config.full_examples,
                        seed=self.seed * 7919 + self.full_checks, machine=self.machine,
                        baseline=self.baseline, deadline=deadline)
        self.full_checks += 1
        if verdict.interrupted:
            event.update(outcome="rejected", error="full check cut short by the budget")
            return None
        if not verdict.equivalent:
            self.add_counterexample(verdict.counterexample)
            self.set_current(self.current)  # its eq may have changed too
            event.update(outcome="wrong", error=verdict.counterexample.describe(),
                         counterexample=True)
            return None
        return self.proofs.record(kernel, verdict.to_json())


def cand_latency(cand: Candidate) -> float:
    return getattr(cand, "latency_s", 0.0)


def _rng_state(rng: random.Random) -> list:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def _rng_from(state: list) -> tuple:
    return (state[0], tuple(state[1]), state[2])
