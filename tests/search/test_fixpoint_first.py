"""A chain that rewrites starts with the rewrite rules to a fixpoint (greedy's descent),
so a run never ends slower than greedy; the descent is one candidate like any other."""

import random
import time
from pathlib import Path

import pytest

from stochopt import load_spec
from stochopt.backend.cost import cost
from stochopt.lower import lower
from stochopt.machine import MNCORE2
from stochopt.search.chain import ChainConfig
from stochopt.search.chain_run import ChainRun
from stochopt.transform.greedy import descend, greedy_fixpoint
from stochopt.verify.screening import ScreeningSet

ROOT = Path(__file__).resolve().parents[2]
OPENINGS = ("fixpoint", "randomized_descent")  # greedy's descent won, or another did


@pytest.fixture(scope="module")
def softmax():
    spec = load_spec(ROOT / "specs" / "softmax.py")
    return spec, lower(spec)


@pytest.fixture(scope="module")
def attention_scores():
    spec = load_spec(ROOT / "specs" / "attention_scores.py")
    return spec, lower(spec)


def make_chain(softmax, arms, seed=0, **config) -> ChainRun:
    """A chain on softmax; its escapes (the proposal after the opening) made small, as
    tests/transform/test_escape.py tests them whole."""
    spec, baseline = softmax
    return ChainRun(0, spec, baseline, cost(baseline).cycles, baseline, MNCORE2, arms, seed,
                    ChainConfig(**{"escape_kernels": 300, **config}))


def first_proposal(run: ChainRun):
    return run.proposer.propose(run.current, run.chain.rng)


def test_first_proposal_is_greedys_fixpoint(softmax):
    spec, baseline = softmax
    chain = make_chain(softmax, ["mutate", "rewrite"], seed=0)
    candidate = first_proposal(chain)
    assert (candidate.proposer, candidate.move) == ("rewrite", "fixpoint")
    greedy = greedy_fixpoint(baseline, spec, MNCORE2, examples=20, seed=0)
    assert greedy.steps, "softmax's lowering has rewrites that help"
    # chain 0 of a seed-0 run descends exactly as greedy with seed 0
    assert cost(candidate.kernel).cycles == greedy.cycles < cost(baseline).cycles


def test_every_chain_of_a_run_opens_where_greedy_with_the_runs_seed_stops(softmax):
    spec, baseline = softmax
    greedy = greedy_fixpoint(baseline, spec, MNCORE2, examples=20, seed=0)
    # chain 1 of a seed-0 run: its own seed draws other spread divisors (on softmax it
    # stops 1,000 cycles above greedy); the run's seed makes it start where chain 0 does
    own = cost(first_proposal(make_chain(softmax, ["mutate", "rewrite"], seed=1,
                                         opening_descents=0)).kernel)
    run = make_chain(softmax, ["mutate", "rewrite"], seed=1, opening_seed=0,
                     opening_descents=0)
    assert cost(first_proposal(run).kernel).cycles == greedy.cycles < own.cycles


@pytest.mark.slow  # a real run of two chains
def test_both_chains_of_a_run_open_with_the_same_kernel(tmp_path):
    from stochopt.rundir import read_events
    from stochopt.search import optimize
    optimize(str(ROOT / "specs" / "softmax.py"), budget="60s", chains=2, seed=0,
             proposer="rewrite", max_proposals=2, run_dir=str(tmp_path / "run"),
             config=ChainConfig(full_examples=10, opening_descents=0))
    events = [e for e in read_events(tmp_path / "run" / "events.jsonl")
              if e.get("move") == "fixpoint"]
    assert sorted(e["chain"] for e in events) == [0, 1]
    assert events[0]["cycles"] == events[1]["cycles"]


def test_the_fixpoint_goes_through_the_chain_like_any_candidate(softmax):
    chain = make_chain(softmax, ["mutate", "rewrite"], seed=3)
    chain.checks.best_cycles = 1  # no full check: only the Metropolis-Hastings decision
    event, best, _ = chain.step()
    assert (event["proposer"], event["outcome"]) == ("rewrite", "accepted")
    assert event["move"] in OPENINGS
    assert event["cycles"] == chain.chain.current_cycles < cost(softmax[1]).cycles
    assert first_proposal(chain).move not in OPENINGS  # once per chain, not every step


