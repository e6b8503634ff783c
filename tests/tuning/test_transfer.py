"""Plans that transfer: the nearest specs in the database, their plans replayed on a new
spec's lowering, move weights from their rule statistics, and the chain's opening."""

import pytest

from stochopt.backend.cost import cost
from stochopt.leir.render import render
from stochopt.lower import lower
from stochopt.search.chain import ChainConfig
from stochopt.search.chain_run import ChainRun
from stochopt.spec import load_spec
from stochopt.transform.plan import Step, plan_to_json, replay_plan
from stochopt.tuning.fingerprints import machine_print, spec_print
from stochopt.tuning.transfer import (
    MIN_TRIES,
    WEIGHT_RANGE,
    move_weights,
    neighbours,
    opening_starts,
    replayed_start,
    transfer,
)
from stochopt.verify.screening import ScreeningSet

from .conftest import SMALL, SOFTMAX, descended, remember, softmax_at

MACHINE = machine_print(SMALL)[0]


@pytest.fixture
def filled(tmp_path, store):
    """A database that knows softmax at 256x64 and 16x512, and a sum / exp spec with the
    same ops in another order; and softmax at 32x512, which it does not know."""
    near = softmax_at(256, 64)[0]   # as many elements
    far = softmax_at(16, 512)[0]    # half as many
    path = tmp_path / "swapped.py"
    path.write_text(SOFTMAX.format(rows=32, cols=512, name="swapped")
                    .replace("e / e.sum(axis=1, keepdims=True)",
                             "e.sum(axis=1, keepdims=True) / e"))
    swapped = load_spec(path)
    for spec, kernel, plan in ((near, *softmax_at(256, 64)[2:]),
                               (far, *softmax_at(16, 512)[2:]), (swapped, *descended(swapped)[1:])):
        remember(store, spec, kernel, plan, run_dir=f"runs/{spec_print(spec).fingerprint}")
    return store, softmax_at(32, 512)[0], far, near, swapped


def test_neighbours_are_the_same_family_by_shape_then_the_same_ops(filled):
    store, new, far, near, swapped = filled
    found = neighbours(store, spec_print(new), MACHINE)
    assert [r["fingerprint"] for r in found] == [spec_print(s).fingerprint
                                                 for s in (near, far, swapped)]
    assert [bool(r["same_family"]) for r in found] == [True, True, False]
    assert found[0]["kernel"]["plan"] == plan_to_json(softmax_at(256, 64)[3])
    assert neighbours(store, spec_print(new), "another machine") == []


def test_transfer_gives_the_neighbours_applied_plans_fastest_first(filled):
    store, new, *_ = filled
    baseline = lower(new, SMALL)
    found = transfer(store, spec_print(new), MACHINE, SMALL, baseline)
    assert found["seed_plans"] == [s["plan"] for s in found["from"]]
    after = [s["cycles_after"] for s in found["from"]]
    assert after == sorted(after) and len(found["from"]) <= 3
    for seed in found["from"]:  # each replays, as recorded, on the new lowering
        replayed = replay_plan(baseline, [Step.from_json(s) for s in seed["plan"]], SMALL)
        assert not replayed.skipped and cost(replayed.kernel, SMALL).cycles == \
            seed["cycles_after"]
    assert found["move_weights"] == {}  # no rule statistics yet


def test_a_spec_with_no_neighbour_gets_nothing(store):
    spec, baseline, _, _ = softmax_at(16, 512)
    assert transfer(store, spec_print(spec), MACHINE, SMALL, baseline) is None


def test_move_weights_follow_improvements_per_try_within_bounds():
    totals = {("rewrite", "tile_output"): [1000, 50, 20], ("rewrite", "hoist_movement"):
              [1000, 40, 0], ("rewrite", "list_schedule"): [MIN_TRIES - 1, 1, 1],
              ("rewrite", "fixpoint"): [100, 100, 50],   # not a rule: the opening
              ("mutate", "swap"): [500, 300, 0], ("mutate", "delete"): [500, 100, 0]}
    weights = move_weights(totals)
    assert set(weights) == {"tile_output", "hoist_movement"}  # mutate: no improvement
    assert weights["tile_output"] > 1 > weights["hoist_movement"] >= WEIGHT_RANGE[0]
    rules = ("tile_output", "hoist_movement", "list_schedule", "tile_reduction",
             "propagate_layout")
    extreme = move_weights({("rewrite", r): [10**6, 0, 10**6 if r == "tile_output" else 0]
                            for r in rules})  # 5x the mean, and none
    assert extreme == {r: WEIGHT_RANGE[1] if r == "tile_output" else WEIGHT_RANGE[0]
                       for r in rules}


def test_rule_statistics_of_the_family_become_move_weights(filled):
    store, new, _, near, _ = filled
    family = spec_print(near).family
    run = store.best_kernels(spec_print(near).fingerprint, MACHINE)[0]["run"]
    store.put_rule_stats(run, 1.0, family, {("rewrite", "tile_output"): [400, 40, 12],
                                            ("rewrite", "hoist_movement"): [400, 40, 0]})
    found = transfer(store, spec_print(new), MACHINE, SMALL, lower(new, SMALL))
    assert found["move_weights"]["tile_output"] > 1 > found["move_weights"]["hoist_movement"]


def test_the_opening_starts_from_replays_on_odd_chains_and_from_both_on_the_first():
    spec, baseline, _, _ = softmax_at(32, 512)
    plans = [plan_to_json(softmax_at(r, c)[3]) for r, c in ((256, 64), (16, 512))]
    error = ScreeningSet(spec, baseline, SMALL, 3, 0).error
    replays = [replayed_start(baseline, p, SMALL, error) for p in plans]
    assert all(r is not None and r[1] for r in replays)
    assert [s[0] for s in opening_starts(baseline, [], 0, SMALL, error)] == [baseline]
    assert [s[0] for s in opening_starts(baseline, plans, 2, SMALL, error)] == [baseline]
    first = opening_starts(baseline, plans, 0, SMALL, error)
    assert first[0] == (baseline, []) and render(first[1][0]) == render(replays[0][0])
    for index, plan in ((1, 0), (3, 1), (5, 0)):  # odd chains take the plans in turn
        (start, steps), = opening_starts(baseline, plans, index, SMALL, error)
        assert render(start) == render(replays[plan][0]) and steps == replays[plan][1]
    # a plan of which no step applies is no start
    assert opening_starts(baseline, [[["no_such_rule", 0]]], 1, SMALL, error) == \
        [(baseline, [])]


def test_a_replayed_plan_can_lead_the_descent_past_greedy():
    # greedy stops at 3306 cycles on softmax 32x512; the plan that won at 256x64,
    # replayed (slower than the lowering at first), leads the descent to 3016
    spec, baseline, greedy, _ = softmax_at(32, 512)
    plan = plan_to_json(softmax_at(256, 64)[3])

    def first(index):
        run = ChainRun(index, spec, baseline, cost(baseline, SMALL).cycles, baseline, SMALL,
                       ["mutate", "rewrite"], 0, ChainConfig(seed_plans=[plan],
                                                             opening_seed=0))
        return run.proposer.propose(run.current, run.chain.rng)

    chain0, chain1 = first(0), first(1)
    assert chain1.move == chain0.move == "transfer"
    assert cost(chain1.kernel, SMALL).cycles == cost(chain0.kernel, SMALL).cycles < \
        cost(greedy, SMALL).cycles
