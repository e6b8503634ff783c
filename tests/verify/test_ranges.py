"""The static range analysis (stochopt/verify/ranges.py): intervals from the declared
ranges, the relations softmax-like kernels rely on, and refusals that name the op, its
line and the interval."""

from __future__ import annotations

from pathlib import Path

import pytest

from stochopt.leir import parse
from stochopt.verify import check
from stochopt.verify.ranges import (
    NAN,
    OVERFLOW,
    ZERO_DIVISION,
    analyze,
    declared_ranges,
    range_facts,
    range_refusal,
)
from stochopt.verify.relations import canonical_nodes

WIDE = "tests/verify/corpus/specs/logsumexp_wide.py"
CORPUS = Path(__file__).resolve().parent / "corpus"


def _kernel(shift: str) -> str:
    return (f"# spec: {WIDE}\n"
            'def kernel(x: "f32[64,512] @ dram") -> "f32[64,1] @ dram":\n'
            '    xs = load(x, "(64,512)/((8_L2B,8_L1B),(512))")\n'
            f"    m = {shift}\n"
            "    return store(m + log(reduce_sum(exp(xs - m), axis=1, keepdims=True)))\n")


def test_the_baseline_of_a_wide_range_is_safe_through_its_row_max(spec_and_baseline):
    spec, baseline = spec_and_baseline(WIDE)
    found = analyze(baseline, declared_ranges(spec))
    assert found.poison is None and found.hazards == []
    assert found.output[0] >= -100 and found.output[1] <= 100 + 6.3  # log(512) < 6.3


@pytest.mark.parametrize("shift", [
    "reduce_max(xs[0:64, 0:256], axis=1, keepdims=True)",   # stale: part of the row
    "reduce_max(xs[0:64, 0:511], axis=1, keepdims=True)",   # skips the last column
    "xs[0:64, 0:1]",                                         # the first element
])
def test_a_partial_shift_is_refused_naming_the_op_its_line_and_the_interval(
        shift, spec_and_baseline):
    spec, baseline = spec_and_baseline(WIDE)
    hazard = range_refusal(parse(_kernel(shift)), baseline, spec)
    assert hazard is not None and hazard.kind == OVERFLOW and hazard.op == "exp"
    assert hazard.line == 5 and hazard.interval == (-200.0, 200.0)
    assert hazard.describe().startswith("line 5: exp(") and "[-200, 200]" in hazard.describe()


@pytest.mark.parametrize("shift", [
    "reduce_max(xs, axis=1, keepdims=True)",
    "maximum(reduce_max(xs[0:64, 0:256], axis=1, keepdims=True), "
    "reduce_max(xs[0:64, 256:512], axis=1, keepdims=True))",  # parts that cover the row
])
def test_a_max_over_the_whole_row_is_safe(shift, spec_and_baseline):
    spec, baseline = spec_and_baseline(WIDE)
    assert range_refusal(parse(_kernel(shift)), baseline, spec) is None


def test_a_check_refuses_a_stale_shift_before_emulating_and_shows_an_input(
        spec_and_baseline):
    spec, baseline = spec_and_baseline(WIDE)
    kernel = parse(_kernel("reduce_max(xs[0:64, 0:256], axis=1, keepdims=True)"))
    verdict = check(kernel, spec, examples=200, baseline=baseline)
    assert not verdict.equivalent and "exp(" in verdict.range_refusal
    assert verdict.counterexample.found_by.startswith("range analysis")
    assert verdict.examples <= 30  # no 200 draws: the analysis decided


def test_division_by_a_range_holding_zero_and_nan_are_hazards(spec_and_baseline):
    spec, baseline = spec_and_baseline("specs/rmsnorm.py")
    text = (CORPUS / "wrong" / "rmsnorm__eps_dropped.leir").read_text()
    hazard = range_refusal(parse(text), baseline, spec)
    assert hazard is not None and hazard.kind == ZERO_DIVISION and hazard.interval[0] == 0
    spec, baseline = spec_and_baseline("specs/layernorm.py")
    text = (CORPUS / "wrong" / "layernorm__one_pass_variance.leir").read_text()
    hazard = range_refusal(parse(text), baseline, spec)
    assert hazard is not None and hazard.kind == NAN and hazard.interval[0] < 0


