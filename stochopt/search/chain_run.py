"""One chain with what surrounds it in a run: its proposer (the bandit and the LLM hook),
its bounded cost function, its full-check policy and its restarts, wired together, and
the state a checkpoint keeps of them.

The driver (stochopt/search/driver.py) runs a ChainRun per worker; tests and benchmarks
build one the same way.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from stochopt.leir.ir import Kernel
from stochopt.leir.parser import parse
from stochopt.leir.render import render
from stochopt.rundir import ACCEPTED, BEST, CHECKING
from stochopt.search.chain import (
    Candidate,
    Chain,
    ChainConfig,
    mark_plan,
    path_from_json,
    path_json,
)
from stochopt.search.full_checks import FullChecks
from stochopt.search.objective import Objective
from stochopt.search.proposers import Bandit, ChainProposer
from stochopt.search.values import CachedScreening
from stochopt.spec import Spec
from stochopt.transform.greedy import REDESCENTS, Descent, descend, escape_and_descend
from stochopt.transform.lookahead import kernel_key
from stochopt.transform.plan import Step
from stochopt.tuning.transfer import opening_starts

ESCAPE_TIME = 0.2  # the share of a chain's time its fruitless escapes may take
OPENING_TIME = 0.05  # the share of a chain's time the opening's randomized descents take


@dataclass
class Restarts:
    """After ``after`` proposals without a new best, the chain goes back to the global
    best (the driver moves it)."""
    after: int
    since_improvement: int = 0

    def count(self, improved: bool) -> None:
        self.since_improvement = 0 if improved else self.since_improvement + 1

    @property
    def due(self) -> bool:
        return self.since_improvement > self.after


class ChainRun:
    """A chain and its proposer, cost function, full checks and restarts."""

    def __init__(self, index: int, spec: Spec, baseline: Kernel, baseline_cycles: int,
                 start: Kernel, machine, arms: list[str], seed: int,
                 config: ChainConfig | None = None, llm=None,
                 start_path: Sequence[Step] | None = (), chains: int = 1) -> None:
        """``start_path``: the plan from the run's start kernel to ``start`` (empty when
        it is the run's start; None: unknown). ``chains``: how many chains the run has
        (they divide each escape's first steps)."""
        config = config or ChainConfig()
        start_path = None if start_path is None else list(start_path)
        self.index, self.machine, self.config = index, machine, config
        self.chains = max(1, chains)
        self.escaped: set[tuple] = set()  # kernels (lookahead.kernel_key) escaped from
        self.made_at, self.escape_seconds = time.monotonic(), 0.0
        screening = CachedScreening(spec, baseline, machine, config.screening_inputs, seed)
        self.objective = Objective(spec, baseline, baseline_cycles, machine, screening,
                                   config.lam)
        self.proposer = ChainProposer(arms, machine, config.move_weights, llm, {
            "depth": config.lookahead_depth, "beam": config.lookahead_beam,
            "width": config.lookahead_width})
        self.proposer.view = self
        self.checks = FullChecks(index, spec, baseline, machine, screening, seed,
                                 config.full_examples, baseline_cycles, render(start))
        self.best_path = start_path  # the plan of the best kernel this chain knows
        self.chain = Chain(index, start, self.proposer, self.objective, self._on_correct,
                           random.Random(seed), config.beta, start_path)
        self.checks.recost = self._recost
        self.restarts = Restarts(config.restart_after)
        self.seed = seed
        self.start, self.start_path = start, start_path
        self.reopened = 0  # descents made again after a refuted opening
        if config.fixpoint_first and "rewrite" in arms:
            self.proposer.opening = self._fixpoint

    def _fixpoint(self, kernel: Kernel) -> Candidate | None:
        """The first proposal: the rewrite rules to a fixpoint (greedy's descent), one
        candidate screened, costed and checked like any other, so the run starts where the
        classical compiler stops. The spread rule's divisors come from a generator seeded
        as greedy's is (``ChainConfig.opening_seed``): in a run with seed s every chain
        descends as greedy with seed s does. A randomized descent from the same kernel
        that ends strictly faster is proposed instead (``_randomized_descents``). It
        stops at the chain's deadline with the steps taken; None if no rule helps."""
        # with plans that won on similar specs, the descent also starts from their best
        # replay (stochopt/tuning/transfer.py); the faster result is proposed, with the
        # plan from the kernel to it (the replay's steps, then the descent's)
        starts = opening_starts(kernel, self.config.seed_plans, self.index, self.machine,
                                self.objective.error)
        descents = [descend(start, self.machine, self.objective.error,
                            random.Random(self.opening_seed), deadline=self.checks.deadline)
                    for start, _ in starts]
        best = min(range(len(starts)), key=lambda i: descents[i].cycles)
        steps = list(starts[best][1]) + descents[best].plan
        if self.config.escape_kernels:
            self.proposer.opening = self._escape  # the next proposal
        other = min(self._randomized_descents(kernel), key=lambda d: d.cycles, default=None)
        if other is not None and other.cycles < descents[best].cycles:  # ties: greedy's
            return Candidate("rewrite", "randomized_descent", other.kernel, steps=other.plan)
        if starts[best][0] is not kernel:
            return Candidate("rewrite", "transfer", descents[best].kernel, steps=steps)
        return Candidate("rewrite", "fixpoint", descents[best].kernel, steps=steps) \
            if descents[best].steps else None

    def _randomized_descents(self, kernel: Kernel) -> list[Descent]:
        """ChainConfig.opening_descents descents from ``kernel``, each step drawn among the
        fastest improving rewrites; chain i of a run draws its own, and they stop once
        they have taken OPENING_TIME of the chain's time."""
        config, out = self.config, []
        deadline = self.checks.deadline
        if deadline is not None:
            deadline = min(deadline, time.monotonic() + OPENING_TIME * (deadline - self.made_at))
        for j in range(config.opening_descents):
            if deadline is not None and time.monotonic() > deadline:
                break
            rng = random.Random(f"{self.opening_seed}:{self.index}:{j}")
            out.append(descend(kernel, self.machine, self.objective.error, rng,
                               deadline=deadline, choose=config.opening_choose))
        return out

    @property
    def opening_seed(self) -> int:
        """The seed of the descents' draws: the run's, unless ChainConfig names one."""
        return self.seed if self.config.opening_seed is None else self.config.opening_seed

    def _escape(self, kernel: Kernel) -> Candidate | None:
        """The proposal after the opening's, and after a restart at a new best: from the
        chain's current kernel, plans of up to ``escape_depth`` steps searched by cycles
        alone, the fastest that keeps the screening inputs exact, and the descent again
        from it (greedy.py ``escape_and_descend``). Chain i of n searches its nth of the
        first steps, so the chains divide the work. The chain's escapes that found nothing
        take at most ESCAPE_TIME of its time, all together (on mla_decode one takes a
        minute), and so do those whose kernel the chain refused (step); one that found a
        kernel the chain took has paid for itself (on attention_scores an escape from a
        new best, 1,167 cycles, found 1,139). None when no plan is faster or that time is
        spent."""
        self.escaped.add(kernel_key(kernel))
        started = time.monotonic()
        deadline = self.checks.deadline
        if deadline is not None:
            allowance = ESCAPE_TIME * (deadline - self.made_at) - self.escape_seconds
            if allowance <= 0:
                return None
            deadline = min(deadline, started + allowance)
        found = escape_and_descend(kernel, self.machine, self.objective.error,
                                   self.opening_seed,
                                   self.config.escape_depth, self.config.escape_kernels,
                                   (self.index % self.chains, self.chains), deadline)
        if not found.steps:
            self.escape_seconds += time.monotonic() - started
            return None
        return Candidate("rewrite", "escape", found.kernel, steps=found.plan)

    def _recost(self) -> None:
        """A full check refuted a kernel of this chain: its counterexample joined the
        screening inputs, so cost the current kernel again. If the opening's kernel now
        fails them (a lossy step passed the first screening, as bf16 operands do on
        mla_decode), the next proposal is the descent again from the start, which the
        counterexample now steers past that step (at most REDESCENTS times)."""
        self.chain.recost()
        opened = self.proposer.opened
        # a pending escape would start from the refuted kernel: the descent goes first
        if opened is None or self.reopened >= REDESCENTS \
                or self.proposer.opening not in (None, self._escape) \
                or self.objective.error(opened.kernel, 0.0) == 0:
            return
        self.reopened += 1
        self.proposer.opening = self._reopen

    def _reopen(self, kernel: Kernel) -> Candidate | None:
        """The opening's descent again, from the start kernel (not the current one)."""
        cand = self._fixpoint(self.start)
        if cand is not None and self.start_path is not None:
            cand.path, cand.steps = self.start_path + cand.steps, None
        elif cand is not None:
            cand.steps = None  # a plan from the start, not from the current kernel
        return cand

    def _on_correct(self, kernel: Kernel, cycles: int, event: dict,
                    path: list[Step] | None) -> tuple[Kernel | None, dict | None]:
        """The full-check policy, and the path contract: an event that goes to its full
        check or becomes the best names its plan, and a proved best its path."""
        best, facts = self.checks.on_correct(kernel, cycles, event)
        if event["outcome"] in (CHECKING, BEST):
            mark_plan(event, path)
        if best is not None:
            self.best_path = path
        return best, facts

    def hear_best(self, text: str, cycles: int, proved: bool,
                  path: list[Step] | None) -> bool:
        """The global best as the main process announces it (see FullChecks.hear_best),
        with its plan; True if taken."""
        taken = self.checks.hear_best(text, cycles, proved)
        if taken and proved:
            self.best_path = path
        return taken

    def step(self) -> tuple[dict, Kernel | None, dict | None]:
        """One proposal of the chain: (event, new best kernel or None, its facts). With
        ``checks.checks_elsewhere`` set, a kernel that needs its full check is queued on
        ``checks.submissions`` instead (outcome "checking")."""
        improvements = self.checks.improvements
        out = self.chain.step()
        self.restarts.count(improved=self.checks.improvements != improvements)
        event = out[0]
        if event["move"] == "escape" and event["outcome"] not in (ACCEPTED, BEST, CHECKING):
            self.escape_seconds += event["seconds"]  # it found nothing the chain could use
        return out

    def report(self) -> dict:
        """The chain's state as the ladder's exchanges and restarts read it."""
        chain = self.chain
        return {"text": render(chain.current), "plan": path_json(chain.current_path),
                "cost": chain.current_cost, "cycles": chain.current_cycles}

    def restart_from(self, kernel: Kernel, path: list[Step] | None) -> None:
        """Go on from this kernel. Back at a best kernel not escaped from before (the
        chains found it after the opening), the next proposal is an escape from it."""
        self.chain.set_current(kernel, path)
        self.restarts.since_improvement = 0
        if self.config.escape_kernels and self.proposer.opening is None and \
                kernel_key(kernel) not in self.escaped and \
                self.chain.current_cycles <= self.checks.best_cycles:
            self.proposer.opening = self._escape

    # -- what the LLM proposer reads of the chain ---------------------------------------
    @property
    def current(self) -> Kernel:
        return self.chain.current

    @property
    def current_path(self) -> list[Step] | None:
        """The plan from the run's start kernel to the current kernel (None: unknown)."""
        return self.chain.current_path


    @property
    def screening(self) -> CachedScreening:
        return self.objective.screening

    @property
    def baseline(self) -> Kernel:
        return self.objective.baseline

    @property
    def arms(self) -> list[str]:
        return self.proposer.arms

    @property
    def best_text(self) -> str:
        return self.checks.best_text

    @property
    def best_cycles(self) -> int:
        return self.checks.best_cycles

    # -- checkpoints ----------------------------------------------------------------------
    def state(self) -> dict:
        return {"index": self.index, "current": render(self.chain.current),
                "rng": _rng_state(self.chain.rng), "proposals": self.chain.proposals,
                "since_improvement": self.restarts.since_improvement,
                "full_checks": self.checks.full_checks,
                "bandit": self.proposer.bandit.state(), "best_cycles": self.checks.best_cycles,
                "counterexamples": list(self.checks.saved_inputs),
                "current_path": path_json(self.chain.current_path),
                "best_path": path_json(self.best_path), "reopened": self.reopened}

    def restore(self, state: dict) -> None:
        self.chain.rng.setstate(_rng_from(state["rng"]))
        self.chain.proposals = state["proposals"]
        if state["proposals"]:  # its first proposal was made in an earlier session
            self.proposer.opening = None
        self.restarts.since_improvement = state["since_improvement"]
        self.reopened = state.get("reopened", REDESCENTS)  # older: no opening known
        self.checks.full_checks = state["full_checks"]
        self.proposer.bandit = Bandit.from_state(state["bandit"])
        self.checks.best_cycles = state["best_cycles"]
        for path in state.get("counterexamples", []):
            self.checks.add_counterexample_file(path)
        # a checkpoint written before paths were kept knows none
        self.best_path = path_from_json(state.get("best_path"))
        self.chain.set_current(parse(state["current"], self.machine),
                               path_from_json(state.get("current_path")))


def _rng_state(rng: random.Random) -> list:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def _rng_from(state: list) -> tuple:
    return (state[0], tuple(state[1]), state[2])
