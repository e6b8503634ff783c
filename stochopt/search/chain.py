"""One Metropolis–Hastings chain over kernels, as in STOKE.

cost(k) = eq(k) + lam * ln(cycles(k) / baseline_cycles), where eq sums the error of k on
the chain's screening inputs (0 when all pass). The performance term is a logarithm so
that beta means the same at every speedup: a kernel 5% slower than the current one costs
ln(1.05) more whether the chain sits at the baseline or at 4x. A proposal k' is accepted
when u < exp(-beta (cost(k') - cost(k))). u is drawn first, so the acceptance threshold
is known before k' is run: a candidate whose cycles alone exceed it is refused without
running a single screening input.

The chain sees three things, as STOKE separates them: a transform (``proposer``: the
next candidate from the current kernel), a bounded cost function (``objective``,
stochopt/search/objective.py) and a callback for every correct kernel it moves to
(``on_correct``: the full-check policy, stochopt/search/full_checks.py, decides whether
it is a new best). The bandit, the LLM hook, counterexample files and restarts live
around it (stochopt/search/chain_run.py, driver.py).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from stochopt.errors import StochoptError
from stochopt.leir.ir import Kernel
from stochopt.rundir import ACCEPTED, INVALID, REJECTED, WRONG
from stochopt.search.tempering import check_tempering
from stochopt.transform.plan import Step, plan_from_json, plan_to_json

# a path longer than this is dropped (unknown): replaying it would cost more than it tells
MAX_PATH_STEPS = 500


@dataclass
class ChainConfig:
    # inverse temperature of the coldest chain: 1% slower is accepted 55% of the time,
    # 5% slower 5% (at 30, chains drifted far above their best on large kernels)
    beta: float = 60.0
    # tempering (stochopt/search/tempering.py): the last chain's beta, the chains between
    # on a geometric ladder from beta (20: 10% slower is accepted 15% of the time)
    hottest_beta: float = 20.0
    exchange_s: float = 1.0      # how often each chain offers its state for an exchange
    restart_best_share: float = 0.5  # restarts that go to the best, not another chain
    lam: float = 1.0             # weight of performance against correctness
    restart_after: int = 3000    # proposals without a new chain best before a restart
    full_examples: int = 200     # examples of the full check before a kernel becomes best
    screening_inputs: int = 3
    # the first proposal of a chain that rewrites: the rules applied greedily to a
    # fixpoint (stochopt/transform/greedy.py), so no run ends slower than greedy would
    fixpoint_first: bool = True
    # the seed of that descent's draws (the spread rule's divisors); None: the run's
    # seed, so that every chain starts from the kernel greedy finds with it and they
    # differ only after (a chain made alone has only its own seed)
    opening_seed: int | None = None
    # beside greedy's descent, the opening makes this many randomized descents from the
    # start (each step drawn among the opening_choose fastest improving rewrites,
    # GRASP's), within OPENING_TIME of the chain's time, and proposes the fastest end:
    # greedy's order is one basin, and on attention_scores a randomized descent ends in
    # one with 1,171 cycles where greedy's stops at 1,854
    opening_descents: int = 8
    opening_choose: int = 3
    # relative weight of each move and rule when its proposer draws one (STOKE's weighted
    # transforms); a name left out weighs 1 (stochopt/transform/weights.py)
    move_weights: dict[str, float] = field(default_factory=dict)
    # plans (plan_to_json) that won on similar specs, replayed on the start kernel before
    # the descent by every other chain (stochopt/tuning/transfer.py)
    seed_plans: list[list] = field(default_factory=list)
    # the lookahead arm's beam (stochopt/transform/lookahead.py): plans of up to
    # lookahead_depth steps, lookahead_beam kernels kept per depth, lookahead_width
    # steps drawn from each
    lookahead_depth: int = 3
    lookahead_beam: int = 3
    lookahead_width: int = 8
    # the proposal after the fixpoint's, and after a restart at a best kernel not escaped
    # from: plans of up to escape_depth steps from it, searched breadth first by cycles
    # alone (at most escape_kernels kernels made per escape, divided among the chains;
    # 0: no escapes), the fastest that passes screening taken and descended from
    # (greedy.escape_and_descend)
    escape_depth: int = 3
    escape_kernels: int = 20000


def check_search_config(config: ChainConfig) -> None:
    """A clear error for a ladder or a lookahead the search cannot run."""
    check_tempering(config.beta, config.hottest_beta, config.exchange_s,
                    config.restart_best_share)
    for name in ("lookahead_depth", "lookahead_beam", "lookahead_width", "escape_depth",
                 "opening_choose"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 64:
            raise StochoptError(f"{name} must be an integer from 1 to 64, got {value!r}")
    for name in ("escape_kernels", "opening_descents"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise StochoptError(f"{name} must be an integer of 0 or more, got {value!r}")


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
    # the plan from the run's start kernel to this candidate, when known (None: unknown,
    # e.g. a blind mutation or a whole kernel written by a model); a proposer that builds
    # from another kernel sets it from that kernel's path
    path: list[Step] | None = None
    # the plan from the chain's current kernel to this candidate (a rewrite's one step, a
    # compound move's steps): the chain makes ``path`` of it as current_path + steps
    steps: list[Step] | None = None
    units: float = 1.0           # the bandit's charge: the kernels it made (LLM: latency)


class Proposer(Protocol):
    def propose(self, kernel: Kernel, rng: random.Random) -> Candidate: ...
    def feedback(self, candidate: Candidate, event: dict, improvement: float) -> None: ...


class Objective(Protocol):
    def check(self, kernel: Kernel) -> None: ...
    def cycles(self, kernel: Kernel) -> int: ...
    def performance(self, cycles: int) -> float: ...
    def error(self, kernel: Kernel, bound: float = math.inf) -> float: ...


# (kernel, its cycles, the event, its path or None) -> (the new best kernel or None, its
# verdict facts); the policy writes the path into an event it marks checking or best
OnCorrect = Callable[[Kernel, int, dict, list[Step] | None],
                     tuple[Kernel | None, dict | None]]


class Chain:
    """The walk: the current kernel and its cost, the random state, the MH decision."""

    def __init__(self, index: int, start: Kernel, proposer: Proposer, objective: Objective,
                 on_correct: OnCorrect, rng: random.Random, beta: float,
                 start_path: Sequence[Step] | None = ()) -> None:
        """``start_path``: the plan from the run's start kernel to ``start`` (empty: it
        is the run's start; None: unknown)."""
        self.index, self.proposer, self.objective = index, proposer, objective
        self.on_correct, self.rng, self.beta = on_correct, rng, beta
        self.proposals = 0
        self.set_current(start, None if start_path is None else list(start_path))

    def set_current(self, kernel: Kernel, path: list[Step] | None) -> None:
        """Move to a kernel, whose plan from the run's start is ``path`` (None: unknown)."""
        self.current, self.current_path = kernel, path
        self.recost()

    def recost(self) -> None:
        """Cost the current kernel again (after the screening set grew)."""
        kernel = self.current
        self.current_cycles = self.objective.cycles(kernel)
        self.current_eq = self.objective.error(kernel)
        self.current_cost = self.current_eq + self.objective.performance(self.current_cycles)

    def step(self) -> tuple[dict, Kernel | None, dict | None]:
        """Propose, cost, accept or reject. Returns (event, new best kernel or None, its
        verdict facts)."""
        t0 = time.perf_counter()
        cand = self.proposer.propose(self.current, self.rng)
        self.proposals += 1
        if cand.path is None and cand.steps is not None and self.current_path is not None:
            path = self.current_path + cand.steps
            cand.path = path if len(path) <= MAX_PATH_STEPS else None
        event = {"chain": self.index, "proposer": cand.proposer, "move": cand.move,
                 "outcome": cand.outcome, "cycles": None, "error": cand.error,
                 "tokens": cand.tokens, "cost_usd": cand.cost_usd}
        best = facts = None
        before = self.current_cost
        if cand.outcome is None:
            best, facts = self._evaluate(cand, event)
        self.proposer.feedback(cand, event, before - self.current_cost)
        event["seconds"] = round(time.perf_counter() - t0, 6)
        return event, best, facts

    def _evaluate(self, cand: Candidate, event: dict) -> tuple[Kernel | None, dict | None]:
        kernel = cand.kernel
        try:
            self.objective.check(kernel)
            cycles = self.objective.cycles(kernel)
        except StochoptError as e:
            event.update(outcome=INVALID, error=str(e))
            return None, None
        event["cycles"] = cycles
        perf = self.objective.performance(cycles)
        # STOKE: draw the threshold first, then ask the kernel for at most that much cost
        u = self.rng.random()
        threshold = self.current_cost - math.log(max(u, 1e-300)) / self.beta
        if perf > threshold:
            event["outcome"] = REJECTED
            return None, None
        eq = self.objective.error(kernel, threshold - perf)
        event["error"] = round(eq, 6)
        if eq + perf > threshold:
            event["outcome"] = WRONG if eq > 0 else REJECTED
            return None, None
        self.current, self.current_cycles, self.current_eq = kernel, cycles, eq
        self.current_cost, self.current_path = eq + perf, cand.path
        event["outcome"] = ACCEPTED
        if eq == 0:  # right on every screening input: a new best if the policy says so
            return self.on_correct(kernel, cycles, event, cand.path)
        return None, None


def path_json(path: list[Step] | None) -> list | None:
    """A path as messages, checkpoints and best.json keep it (None stays None)."""
    return None if path is None else plan_to_json(path)


def path_from_json(data: list | None) -> list[Step] | None:
    return None if data is None else plan_from_json(data)


def mark_plan(event: dict, path: list[Step] | None) -> None:
    """An event that reaches ``checking`` or ``best`` names the plan of its kernel."""
    if path is not None:
        event["plan"] = plan_to_json(path)