def test_an_overflow_that_a_later_op_absorbs_is_no_refusal(spec_and_baseline):
    # x / (1 + exp(big)) is 0 where exp overflows: the sigmoid form of gelu
    spec, baseline = spec_and_baseline("specs/matmul_bias_gelu.py")
    text = (CORPUS / "equivalent" / "matmul_bias_gelu__bf16_operands_sigmoid.leir").read_text()
    kernel = parse(text)
    assert any(h.kind == OVERFLOW for h in analyze(kernel, declared_ranges(spec)).hazards)
    assert range_refusal(kernel, baseline, spec) is None


def test_every_equivalent_kernel_passes_the_analysis(read_corpus):
    for path in sorted((CORPUS / "equivalent").glob("*.leir")):
        entry = read_corpus(path)
        assert range_refusal(entry.kernel, entry.baseline, entry.spec) is None, path.name


def test_range_facts_say_which_declared_ranges_a_kernel_relies_on(read_corpus):
    no_max = read_corpus(CORPUS / "equivalent" / "mla_decode__no_max_bounded_scores.leir")
    facts = range_facts(no_max.kernel, no_max.spec)
    assert facts.hazards == [] and set(facts.relies_on) == {"q_nope", "q_pe", "c_kv", "k_pe"}
    assert all(any("overflow f32" in text for text in texts)
               for texts in facts.relies_on.values())
    shifted = range_facts(no_max.baseline, no_max.spec)
    assert shifted.relies_on == {}  # the max shift makes exp safe on any range
    assert facts.to_json()["relies_on"] == facts.relies_on


# ---------------------------------------------------------------------------------
# relations over terms: the same value however it is written (relations.py)
# ---------------------------------------------------------------------------------

EQUAL_FORMS = Path(__file__).resolve().parent / "corpus" / "equivalent"


def _softmax_wide(body: str) -> str:
    return ("# spec: tests/verify/corpus/specs/softmax_wide.py\n"
            'def kernel(x: "f32[64,512] @ dram") -> "f32[64,512] @ dram":\n'
            '    xs = load(x, "(64,512)/((8_L2B,8_L1B),(512))")\n' + body)


@pytest.mark.parametrize("body", [
    # the max as a negated min of the negation
    "    m = 0.0 - reduce_min(0.0 - xs, axis=1, keepdims=True)\n"
    "    e = exp(xs - m)\n    return store(e / reduce_sum(e, axis=1, keepdims=True))\n",
    "    m = -reduce_min(-xs, axis=1, keepdims=True)\n"
    "    e = exp(xs - m)\n    return store(e / reduce_sum(e, axis=1, keepdims=True))\n",
    # the max of a scaled value is the scaled max, for a scale written either way
    "    m = reduce_max(xs, axis=1, keepdims=True) * 0.5\n"
    "    e = exp(xs * 0.5 - m)\n    return store(e / reduce_sum(e, axis=1, keepdims=True))\n",
    "    m = reduce_max(xs / 3.0, axis=1, keepdims=True)\n"
    "    e = exp(xs * 0.3333333333333333 - m)\n"
    "    return store(e / reduce_sum(e, axis=1, keepdims=True))\n",
    # the shift and the sum written out twice: the same terms as the ones used
    "    e = exp(xs - reduce_max(xs, axis=1, keepdims=True))\n"
    "    s = reduce_sum(exp(xs - reduce_max(xs, axis=1, keepdims=True)), axis=1, "
    "keepdims=True)\n    return store(e / s)\n",
])
def test_a_bound_is_known_through_scales_negations_and_copies(body, spec_and_baseline):
    spec, baseline = spec_and_baseline("tests/verify/corpus/specs/softmax_wide.py")
    kernel = parse(_softmax_wide(body))
    assert analyze(kernel, declared_ranges(spec)).hazards == []


