"""Decision points of a candidate that its baseline lacks, their margins and sides, and
the sides the declared ranges make dead (stochopt/verify/decisions.py)."""

from __future__ import annotations

import numpy as np
import pytest

from stochopt.leir import parse
from stochopt.verify import traced
from stochopt.verify.decisions import assess, decision_targets
from stochopt.verify.ranges import declared_ranges

ROWS = "tests/verify/corpus/specs/masked_max_sentinel.py"


def _masked(body: str) -> str:
    return (f"# spec: {ROWS}\n"
            'def kernel(x: "f32[64,256] @ dram", mask: "bool[64,256] @ dram") '
            '-> "f32[64,1] @ dram":\n'
            '    m = load(mask, "(64,256)/((8_L2B,8_L1B),(256))")\n'
            '    xs = load(x, "(64,256)/((8_L2B,8_L1B),(256))")\n'
            "    right = reduce_max(where(m, xs, -1e+30), axis=1, keepdims=True)\n" + body)


def _targets(text: str, spec_and_baseline):
    spec, baseline = spec_and_baseline(ROWS)
    return decision_targets(parse(text), baseline, declared_ranges(spec))


def test_the_baseline_and_its_layouts_have_no_targets(spec_and_baseline):
    spec, baseline = spec_and_baseline(ROWS)
    assert decision_targets(baseline, baseline, declared_ranges(spec)) == []
    same = _masked("    return store(right)\n")
    assert _targets(same, spec_and_baseline) == []


def test_a_fast_path_is_a_comparison_and_a_mask(spec_and_baseline):
    text = _masked("    count = reduce_sum(cast(m, \"f32\"), axis=1, keepdims=True)\n"
                   "    plain = reduce_max(xs, axis=1, keepdims=True)\n"
                   "    return store(where(count > 250.0, plain, right))\n")
    targets = _targets(text, spec_and_baseline)
    kinds = {t.kind: t for t in targets}
    # the where's condition is the comparison, a target of its own: no mask target
    assert set(kinds) == {"compare"}
    compare = kinds["compare"]
    assert compare.text == "line 8: gt(count, 250)" and compare.right == 250.0
    assert compare.dead == frozenset()  # a count of 256 reaches both sides and 250


def test_sides_that_the_declared_ranges_rule_out_are_dead(spec_and_baseline):
    # x in [-50, 50]: x > 60 is never true, and x > -60 never false
    text = _masked("    top = reduce_max(xs, axis=1, keepdims=True)\n"
                   "    return store(where(top > 60.0, top, where(top > -60.0, right, top)))\n")
    by_text = {t.text: t for t in _targets(text, spec_and_baseline)}
    assert by_text["line 7: gt(top, 60)"].dead == {"above", "band"}
    assert by_text["line 7: gt(top, -60)"].dead == {"below", "band"}


def test_clamps_selects_casts_and_subsets_are_targets(spec_and_baseline):
    text = _masked("    a = reduce_max(xs[0:64, 0:128], axis=1, keepdims=True)\n"
                   "    b = reduce_max(xs[0:64, 128:256], axis=1, keepdims=True)\n"
                   "    n = cast(cast(a, \"i32\"), \"f32\")\n"
                   "    return store(minimum(maximum(a, b), 40.0) + n * 0.0 + right * 0.0)\n")
    kinds = sorted(t.kind for t in _targets(text, spec_and_baseline))
    assert kinds == ["cast", "clamp", "select", "subset", "subset"]


@pytest.mark.parametrize("values, reached", [
    (np.array([[1.0, 3.0]]), {"below", "above"}),   # 1 < 2 < 3
    (np.array([[2.0, 2.001]]), {"above", "band"}),  # 2.001 within 1e-3 of 2
    (np.array([[5.0, 6.0]]), {"above"}),
])
def test_assess_tells_the_sides_an_input_reaches(values, reached, spec_and_baseline):
    text = _masked("    top = reduce_max(xs, axis=1, keepdims=True)\n"
                   "    return store(where(top > 2.0, top, right))\n")
    target = next(t for t in _targets(text, spec_and_baseline) if t.kind == "compare")
    score = assess(target, {target.left: values})
    assert {s for s, v in score.items() if v <= 0} == reached
    # a side not reached says how far it is, so a search can descend on it
    assert all(v > 0 for s, v in score.items() if s not in reached)


