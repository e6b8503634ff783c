"""The Metropolis-Hastings decision of a chain, pinned with a stub cost function: the
acceptance rate is exp(-beta * delta) on the log-cycles cost, and a candidate whose cycles
alone exceed the threshold (drawn first, as STOKE does) is refused before any screening.
The chain sees only its proposer, its cost function and its callback, so the stubs are
all it needs."""

import math
import random
from pathlib import Path

import pytest

from stochopt import load_spec
from stochopt.backend.cost import cost
from stochopt.lower import lower
from stochopt.machine import MNCORE2
from stochopt.search.chain import Candidate, Chain, ChainConfig
from stochopt.search.proposers import ChainProposer
from stochopt.search.tempering import Tempering, beta_ladder, swap_probability
from stochopt.transform.choice import weighted_choice
from stochopt.transform.mutate import MOVES
from stochopt.transform.weights import check_move_weights

ROOT = Path(__file__).resolve().parents[2]
TRIALS = 4000


class StubObjective:
    """Every candidate has the given cycles and the same eq; the bounds the chain asks the
    screening for are recorded. The performance term is the real one: ln(cycles / base)."""

    def __init__(self, baseline_cycles: int, candidate_cycles: int, eq: float = 0.0) -> None:
        self.baseline_cycles, self.candidate_cycles, self.eq = baseline_cycles, candidate_cycles, eq
        self.bounds: list[float] = []

    def check(self, kernel) -> None:
        pass

    def cycles(self, kernel) -> int:
        return self.candidate_cycles

    def performance(self, cycles: int) -> float:
        return math.log(cycles / self.baseline_cycles)

    def error(self, kernel, bound: float = math.inf) -> float:
        self.bounds.append(bound)
        return self.eq


def never_a_new_best(kernel, cycles, event, path):
    return None, None  # nothing is faster than the best: no full check in these tests


@pytest.fixture(scope="module")
def softmax():
    spec = load_spec(ROOT / "specs" / "softmax.py")
    baseline = lower(spec)
    return spec, baseline, cost(baseline).cycles


def stub_chain(softmax, current_cycles: int, candidate_cycles: int, eq: float = 0.0,
               seed: int = 7) -> Chain:
    _, baseline, baseline_cycles = softmax
    objective = StubObjective(baseline_cycles, candidate_cycles, eq)
    chain = Chain(0, baseline, None, objective, never_a_new_best, random.Random(seed),
                  ChainConfig().beta)
    objective.bounds.clear()  # the start's own costing
    chain.current_cycles, chain.current_eq = current_cycles, 0.0
    chain.current_cost = objective.performance(current_cycles)
    return chain


def acceptance_rate(chain: Chain, kernel, current_cycles: int) -> float:
    accepted = 0
    for _ in range(TRIALS):
        event: dict = {}
        chain._evaluate(Candidate("mutate", "stub", kernel), event)
        accepted += event["outcome"] == "accepted"
        # back to the same current kernel, so every trial faces the same delta
        chain.current_cycles, chain.current_eq = current_cycles, 0.0
        chain.current_cost = chain.objective.performance(current_cycles)
    return accepted / TRIALS


@pytest.mark.parametrize("speedup", [1.0, 4.0])  # at the baseline, and after a 4x descent
@pytest.mark.parametrize("slower,eq", [(1.05, 0.0), (1.02, 0.0), (1.0, 0.05), (1.03, 0.02)])
def test_acceptance_rate_is_exp_of_minus_beta_delta(softmax, speedup, slower, eq):
    baseline_cycles = softmax[2]
    current = round(baseline_cycles / speedup)
    candidate = round(current * slower)
    chain = stub_chain(softmax, current, candidate, eq)
    delta = eq + math.log(candidate / current)  # the cost is eq + ln(cycles / baseline)
    expected = math.exp(-ChainConfig().beta * delta)
    rate = acceptance_rate(chain, softmax[1], current)
    sigma = math.sqrt(expected * (1 - expected) / TRIALS)
    assert abs(rate - expected) < 4 * sigma + 1e-9, (rate, expected)


def test_a_cheaper_candidate_is_always_accepted(softmax):
    current = softmax[2]
    chain = stub_chain(softmax, current, round(current * 0.9))
    assert acceptance_rate(chain, softmax[1], current) == 1.0