@pytest.mark.parametrize("body", [
    # a scale of the value but not of its max, or a max of the negation used as a max
    "    m = reduce_max(xs, axis=1, keepdims=True)\n"
    "    e = exp(xs * 0.5 - m)\n    return store(e / reduce_sum(e, axis=1, keepdims=True))\n",
    "    m = reduce_max(0.0 - xs, axis=1, keepdims=True)\n"
    "    e = exp(xs - m)\n    return store(e / reduce_sum(e, axis=1, keepdims=True))\n",
    "    m = reduce_max(xs, axis=1, keepdims=True) * 0.5\n"
    "    e = exp(xs - m)\n    return store(e / reduce_sum(e, axis=1, keepdims=True))\n",
])
def test_a_bound_of_another_image_is_no_bound(body, spec_and_baseline):
    spec, baseline = spec_and_baseline("tests/verify/corpus/specs/softmax_wide.py")
    hazard = range_refusal(parse(_softmax_wide(body)), baseline, spec)
    assert hazard is not None and hazard.kind == OVERFLOW, hazard


SOFTMAX_TAIL = "    e = exp(xs - m)\n    return store(e / reduce_sum(e, axis=1, keepdims=True))\n"
ROW = '"(64,1)/((8_L2B,8_L1B),(1))"'


@pytest.mark.parametrize("body", [
    # x + min(-x): the shift by a negated bound written as an add, either way round
    "    e = exp(xs + reduce_min(-xs, axis=1, keepdims=True))\n"
    "    return store(e / reduce_sum(e, axis=1, keepdims=True))\n",
    "    e = exp(reduce_min(0.0 - xs, axis=1, keepdims=True) + xs)\n"
    "    return store(e / reduce_sum(e, axis=1, keepdims=True))\n",
    # the max minus a margin: x - m is at most the margin, and is it once a row
    "    m = reduce_max(xs, axis=1, keepdims=True) - 8.0\n" + SOFTMAX_TAIL,
    "    m = reduce_max(xs - 20.0, axis=1, keepdims=True)\n" + SOFTMAX_TAIL,
    # the max rounded to bf16: within half a bf16 ulp of it
    '    m = cast(cast(reduce_max(xs, axis=1, keepdims=True), "bf16"), "f32")\n'
    + SOFTMAX_TAIL,
    # a running max started from -inf: the start never wins
    f"    m = full((64, 1), -inf, \"f32\", {ROW})\n"
    "    m = maximum(m, reduce_max(xs[0:64, 0:200], axis=1, keepdims=True))\n"
    "    m = maximum(reduce_max(xs[0:64, 200:512], axis=1, keepdims=True), m)\n"
    + SOFTMAX_TAIL,
    # the max in two stages through a reshape that splits the row into groups
    "    g = reduce_max(reshape(xs, (64, 8, 64)), axis=2, keepdims=False)\n"
    "    m = reduce_max(g, axis=1, keepdims=True)\n" + SOFTMAX_TAIL,
    # the sum through a reshape, and through a transposed copy
    "    e = exp(xs - reduce_max(xs, axis=1, keepdims=True))\n"
    "    g = reduce_sum(reshape(e, (64, 2, 256)), axis=2, keepdims=False)\n"
    "    return store(e / reduce_sum(g, axis=1, keepdims=True))\n",
    "    e = exp(xs - reduce_max(xs, axis=1, keepdims=True))\n"
    "    t = reduce_sum(transpose(e, perm=(1, 0)), axis=0, keepdims=True)\n"
    "    return store(e / transpose(t, perm=(1, 0)))\n",
])
def test_a_bound_is_known_through_offsets_roundings_starts_reshapes_and_transposes(
        body, spec_and_baseline):
    spec, _ = spec_and_baseline("tests/verify/corpus/specs/softmax_wide.py")
    kernel = parse(_softmax_wide(body))
    assert analyze(kernel, declared_ranges(spec)).hazards == []


