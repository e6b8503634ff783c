"""Transform plans: numbered steps over the rewrite rules, replayable and honest about
what does not apply."""

import random

import pytest

from stochopt import load_spec
from stochopt.backend.cost import cost
from stochopt.errors import StochoptError
from stochopt.leir.render import render
from stochopt.lower import lower
from stochopt.machine import MNCORE2
from stochopt.transform import plan as P
from stochopt.transform.greedy import descend
from stochopt.transform.plan import propose_rewrite
from stochopt.verify import check
from stochopt.verify.screening import ScreeningSet


@pytest.fixture(scope="module")
def softmax():
    spec = load_spec("specs/softmax.py")
    return spec, lower(spec)


def test_a_step_reads_back_what_it_wrote_and_refuses_other_shapes():
    for step in (P.Step("tile_output", 2), P.Step("spread_over_more_of_the_tree", 0, 4)):
        assert P.Step.from_json(step.to_json()) == step
    assert P.plan_from_json(P.plan_to_json([P.Step("a", 1)])) == [P.Step("a", 1)]
    for bad in ("tile_output", ["tile_output"], ["tile_output", "1"], [3, 1],
                ["tile_output", 1, 2, 3], ["tile_output", True]):
        with pytest.raises(P.PlanError):
            P.Step.from_json(bad)
    with pytest.raises(P.PlanError):
        P.plan_from_json({"steps": []})


def test_every_menu_entry_applies_and_costs_what_it_says(softmax):
    _, kernel = softmax
    entries = P.menu(kernel, MNCORE2)
    assert entries and [e.number for e in entries] == list(range(1, len(entries) + 1))
    for e in entries:
        out = P.apply_step(kernel, e.step, MNCORE2)
        assert cost(out, MNCORE2).cycles == e.cycles
        assert e.where and e.step.rule in e.where or "`" in e.where or "output" in e.where
    text = P.render_menu(entries, cost(kernel, MNCORE2).cycles)
    assert text.count("\n") == len(entries) - 1 and "cycles (" in text


def test_the_menu_lists_the_cheapest_steps_first_and_a_limit_keeps_the_first(softmax):
    _, kernel = softmax
    whole = P.menu(kernel, MNCORE2)
    cycles = [e.cycles for e in whole]
    assert cycles == sorted(cycles) and len(set(cycles)) > 1
    few = P.menu(kernel, MNCORE2, limit=3)
    assert [e.step for e in few] == [e.step for e in whole[:3]]
    assert [e.number for e in few] == [1, 2, 3]
    # past the deadline the rest come unestimated, after every estimated one
    late = P.menu(kernel, MNCORE2, deadline=0.0)
    assert all(e.cycles is None for e in late) and len(late) >= len(whole)


def test_a_step_that_does_not_apply_ends_the_plan_with_the_steps_before(softmax):
    _, kernel = softmax
    first = P.menu(kernel, MNCORE2)[0].step
    result = P.apply_plan(kernel, [first, P.Step("tile_output", 999),
                                   P.Step("tile_output", 0)], MNCORE2)
    assert result.applied == [first]
    assert "step 2 (tile_output)" in result.stopped and "not site 999" in result.stopped
    assert render(result.kernel) == render(P.apply_step(kernel, first, MNCORE2))
    for bad in (P.Step("no_such_rule", 0), P.Step("spread_over_more_of_the_tree", 0, 7)):
        out = P.apply_plan(kernel, [bad], MNCORE2)
        assert out.applied == [] and out.kernel is kernel and out.stopped


def test_a_replayed_plan_skips_what_does_not_apply_and_keeps_the_rest(softmax):
    _, kernel = softmax
    plan = [e.step for e in P.menu(kernel, MNCORE2)[:1]]
    odd = [P.Step("tile_output", 999)] + plan + [P.Step("no_such_rule", 0)]
    result = P.replay_plan(kernel, odd, MNCORE2)
    assert result.applied == plan and len(result.skipped) == 2 and result.stopped is None
    assert result.skipped[0].startswith("step 1 (tile_output)") and "not site 999" in \
        result.skipped[0]
    assert render(result.kernel) == render(P.apply_plan(kernel, plan, MNCORE2).kernel)


def test_greedy_descent_is_replayed_by_its_plan(softmax):
    spec, kernel = softmax
    screening = ScreeningSet(spec, kernel, MNCORE2, seed=0)
    descent = descend(kernel, MNCORE2, screening.error, random.Random(0))
    assert len(descent.plan) == len(descent.steps) > 1
    replay = P.apply_plan(kernel, descent.plan, MNCORE2)
    assert replay.stopped is None
    assert render(replay.kernel) == render(descent.kernel)


def test_a_random_step_draws_as_the_rewrite_proposer_does(softmax):
    _, kernel = softmax
    made = 0
    for seed in range(16):
        step = P.random_step(kernel, random.Random(seed), MNCORE2)
        try:
            name, out = propose_rewrite(kernel, random.Random(seed), MNCORE2)
        except StochoptError as e:  # the rule refused there: so does the step
            assert step.rule == e.move
            with pytest.raises(P.PlanError):
                P.apply_step(kernel, step, MNCORE2)
            continue
        assert step.rule == name
        if out is None:  # the rule declined there
            with pytest.raises(P.PlanError, match="changes nothing"):
                P.apply_step(kernel, step, MNCORE2)
            continue
        assert render(P.apply_step(kernel, step, MNCORE2)) == render(out)
        made += 1
    assert made >= 8


def test_a_random_plan_keeps_meaning(softmax):
    spec, kernel = softmax
    rng = random.Random(3)
    steps, current = [], kernel
    while len(steps) < 3:
        step = P.random_step(current, rng, MNCORE2)
        try:
            current = P.apply_step(current, step, MNCORE2)
        except P.PlanError:
            continue
        steps.append(step)
    replay = P.apply_plan(kernel, steps, MNCORE2)
    assert replay.applied == steps
    assert check(replay.kernel, spec, examples=12, baseline=kernel).equivalent