def test_randomized_descents_open_in_a_faster_basin_than_greedys(attention_scores):
    """Greedy's order ends attention_scores far above where other orders of the same
    rules end; the opening proposes the fastest of its descents, greedy's included
    (with opening_descents=0 it is greedy's: test_every_chain_of_a_run_opens_...)."""
    from stochopt.transform.plan import apply_plan
    spec, baseline = attention_scores
    screening = ScreeningSet(spec, baseline, MNCORE2, seed=0)
    greedy = descend(baseline, MNCORE2, screening.error, random.Random(0))
    run = ChainRun(0, spec, baseline, cost(baseline).cycles, baseline, MNCORE2,
                   ["rewrite"], 0, ChainConfig(escape_kernels=0, opening_descents=4))
    opening = first_proposal(run)
    assert opening.move == "randomized_descent"
    assert cost(opening.kernel).cycles < 0.8 * greedy.cycles
    assert run.objective.error(opening.kernel) == 0
    assert apply_plan(baseline, opening.steps, MNCORE2).kernel.terms == opening.kernel.terms


def test_no_fixpoint_without_the_rewrite_arm_or_when_turned_off(softmax):
    assert first_proposal(make_chain(softmax, ["mutate"])).move != "fixpoint"
    off = make_chain(softmax, ["mutate", "rewrite"], fixpoint_first=False)
    assert first_proposal(off).move != "fixpoint"


def test_descent_past_its_deadline_stops_with_what_it_has(softmax):
    spec, baseline = softmax
    screening = ScreeningSet(spec, baseline, MNCORE2, seed=0)
    kernel, cycles, steps, candidates, _ = descend(baseline, MNCORE2, screening.error,
                                                random.Random(0),
                                                deadline=time.monotonic() - 1)
    assert (kernel, steps, candidates) == (baseline, [], 0)
    assert cycles == cost(baseline).cycles
    full = descend(baseline, MNCORE2, screening.error, random.Random(0))
    assert full[2] and full[1] < cycles


def test_a_restored_chain_does_not_descend_again(softmax):
    chain = make_chain(softmax, ["mutate", "rewrite"], seed=1)
    chain.checks.best_cycles = 1
    chain.step()
    again = make_chain(softmax, ["mutate", "rewrite"], seed=1)
    again.restore(chain.state())
    assert first_proposal(again).move != "fixpoint"


def test_the_opening_earns_the_bandit_nothing(softmax):
    chain = make_chain(softmax, ["mutate", "rewrite"], seed=2)
    chain.checks.best_cycles = 1
    event, _, _ = chain.step()
    assert event["move"] in OPENINGS
    assert all(arm.proposals == 0 and arm.improvement == 0
               for arm in chain.proposer.bandit.arms.values())


def test_a_refuted_opening_is_descended_again_from_the_start(softmax):
    """A full check refutes the opening's kernel (a lossy step passed the screening):
    its counterexample joins the screening inputs and the chain descends again from the
    start, past that kernel, with a plan from the start."""
    from stochopt.transform.plan import apply_plan
    _, baseline = softmax
    chain = make_chain(softmax, ["mutate", "rewrite"], seed=0)
    chain.checks.checks_elsewhere = True
    first = first_proposal(chain)
    screening_error = chain.objective.error
    refuted = first.kernel.native_key

    def with_counterexample(kernel, bound=float("inf")):  # as a new screening input does
        return 11.0 if kernel.native_key == refuted else screening_error(kernel, bound)

    chain.objective.error = with_counterexample
    chain.checks.recost()  # what a refutation does
    again = first_proposal(chain)
    assert again.move == "fixpoint" and again.kernel.native_key != refuted
    assert again.steps is None and again.path is not None
    replay = apply_plan(baseline, again.path, MNCORE2)
    assert replay.stopped is None and replay.kernel.terms == again.kernel.terms
    assert first_proposal(chain).move != "fixpoint"  # once per refutation