def test_the_threshold_is_drawn_first_and_bounds_the_screening(softmax):
    """Each proposal draws u before anything runs: a candidate whose cycles alone pass
    the threshold is refused with no screening input run; otherwise the screening is
    asked for at most what is left under the threshold."""
    current = softmax[2]
    candidate = round(current * 1.02)  # accepted about 30% of the time at beta = 60
    chain = stub_chain(softmax, current, candidate)
    beta, perf = chain.beta, chain.objective.performance(candidate)
    refused_unscreened = screened = 0
    for _ in range(600):
        u = random.Random()
        u.setstate(chain.rng.getstate())
        threshold = chain.current_cost - math.log(u.random()) / beta
        before = len(chain.objective.bounds)
        event: dict = {}
        chain._evaluate(Candidate("mutate", "stub", softmax[1]), event)
        if perf > threshold:
            assert event["outcome"] == "rejected"
            assert len(chain.objective.bounds) == before  # not one input ran
            refused_unscreened += 1
        else:
            assert chain.objective.bounds[before:] == [pytest.approx(threshold - perf)]
            assert event["outcome"] == "accepted"
            screened += 1
        chain.current_cost = chain.objective.performance(current)
    assert refused_unscreened > 300 and screened > 50  # both branches were exercised


def test_cycles_far_above_the_threshold_never_reach_the_screening(softmax):
    current = softmax[2]
    chain = stub_chain(softmax, current, 3 * current)
    for _ in range(500):
        event: dict = {}
        chain._evaluate(Candidate("mutate", "stub", softmax[1]), event)
        assert event["outcome"] == "rejected"
    assert chain.objective.bounds == []


def test_a_candidate_failing_the_screening_is_wrong_not_accepted(softmax):
    current = softmax[2]
    chain = stub_chain(softmax, current, round(current * 0.5), eq=11.0)
    for _ in range(200):
        event: dict = {}
        chain._evaluate(Candidate("mutate", "stub", softmax[1]), event)
        assert event["outcome"] == "wrong"
    assert chain.current_cycles == current


# -- move weights --------------------------------------------------------------------------
def test_move_weights_steer_the_mutation_moves(softmax):
    baseline, rng = softmax[1], random.Random(3)
    only_layout = {name: 0.0 for name in MOVES} | {"layout": 1.0}
    proposer = ChainProposer(["mutate"], MNCORE2, only_layout)
    moves = {proposer.propose(baseline, rng).move for _ in range(60)}
    assert moves == {"layout"}


def test_weighted_choice_follows_the_weights():
    rng = random.Random(0)
    names = ["a", "b", "c"]
    draws = [weighted_choice(rng, names, names, [1.0] * 3, {"a": 3.0, "c": 0.0})
             for _ in range(4000)]
    assert draws.count("c") == 0
    assert draws.count("a") / draws.count("b") == pytest.approx(3.0, rel=0.15)


def test_table_defaults_weigh_where_no_override_names_a_move():
    rng = random.Random(1)
    names = ["a", "b"]
    draws = [weighted_choice(rng, names, names, [0.5, 1.0], {"b": 2.0}) for _ in range(4000)]
    assert draws.count("b") / draws.count("a") == pytest.approx(4.0, rel=0.15)


def test_uniform_weights_draw_as_before():
    """Equal weights draw as rng.choice does, so seeded runs keep their events."""
    names = ["a", "b", "c", "d"]
    first, second = random.Random(5), random.Random(5)
    assert [weighted_choice(first, names, names, [1.0] * 4, None) for _ in range(50)] == \
        [second.choice(names) for _ in range(50)]


@pytest.mark.parametrize("weights,message", [({"teleport": 1.0}, "unknown move 'teleport'"),
                                             ({"swap": -1.0}, "must be a number >= 0"),
                                             ({"swap": "much"}, "must be a number >= 0")])
def test_bad_move_weights_are_clear_errors(weights, message):
    from stochopt.errors import StochoptError
    with pytest.raises(StochoptError, match=message):
        check_move_weights(weights)


# -- tempering: the replica-exchange rule between neighbouring chains ---------------------
def _report(cost: float, name: str) -> dict:
    return {"text": name, "plan": None, "cost": cost, "cycles": 1000}


@pytest.mark.parametrize("cold_cost,hot_cost", [(0.10, 0.15), (0.10, 0.13), (-0.5, -0.42)])
def test_the_swap_rate_is_the_replica_exchange_rule(cold_cost, hot_cost):
    """Chains i (colder) and j swap with probability min(1, exp((b_i - b_j)(c_i - c_j)))."""
    betas = beta_ladder(30.0, 10.0, 2)
    ladder = Tempering(betas, seed=3, restart_best_share=0.5)
    swaps = 0
    for _ in range(TRIALS):
        ladder.report(0, _report(cold_cost, "cold"))
        messages = ladder.report(1, _report(hot_cost, "hot"))
        swaps += bool(messages)
    expected = swap_probability(betas[0], cold_cost, betas[1], hot_cost)
    assert expected == pytest.approx(math.exp((30 - 10) * (cold_cost - hot_cost)))
    sigma = math.sqrt(expected * (1 - expected) / TRIALS)
    assert abs(swaps / TRIALS - expected) < 4 * sigma + 1e-9, (swaps / TRIALS, expected)
    assert ladder.state()["attempts"] == [TRIALS] and ladder.state()["swaps"] == [swaps]


