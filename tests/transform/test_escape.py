"""The escape from a fixpoint: plans of a few steps searched breadth first by cycles."""

import random

import pytest

from stochopt import load_spec
from stochopt.backend.cost import cost, cycles
from stochopt.lower import lower
from stochopt.machine import MNCORE2
from stochopt.search.chain import ChainConfig
from stochopt.search.chain_run import ChainRun
from stochopt.transform.greedy import descend, escape_and_descend
from stochopt.transform.lookahead import escape, kernel_key
from stochopt.transform.plan import replay_plan
from stochopt.verify import ScreeningSet


def every_end(*args, **kwargs):
    """The end points of every level of an escape, and the kernels it made."""
    levels = list(escape(*args, **kwargs))
    return [e for ends, _ in levels for e in ends], levels[-1][1]


def fixpoint(name: str):
    spec = load_spec(f"specs/{name}.py")
    baseline = lower(spec)
    screening = ScreeningSet(spec, baseline, MNCORE2)
    return descend(baseline, MNCORE2, screening.error, random.Random(0)), screening


@pytest.fixture(scope="module")
def softmax():
    return fixpoint("softmax")


def test_a_two_step_plan_past_the_fixpoint_is_found_and_replays(softmax):
    # at softmax's fixpoint no single rule helps; tiling the output and then spreading
    # each tile further does, through a slower kernel
    descent, _ = softmax
    ends, made = every_end(descent.kernel, MNCORE2, depth=2)
    assert ends and 0 < made <= 20000
    assert all(e.cycles < descent.cycles for e in ends)
    assert not [e for e in ends if len(e.steps) == 1]  # the fixpoint: no one step helps
    best = ends[0]
    assert len(best.steps) == 2 and best.along[0] > descent.cycles  # through a valley
    assert best.along[-1] == best.cycles == cycles(best.kernel, MNCORE2)
    replayed = replay_plan(descent.kernel, best.steps, MNCORE2)
    assert replayed.applied == best.steps and replayed.stopped is None
    assert kernel_key(replayed.kernel) == kernel_key(best.kernel)


def test_chains_divide_the_first_steps_and_a_limit_stops_it(softmax):
    descent, _ = softmax
    made = every_end(descent.kernel, MNCORE2, depth=1)[1]
    assert sum(every_end(descent.kernel, MNCORE2, depth=1, share=(i, 2))[1]
               for i in range(2)) == made
    whole = {kernel_key(e.kernel) for e in every_end(descent.kernel, MNCORE2, depth=2)[0]}
    halves = [{kernel_key(e.kernel) for e in every_end(descent.kernel, MNCORE2, depth=2,
                                                       share=(i, 2))[0]} for i in range(2)]
    assert whole and halves[0] | halves[1] == whole
    assert every_end(descent.kernel, MNCORE2, depth=2, limit=5)[1] == 5


def test_escape_and_descend_ends_screened_and_faster(softmax):
    descent, screening = softmax
    found = escape_and_descend(descent.kernel, MNCORE2, screening.error, 0, depth=2)
    assert found.cycles < descent.cycles and screening.error(found.kernel) == 0
    replayed = replay_plan(descent.kernel, found.plan, MNCORE2)
    assert replayed.applied == found.plan and replayed.stopped is None
    assert cost(replayed.kernel, MNCORE2).cycles == found.cycles
    assert [c for _, c in found.steps][-1] == found.cycles


@pytest.mark.slow
def test_a_chains_second_proposal_escapes_rmsnorms_fixpoint():
    # rmsnorm's fixpoint (6,760 cycles) gives way only to three steps in a row: a spread
    # factor gathered, the layout propagated, the tree spread further
    spec = load_spec("specs/rmsnorm.py")
    baseline = lower(spec)
    base_cycles = cost(baseline, MNCORE2).cycles
    run = ChainRun(0, spec, baseline, base_cycles, baseline, MNCORE2, ["rewrite", "mutate"],
                   0, ChainConfig(escape_kernels=6000))
    run.checks.checks_elsewhere = True
    first, _, _ = run.step()
    second, _, _ = run.step()
    assert first["move"] == "fixpoint"
    assert second["move"] == "escape" and second["cycles"] < first["cycles"]
    off = ChainRun(0, spec, baseline, base_cycles, baseline, MNCORE2, ["rewrite", "mutate"],
                   0, ChainConfig(escape_kernels=0))
    off.checks.checks_elsewhere = True
    off.step()
    assert off.step()[0]["move"] != "escape"


def test_fruitless_escapes_stop_at_their_share_of_the_chains_time(softmax, monkeypatch):
    from stochopt.search import chain_run

    descent, _ = softmax
    spec = load_spec("specs/softmax.py")
    baseline = lower(spec)
    run = ChainRun(0, spec, baseline, cost(baseline, MNCORE2).cycles, baseline, MNCORE2,
                   ["rewrite"], 0, ChainConfig(escape_kernels=50))
    run.checks.deadline = run.made_at + 100.0
    assert run._escape(descent.kernel) is None  # 50 kernels from the fixpoint: nothing
    assert 0 < run.escape_seconds < chain_run.ESCAPE_TIME * 100.0
    # an escape whose kernel the chain refused is charged; one it took is not
    for outcome, charged in (("wrong", 3.0), ("accepted", 0.0), ("checking", 0.0)):
        spent = run.escape_seconds
        event = {"move": "escape", "outcome": outcome, "seconds": 3.0}
        monkeypatch.setattr(run.chain, "step", lambda event=event: (event, None, None))
        run.step()
        assert run.escape_seconds == spent + charged
    run.escape_seconds = chain_run.ESCAPE_TIME * 100.0  # the share is spent

    def searched(*args, **kwargs):
        raise AssertionError("an escape ran past its share of the time")
    monkeypatch.setattr(chain_run, "escape_and_descend", searched)
    assert run._escape(descent.kernel) is None