@pytest.mark.parametrize("body, kind", [
    # x + max(-x) is x - min(x): up to 200
    ("    e = exp(xs + reduce_max(-xs, axis=1, keepdims=True))\n"
     "    return store(e / reduce_sum(e, axis=1, keepdims=True))\n", OVERFLOW),
    # a margin past what exp can hold
    ("    m = reduce_max(xs, axis=1, keepdims=True) - 120.0\n" + SOFTMAX_TAIL, OVERFLOW),
    # a start that can win is no bound
    (f"    m = maximum(full((64, 1), -50.0, \"f32\", {ROW}), "
     "reduce_max(xs[0:64, 0:256], axis=1, keepdims=True))\n" + SOFTMAX_TAIL, OVERFLOW),
    # two stages of different kinds, or over some of the groups, or the strided columns
    ("    g = reduce_min(reshape(xs, (64, 8, 64)), axis=2, keepdims=False)\n"
     "    m = reduce_max(g, axis=1, keepdims=True)\n" + SOFTMAX_TAIL, OVERFLOW),
    ("    g = reduce_max(reshape(xs, (64, 8, 64)), axis=2, keepdims=False)\n"
     "    m = reduce_max(g[0:64, 0:7], axis=1, keepdims=True)\n" + SOFTMAX_TAIL, OVERFLOW),
    ("    g = reduce_max(reshape(xs, (64, 8, 64)), axis=1, keepdims=False)\n"
     "    m = reduce_max(g[0:64, 0:63], axis=1, keepdims=True)\n" + SOFTMAX_TAIL, OVERFLOW),
    # the transposed sum over the other axis (each column's sum): may be 0
    ("    e = exp(xs - reduce_max(xs, axis=1, keepdims=True))\n"
     "    t = reduce_sum(transpose(e, perm=(1, 0)), axis=1, keepdims=True)\n"
     "    return store(e / transpose(t, perm=(1, 0)))\n", ZERO_DIVISION),
])
def test_near_misses_of_those_forms_are_refused(body, kind, spec_and_baseline):
    spec, baseline = spec_and_baseline("tests/verify/corpus/specs/softmax_wide.py")
    hazard = range_refusal(parse(_softmax_wide(body)), baseline, spec)
    assert hazard is not None and hazard.kind == kind, hazard


def test_a_product_of_a_term_with_itself_is_a_square(spec_and_baseline):
    spec, baseline = spec_and_baseline("specs/layernorm.py")
    kernel = parse((EQUAL_FORMS / "layernorm__inline_square.leir").read_text())
    # the two factors, written out apart, are one value
    subs = [i for i, n in enumerate(kernel.nodes) if n.op == "sub"]
    same = canonical_nodes(kernel)
    assert len(subs) >= 2 and len({same[i] for i in subs}) == 1
    assert range_refusal(kernel, baseline, spec) is None
    # a product of two different values may be negative: rsqrt of it is refused
    other = (EQUAL_FORMS / "layernorm__inline_square.leir").read_text().replace(
        "(xs - mu) * (xs - mu), axis", "(xs - mu) * (xs - mu * 0.5), axis")
    hazard = range_refusal(parse(other), baseline, spec)
    assert hazard is not None and hazard.kind == NAN