def test_a_better_state_on_the_hot_chain_always_moves_down_the_ladder():
    ladder = Tempering(beta_ladder(30.0, 10.0, 3), seed=0, restart_best_share=0.5)
    assert ladder.report(1, _report(0.2, "middle")) == []  # no neighbour has reported
    messages = ladder.report(2, _report(0.1, "hot"))
    assert messages == [(1, ("exchange", "hot", None, 1000, 2)),
                        (2, ("exchange", "middle", None, 1000, 1))]
    # each report is used once: chain 1 must report again before its next exchange
    assert ladder.report(0, _report(0.3, "cold")) == []
    assert ladder.report(1, _report(0.1, "hot")) != []


def test_the_ladder_runs_from_beta_to_the_hottest_evenly_in_log_beta():
    assert beta_ladder(30.0, 10.0, 1) == [30.0]
    ladder = beta_ladder(30.0, 10.0, 3)
    assert ladder[0] == 30.0 and ladder[-1] == pytest.approx(10.0)
    assert ladder[1] == pytest.approx(math.sqrt(300.0), rel=1e-6)


def test_restarts_mix_the_best_and_other_chains_states():
    ladder = Tempering([30.0, 20.0, 10.0], seed=1, restart_best_share=0.5)
    best = ("best kernel", [["list_schedule", 0]])
    # with no other chain's state known, a restart goes to the best
    assert ladder.restart_point(0, best) == (0, ("restart", *best, "best"))
    ladder.report(1, _report(0.2, "one"))
    ladder.report(2, _report(0.3, "two"))
    sources = [ladder.restart_point(0, best)[1][3] for _ in range(2000)]
    assert sources.count("best") / 2000 == pytest.approx(0.5, abs=0.05)
    assert {"chain 1", "chain 2"} <= set(sources) and "chain 0" not in sources


def test_an_exchange_moves_the_chain_with_its_plan_and_marks_its_next_event(softmax):
    import queue

    from stochopt.leir.render import render
    from stochopt.search.chain_run import ChainRun
    from stochopt.search.driver import Heard, _hear
    from stochopt.transform.plan import Step, apply_plan
    spec, baseline, baseline_cycles = softmax
    run = ChainRun(0, spec, baseline, baseline_cycles, baseline, MNCORE2, ["rewrite"], 0)
    path = [Step("multiply_by_reciprocal", 0)]
    other = apply_plan(baseline, path, MNCORE2).kernel
    inbox: queue.Queue = queue.Queue()
    inbox.put(("exchange", render(other), [["multiply_by_reciprocal", 0]], 1, 1))
    heard = Heard()
    _hear(run, inbox, heard, MNCORE2)
    assert run.current_path == path and run.current.terms == other.terms
    assert run.chain.current_cycles == cost(other).cycles
    assert heard.mark == {"exchanged_with": 1, "moved_to": cost(other).cycles}
    report = run.report()
    assert report["plan"] == [["multiply_by_reciprocal", 0]]
    assert report["cost"] == pytest.approx(math.log(cost(other).cycles / baseline_cycles))


# -- the bandit shares the chain's work, not its proposals ------------------------------
def test_an_arm_that_costs_many_units_is_drawn_that_many_times_less_often():
    from stochopt.search.proposers import Arm, Bandit
    bandit = Bandit({"cheap": Arm(10, 10.0, 1.0, 10.0), "dear": Arm(10, 500.0, 50.0, 500.0)})
    # the same improvement per unit: equal shares of the work, so 50x fewer draws
    rng = random.Random(0)
    draws = [bandit.choose(rng) for _ in range(20_000)]
    ratio = draws.count("cheap") / max(1, draws.count("dear"))
    assert ratio == pytest.approx(50.0, rel=0.25)
    # the LLM's units are its latency, not the chain's work: not scaled
    llm = Bandit({"mutate": Arm(10, 10.0, 1.0, 10.0), "llm": Arm(10, 500.0, 50.0, 500.0)})
    draws = [llm.choose(rng) for _ in range(4000)]
    assert draws.count("llm") / 4000 == pytest.approx(0.5, abs=0.05)