def test_the_margin_reads_values_the_traced_emulation_keeps(spec_and_baseline):
    spec, _ = spec_and_baseline(ROWS)
    text = _masked("    top = reduce_max(xs, axis=1, keepdims=True)\n"
                   "    return store(where(top > 2.0, top, right))\n")
    kernel = parse(text)
    target = next(t for t in _targets(text, spec_and_baseline) if t.kind == "compare")
    x = {"x": np.full((64, 256), 2.0, np.float32), "mask": np.ones((64, 256), bool)}
    values = traced.run(kernel, x, target.nodes(), exact=False)
    assert assess(target, values)["band"] <= 0


def test_a_value_against_its_own_row_max_is_never_above_it(spec_and_baseline):
    # xs == max(xs): the relation of section 2 says xs - max <= 0, so "above" is dead
    text = _masked("    top = reduce_max(xs, axis=1, keepdims=True)\n"
                   "    hot = cast(xs == top, \"f32\")\n"
                   "    return store(right + reduce_sum(hot, axis=1, keepdims=True) * 0.0)\n")
    target = next(t for t in _targets(text, spec_and_baseline) if t.op == "eq")
    assert target.dead == {"above"}


ROTARY = "specs/rotary.py"
IDENTITY_SWITCH = "tests/verify/corpus/wrong/rotary__identity_rows_swapped.leir"


def test_a_steep_exp_is_a_switch_whose_band_back_propagates_to_the_inputs(
        spec_and_baseline, repo):
    from stochopt.verify.backprop import backprop

    spec, baseline = spec_and_baseline(ROTARY)
    kernel = parse((repo / IDENTITY_SWITCH).read_text())
    (target,) = decision_targets(kernel, baseline, declared_ranges(spec))
    assert target.kind == "switch" and "scaled by -1e+30" in target.text
    assert target.dead == {"above"}  # exp(-1e30 d) with d >= 0: never past +16
    # into the band: |c - 1| + |s| near 0 on whole rows, both terms at once
    goals = {g.input: g for alt in backprop(kernel, target.left, (-16.0, 16.0))
             for g in alt}
    assert goals["cos"].rows and goals["sin"].rows
    assert goals["cos"].interval[0] >= 1 - 1e-20 and goals["cos"].interval[1] <= 1 + 1e-20
    assert abs(goals["sin"].interval[0]) <= 1e-20 and abs(goals["sin"].interval[1]) <= 1e-20


def _rotary_with(g: str) -> str:
    """Rotary, right, with a value g (computed by the lines given) added times 0."""
    return ("# spec: specs/rotary.py\n"
            'def kernel(x: "f32[256,128] @ dram", cos: "f32[256,64] @ dram", '
            'sin: "f32[256,64] @ dram") -> "f32[256,128] @ dram":\n'
            '    xs = load(x, "(256,128)/((8_L2B,8_L1B,4_MAB),(128))")\n'
            '    c = load(cos, "(256,64)/((8_L2B,8_L1B,4_MAB),(64))")\n'
            '    s = load(sin, "(256,64)/((8_L2B,8_L1B,4_MAB),(64))")\n'
            "    x1 = xs[0:256, 0:64]\n    x2 = xs[0:256, 64:128]\n" + g +
            "    return store(concat([x1 * c - x2 * s + g * 0.0, x2 * c + x1 * s], axis=1))\n")


def test_a_gentle_exp_is_no_switch(spec_and_baseline):
    spec, baseline = spec_and_baseline(ROTARY)
    text = _rotary_with("    g = exp(c * 0.001) * exp(s * -100.0)\n")
    kinds = [t.kind for t in _targets_of(text, spec, baseline)]
    assert "switch" not in kinds  # slopes of 1e-3 and 100: exp lives over most of the range


def _targets_of(text: str, spec, baseline):
    return decision_targets(parse(text), baseline, declared_ranges(spec))