def _online(total: str, shift_b: str = "m") -> str:
    """Online softmax over two tiles: each tile's sum at its own max, rescaled."""
    return ("# spec: tests/verify/corpus/specs/softmax_wide.py\n"
            'def kernel(x: "f32[64,512] @ dram") -> "f32[64,512] @ dram":\n'
            '    a = load(x[0:64, 0:256], "(64,256)/((8_L2B,8_L1B),(256))")\n'
            '    b = load(x[0:64, 256:512], "(64,256)/((8_L2B,8_L1B),(256))")\n'
            "    ma = reduce_max(a, axis=1, keepdims=True)\n"
            "    mb = reduce_max(b, axis=1, keepdims=True)\n"
            "    la = reduce_sum(exp(a - ma), axis=1, keepdims=True)\n"
            "    lb = reduce_sum(exp(b - mb), axis=1, keepdims=True)\n"
            "    m = maximum(ma, mb)\n"
            f"    l = {total}\n"
            f"    return concat([store(exp(a - m) / l), store(exp(b - {shift_b}) / l)], axis=1)\n")


def test_tile_sums_rescaled_to_the_common_max_are_at_least_one(spec_and_baseline):
    spec, baseline = spec_and_baseline("tests/verify/corpus/specs/softmax_wide.py")
    for total in ("la * exp(ma - m) + lb * exp(mb - m)", "exp(mb - m) * lb + exp(ma - m) * la"):
        found = analyze(parse(_online(total)), declared_ranges(spec))
        assert found.hazards == [], total


@pytest.mark.parametrize("total, shift_b, kind", [
    ("la * exp(ma - m)", "m", ZERO_DIVISION),                   # a tile left out
    ("la * exp(ma - m) + la * exp(ma - m)", "m", ZERO_DIVISION),  # one tile twice
    ("la * exp(ma - m) + lb * exp(mb - m)", "ma", OVERFLOW),    # a stale shift
])
def test_tile_sums_that_miss_a_tile_or_the_common_max_are_refused(total, shift_b, kind,
                                                                  spec_and_baseline):
    spec, baseline = spec_and_baseline("tests/verify/corpus/specs/softmax_wide.py")
    hazard = range_refusal(parse(_online(total, shift_b)), baseline, spec)
    assert hazard is not None and hazard.kind == kind, hazard


def test_a_partial_sum_over_the_total_is_a_share(spec_and_baseline):
    spec, baseline = spec_and_baseline("tests/verify/corpus/specs/logsumexp_wide.py")
    text = ("# spec: tests/verify/corpus/specs/logsumexp_wide.py\n"
            'def kernel(x: "f32[64,512] @ dram") -> "f32[64,1] @ dram":\n'
            '    xs = load(x, "(64,512)/((8_L2B,8_L1B),(512))")\n'
            "    m = reduce_max(xs, axis=1, keepdims=True)\n"
            "    e = exp(xs - m)\n"
            "    first = reduce_sum(e[0:64, 0:256], axis=1, keepdims=True)\n"
            "    s = first + reduce_sum(e[0:64, 256:512], axis=1, keepdims=True)\n"
            "    return store(m + log(s) + exp(FRACTION * 80.0))\n")
    share = analyze(parse(text.replace("FRACTION", "first / s")), declared_ranges(spec))
    assert share.hazards == []  # first / s <= 1: exp(80 first / s) may overflow if not
    other = parse(text.replace("FRACTION", "s / first"))  # not a share: refused
    hazard = range_refusal(other, baseline, spec)
    assert hazard is not None and hazard.kind in (ZERO_DIVISION, OVERFLOW)


def test_the_hand_kernels_pass_the_analysis_without_a_clamp(repo, spec_and_baseline):
    """No kernel in benchmarks/kernels needs a guard that changes no value (a clamp of
    a value to bounds it already keeps) to get through the range analysis."""
    from stochopt.leir.rules import Const

    for path in sorted((repo / "benchmarks/kernels").glob("*.leir")):
        kernel = parse(path.read_text())
        spec, baseline = spec_and_baseline(f"specs/{path.stem}.py")
        clamps = [n.line for n in kernel.nodes if n.op in ("maximum", "minimum")
                  and any(isinstance(a, Const) for a in n.args)]
        assert clamps == [], f"{path.name}: a clamp at lines {clamps}"
        assert range_refusal(kernel, baseline, spec) is None, path.name
