"""Compound moves and the lookahead: plans applied at once and judged at their end. Each
plan replays to its kernel, keeps meaning, works on one region of the kernel, and gets
past greedy's fixpoint, where no single rewrite helps."""

import random

import pytest

from stochopt import load_spec
from stochopt.backend.cost import cost, cycles
from stochopt.errors import StochoptError
from stochopt.lower import lower
from stochopt.machine import MNCORE2
from stochopt.transform.compound import (
    COMPOUND_WEIGHTS,
    COMPOUNDS,
    FOLLOW_UPS,
    changed_region,
    propose_compound,
    site_nodes,
)
from stochopt.transform.greedy import descend
from stochopt.transform.lookahead import Lookahead, kernel_key
from stochopt.transform.plan import RULES_BY_NAME, apply_plan, apply_step
from stochopt.transform.weights import check_move_weights
from stochopt.verify import check
from stochopt.verify.screening import ScreeningSet
from tests.tiers import QUICK_AND_FULL


@pytest.fixture(scope="module")
def softmax_fixpoint():
    """softmax and greedy's fixpoint for it: no single rewrite makes that kernel faster."""
    spec = load_spec("specs/softmax.py")
    baseline = lower(spec)
    screening = ScreeningSet(spec, baseline, MNCORE2, seed=0)
    return spec, baseline, descend(baseline, MNCORE2, screening.error, random.Random(0)).kernel


def same_kernel(a, b) -> bool:
    return a.terms == b.terms and [n.args for n in a.nodes] == [n.args for n in b.nodes]


def test_the_follow_ups_and_weights_name_real_rules_and_moves():
    for rule, follow in FOLLOW_UPS.items():
        assert rule in RULES_BY_NAME and all(f in RULES_BY_NAME for f in follow), rule
    assert set(COMPOUND_WEIGHTS) == set(COMPOUNDS)
    assert check_move_weights({"follow_ups": 3, "connected_4": 0}) == \
        {"follow_ups": 3.0, "connected_4": 0.0}


@pytest.mark.parametrize("full", QUICK_AND_FULL)
def test_a_compound_plan_replays_to_its_kernel_and_keeps_meaning(softmax_fixpoint, full):
    """Every move's plans replay; the first multi-step plan of each move goes through
    the verifier in the full twin (each rule's own meaning test runs in the fast tier)."""
    spec, baseline, start = softmax_fixpoint
    verified = 0
    for name in sorted(COMPOUNDS):
        made = 0
        for seed in range(30 if full else 16):
            try:
                steps, out = COMPOUNDS[name](start, random.Random(seed), MNCORE2)
            except StochoptError:
                continue  # its first step refused here
            if out is None:
                continue
            replay = apply_plan(start, steps, MNCORE2)
            assert replay.stopped is None and same_kernel(replay.kernel, out)
            if full and len(steps) > 1 and made == 0:
                assert check(out, spec, examples=8, baseline=baseline).equivalent, steps
                verified += 1
            made += len(steps) > 1
        assert made >= (2 if full else 1), name
    assert verified == (len(COMPOUNDS) if full else 0)


def test_follow_ups_are_applied_where_the_steps_before_them_changed(softmax_fixpoint):
    _, _, start = softmax_fixpoint
    checked = 0
    for seed in range(30):
        try:
            steps, out = COMPOUNDS["follow_ups"](start, random.Random(seed), MNCORE2)
        except StochoptError:
            continue
        if out is None or len(steps) < 2:
            continue
        kernel, original = start, frozenset(start.terms)
        for number, step in enumerate(steps):
            rule = RULES_BY_NAME[step.rule]
            if number:  # every step after the first touches what the plan changed
                site = rule.find(kernel)[step.site]
                nodes = site_nodes(step.rule, site)
                assert nodes is None or nodes & changed_region(kernel, original), step
                assert step.rule in FOLLOW_UPS[steps[0].rule]
            kernel = apply_step(kernel, step, MNCORE2)
        checked += 1
    assert checked >= 2


def test_a_compound_move_gets_past_greedys_fixpoint(softmax_fixpoint):
    """Greedy stops where no single rewrite is faster; a plan of two or more steps is."""
    _, _, start = softmax_fixpoint
    at_fixpoint = cycles(start, MNCORE2)
    rng = random.Random(1)
    faster = []
    for _ in range(30):
        try:
            _, out, steps = propose_compound(start, rng, MNCORE2)
            if out is not None and cycles(out, MNCORE2) < at_fixpoint:
                faster.append(steps)
        except StochoptError:  # refused, or out of memory when costed: the chain rejects it
            continue
    assert faster and all(len(steps) >= 2 for steps in faster)


def test_the_lookahead_hands_out_a_plan_past_greedys_fixpoint(softmax_fixpoint):
    _, _, start = softmax_fixpoint
    at_fixpoint = cycles(start, MNCORE2)
    lookahead = Lookahead(MNCORE2, depth=2, beam=2, width=8)
    rng = random.Random(1)
    # each search draws its steps among every rule that applies, so how many searches
    # find an end point past the fixpoint depends on how many rules there are: search
    # until one does (seeds 0-9 need 1 to 8 searches with 29 rules; each takes ~3 ms)
    found = []
    while len(found) < 40 and not any(f.kernel is not None and f.cycles < at_fixpoint
                                      for f in found):
        found.append(lookahead.search(start, rng))
    ends = [f for f in found if f.kernel is not None]
    assert ends and min(f.cycles for f in ends) < at_fixpoint
    for f in ends:
        assert 1 <= len(f.steps) <= 2 and f.cycles == cost(f.kernel, MNCORE2).cycles
        assert same_kernel(apply_plan(start, f.steps, MNCORE2).kernel, f.kernel)
    # each end point is handed out once from a start
    assert len({kernel_key(f.kernel) for f in ends}) == len(ends)


def test_the_lookahead_reuses_its_kernels_and_avoids_wrong_values(softmax_fixpoint):
    _, _, start = softmax_fixpoint
    first = Lookahead(MNCORE2, depth=2, beam=2, width=6)
    again = first.search(start, random.Random(2))
    repeat = first.search(start, random.Random(2))  # the same draws: every kernel cached
    assert again.made > 0 and repeat.made == 0
    assert repeat.kernel is None or kernel_key(repeat.kernel) != kernel_key(again.kernel)
    # a kernel known wrong (a chain's screening refuted its values) is never an end
    pruned = Lookahead(MNCORE2, depth=2, beam=2, width=6)
    pruned.wrong_values.add(again.kernel.native_key)
    other = pruned.search(start, random.Random(2))
    assert other.kernel is None or other.kernel.native_key != again.kernel.native_key