@pytest.mark.parametrize("name, op, slope", [
    ("matmul__gram_fast_path", "exp", 1e30),   # the scale inside two sums and an abs
    ("softmax__duplicated_batch_rows_rolled", "reciprocal", 1e30)])
def test_switches_are_seen_through_sums_magnitudes_and_reciprocals(name, op, slope, repo,
                                                                   spec_and_baseline):
    text = (repo / "tests/verify/corpus/wrong" / f"{name}.leir").read_text()
    spec, baseline = spec_and_baseline(text.split("\n", 1)[0].split()[-1])
    (target,) = decision_targets(parse(text), baseline, declared_ranges(spec))
    assert target.kind == "switch" and target.op == op and f"{slope:g}" in target.text


def test_a_value_squared_forty_times_is_a_switch_whose_band_reaches_the_inputs(
        repo, spec_and_baseline):
    from stochopt.verify.backprop import backprop
    from stochopt.verify.directed import _wanted

    text = (repo / "tests/verify/corpus/wrong/matmul__gram_squaring_switch.leir").read_text()
    spec, baseline = spec_and_baseline("specs/matmul.py")
    kernel = parse(text)
    targets = decision_targets(kernel, baseline, declared_ranges(spec))
    (switch,) = [t for t in targets if t.power]  # the chain's top alone
    assert switch.power == 2.0 ** 40 and "squared 40 times" in switch.text
    assert kernel.nodes[switch.left].name == "w0"
    assert switch.dead == {"above"}  # w0 = 1 / (1 + 100 d / sum|a|) <= 1: never past 1
    # the band: |w0| within e^(16 / 2^40) of 1, so d / sum|a| is 0: d is 0 (the
    # quotient's numerator), every |a - b^T| is 0, b^T set from a
    (wanted,) = [w for w in _wanted(switch, "band") if w[1][0] > 0]
    goals = [g for alt in backprop(kernel, *wanted) for g in alt]
    assert any(g.copy is not None for g in goals)
    ones = {"a": np.ones((256, 512)), "b": np.ones((512, 256))}
    values = traced.run(kernel, ones, switch.nodes(), exact=False)
    assert assess(switch, values)["band"] == -0.0  # b == a^T: w0 is 1, in the band


def test_a_few_squarings_are_no_switch(spec_and_baseline):
    spec, baseline = spec_and_baseline(ROTARY)
    text = _rotary_with("    c2 = c * c\n    c4 = c2 * c2\n    g = c4 * c4\n")
    kinds = [t.kind for t in _targets_of(text, spec, baseline)]
    assert "switch" not in kinds  # c^8: 2^3 is no steep power


def test_a_steep_gate_is_a_switch_however_its_slope_is_written(spec_and_baseline):
    """A slope in a tensor of 1e30 (no constant to see), or a divisor against a tiny
    numerator: the operand reaches a million band units, so the gate is a switch, and a
    quotient's band is measured in its numerator's size."""
    from stochopt.verify.directed import _wanted

    spec, baseline = spec_and_baseline(ROTARY)
    lay = '"(256,64)/((8_L2B,8_L1B,4_MAB),(64))"'
    big = _rotary_with(f'    k = full((256, 64), 1e+30, "f32", {lay})\n'
                       "    g = exp(neg(abs(c) * k))\n")
    (switch,) = [t for t in _targets_of(big, spec, baseline) if t.kind == "switch"]
    assert "reaching" in switch.text and switch.unit == 1.0
    tiny = _rotary_with(f'    u = full((256, 64), 1e-30, "f32", {lay})\n'
                        "    g = u / (abs(s) + u)\n")
    (switch,) = [t for t in _targets_of(tiny, spec, baseline) if t.kind == "switch"]
    assert switch.unit == pytest.approx(1e-30, rel=1e-6)
    # the band: its open centre first (|s| + u within 0.016 u), then all of it (16 u)
    (_, centre), (_, band) = _wanted(switch, "band")
    assert centre[1] == pytest.approx(16e-33, rel=1e-6) and centre[0] == -centre[1]
    assert band[1] == pytest.approx(16e-30, rel=1e-6) and band[0] == -band[1]
    assert switch.dead == {"below"}  # |s| + u > 0
