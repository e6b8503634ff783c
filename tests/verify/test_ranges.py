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
