"""One Metropolis–Hastings chain over kernels, as in STOKE.

cost(k) = eq(k) + lam * ln(cycles(k) / baseline_cycles), where eq sums the error of k on
the chain's screening inputs (0 when all pass). The performance term is a logarithm so
that beta means the same at every speedup: a kernel 5% slower than the current one costs
ln(1.05) more whether the chain sits at the baseline or at 4x. A proposal k' is accepted
when u < exp(-beta (cost(k') - cost(k))). u is drawn first, so the acceptance threshold
is known before k' is run: a candidate whose cycles alone exceed it is refused without
running a single screening input.

A kernel that passes every screening input and is faster than the best known is
accepted at once and handed back for the full check (a ``Submission``); the chain goes
on from it while the check runs elsewhere (stochopt/search/checks.py), or runs the check
itself when the run has no check workers. ``settle`` and ``refuted`` take the verdict.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field

from stochopt.backend.cost import cycles as kernel_cycles
from stochopt.errors import ConstraintError, ParseError, StochoptError
from stochopt.leir.ir import Kernel
from stochopt.leir.parser import parse
from stochopt.leir.render import render
from stochopt.search.proposers import BUILTIN, Arm, Bandit
from stochopt.search.values import CachedScreening, Proofs
from stochopt.spec import Spec
from stochopt.verify.check import check, check_signature

# "unproved": screened, faster than the best, but its full check did not finish before
# the run ended (the run directory keeps it as unproved.leir, to prove with verify)
OUTCOMES = ("parse_error", "invalid", "wrong", "rejected", "accepted", "unproved", "best")


@dataclass
class ChainConfig:
    beta: float = 30.0           # inverse temperature: 5% slower is accepted ~23% of the time
    lam: float = 1.0             # weight of performance against correctness
    restart_after: int = 3000    # proposals without a new chain best before a restart
    full_examples: int = 200     # examples of the full check before a kernel becomes best
    screening_inputs: int = 3
    # relative weight of each move and rule when its proposer draws one (STOKE's weighted
    # transforms); a name left out weighs 1 (stochopt/transform/weights.py)
    move_weights: dict[str, float] = field(default_factory=dict)


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


@dataclass
class Submission:
    """A screened kernel faster than the best known, waiting for its full check."""
    check_id: str
    kernel: Kernel
    cycles: int
    seed: int                    # of the full check: per chain and per check
    bar_before: int              # the chain's best before it, restored if it fails


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
        self.best_cycles = baseline_cycles   # the bar for a full check: the global best
        self.counterexample_dir = None
        self.saved_inputs: list[str] = []
        self.checks_elsewhere = False        # True: submissions go to the check pool
        self.submissions: list[Submission] = []
        self.set_current(start)
        self.best_text = render(start)       # the best verified kernel known (for prompts)

    # -- state ------------------------------------------------------------------------
    def cycles(self, kernel: Kernel) -> int:
        return kernel_cycles(kernel, self.machine)

    def set_current(self, kernel: Kernel) -> None:
        self.current = kernel
        self.current_cycles = self.cycles(kernel)
        self.current_eq = self.screening.error(kernel)
        self.current_cost = self.current_eq + self.config.lam * self.perf(self.current_cycles)

    def perf(self, cycles: int) -> float:
        """The performance term: ln(cycles / baseline), so beta reads as a ratio."""
        return math.log(cycles / self.baseline_cycles)

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
        for path in state.get("counterexamples", []):
            self.add_counterexample_file(path)
        self.set_current(parse(state["current"], self.machine))

    def add_counterexample(self, cex) -> None:
        """A full-check failure joins the screening set (and the run directory)."""
        self.screening.add(cex.inputs)
        if self.counterexample_dir is not None:
            path = self.counterexample_dir / f"chain{self.index}-{len(self.saved_inputs)}.npz"
            cex.save(path)
            self.saved_inputs.append(str(path))

    def add_counterexample_file(self, path: str) -> None:
        """A counterexample saved by a check worker (or an earlier session) joins the set."""
        from stochopt.verify.replay import load_inputs
        self.screening.add(load_inputs(path, self.spec))
        self.saved_inputs.append(path)

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
        weights = self.config.move_weights or None
        for attempt in range(16):  # a move that does not apply here is redrawn
            try:
                move, kernel = BUILTIN[arm](self.current, self.rng, self.machine, weights)
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
        None, its verdict facts). With ``checks_elsewhere`` set, a kernel that needs its
        full check is queued on ``submissions`` instead (outcome "checking")."""
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

    def _evaluate(self, cand: Candidate, event: dict, deadline: float | None):
        kernel = cand.kernel
        try:
            # a move may drop the final cast or rename nothing else: the kernel must still
            # take the spec's inputs and return its dtype and shape
            check_signature(kernel, self.spec)
            if kernel.output_type.shape != self.baseline.output_type.shape:
                raise StochoptError(f"kernel returns shape {kernel.output_type.shape}, the "
                                    f"spec {self.baseline.output_type.shape}")
            cycles = self.cycles(kernel)
        except StochoptError as e:
            event.update(outcome="invalid", error=str(e))
            return None, None
        event["cycles"] = cycles
        lam_perf = self.config.lam * self.perf(cycles)
        # STOKE: draw the threshold first, then ask the kernel for at most that much cost
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
        self.current, self.current_cycles, self.current_eq = kernel, cycles, eq
        self.current_cost = eq + lam_perf
        if not (eq == 0 and cycles < self.best_cycles):
            event["outcome"] = "accepted"
            return None, None
        facts = self.proofs.earlier(kernel)
        if facts is not None:  # the same values as a kernel this chain proved: no new check
            self.best_cycles, self.best_text = cycles, render(kernel)
            self.since_improvement = 0
            event.update(outcome="best", proved_earlier=facts["value_graph"])
            return kernel, facts
        submission = self._submit(kernel, cycles, event)
        if self.checks_elsewhere:
            self.submissions.append(submission)
            return None, None
        verdict = self.full_check(submission, deadline)
        if self.settle(submission, verdict, event):
            return kernel, self.proofs.record(kernel, verdict.to_json())
        return None, None

    # -- the full check: the policy and its verdicts ------------------------------------
    def _submit(self, kernel: Kernel, cycles: int, event: dict) -> Submission:
        """Screened and faster than the best known: the chain has moved to the kernel
        already and raises its bar to it, so it submits only kernels faster still; a
        failed check lowers the bar back."""
        submission = Submission(f"{self.index}-{self.full_checks}", kernel, cycles,
                                self.seed * 7919 + self.full_checks, self.best_cycles)
        self.full_checks += 1
        self.best_cycles = cycles
        self.since_improvement = 0
        event.update(outcome="checking", check=submission.check_id)
        return submission

    def full_check(self, submission: Submission, deadline: float | None = None):
        """Run the full check here, on the chain's path (a run without check workers)."""
        return check(submission.kernel, self.spec, examples=self.config.full_examples,
                     seed=submission.seed, machine=self.machine, baseline=self.baseline,
                     deadline=deadline)

    def settle(self, submission: Submission, verdict, event: dict) -> bool:
        """Take the verdict of a full check run on the chain's path; True if proved."""
        event.pop("check", None)
        if verdict.equivalent:
            self.best_text = render(submission.kernel)
            event["outcome"] = "best"
            return True
        self.best_cycles = submission.bar_before
        if verdict.interrupted:
            event.update(outcome="unproved", error="its full check did not finish before "
                         "the run ended")
            return False
        self.add_counterexample(verdict.counterexample)
        self.set_current(self.current)  # the current kernel's eq may have changed too
        event.update(outcome="wrong", error=verdict.counterexample.describe(),
                     counterexample=True)
        return False

    def refuted(self, counterexample_path: str) -> None:
        """A check worker refuted one of this chain's submissions."""
        self.add_counterexample_file(counterexample_path)
        self.set_current(self.current)

    def hear_best(self, text: str, cycles: int, proved: bool) -> bool:
        """The global best as the main process sees it, the bar for the next full check;
        True if taken. With a check pool it may rise again (a waiting candidate was
        refuted); with checks on the chain's path it only falls."""
        if not self.checks_elsewhere and cycles >= self.best_cycles:
            return False
        self.best_cycles = cycles
        if proved:
            self.best_text = text
        return True


def cand_latency(cand: Candidate) -> float:
    return getattr(cand, "latency_s", 0.0)


def _rng_state(rng: random.Random) -> list:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def _rng_from(state: list) -> tuple:
    return (state[0], tuple(state[1]), state[2])
