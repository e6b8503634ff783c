"""The corpora: wrong kernels the verifier must refuse, each with a counterexample, and
equivalent rewrites it must accept (docs/verification.md has the measured figures)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stochopt.verify import check
from tests.verify.witness import witness_inputs

CORPUS = Path(__file__).resolve().parent / "corpus"
WRONG = sorted((CORPUS / "wrong").glob("*.leir"))
EQUIVALENT = sorted((CORPUS / "equivalent").glob("*.leir"))
# lose a little accuracy where only rare inputs show it: refused or not by chance, so
# in neither corpus; kept, with the reason, for docs/verification.md
BORDERLINE = sorted((CORPUS / "borderline").glob("*.leir"))

# A wrong kernel shows itself on the first inputs (most on the first structured case);
# a '# examples: N' line in the file asks for more where hypothesis must search.
WRONG_EXAMPLES = 40
# Acceptance means more the more inputs it survives: the full default (200) where an
# example is cheap, fewer where one costs tens of milliseconds. The structured cases
# (docs/verification.md) always run first. `python tests/verify/measure_corpus.py` runs
# every kernel at 200.
EQUIVALENT_EXAMPLES = {"softmax": 200, "softmax_wide": 200, "rotary": 200, "matmul": 100}
EQUIVALENT_DEFAULT = 40
# specs whose wrong kernels are cheap enough to refuse in the fast tier; the rest is slow
# (vector_add's million elements are a second an input: its tiny-terms kernel needs 17)
FAST_SPECS = {"softmax", "softmax_wide", "rotary", "attention_scores",
              "logsumexp_wide", "row_variance", "masked_max_sentinel",
              "masked_softmax_wide", "masked_scale"}
# the red-team corpus: wrong kernels with a '# witness:' line (a legal input where
# they are wrong, replayable with --inputs)
RED_TEAM = [p for p in WRONG if "# witness:" in p.read_text()]


def _spec_of(path: Path) -> str:
    return path.stem.split("__")[0]


def _tiered(paths: list[Path], seeds=(0,), fast_specs=FAST_SPECS) -> list:
    """One case per kernel and seed; slow unless seed 0 of a spec in fast_specs."""
    return [pytest.param(p, seed, id=f"{p.stem}-seed{seed}",
                         marks=() if seed == 0 and _spec_of(p) in fast_specs
                         else pytest.mark.slow)
            for p in paths for seed in seeds]


def test_the_corpora_are_large_and_spread_over_many_specs():
    assert len(WRONG) >= 25 and len({_spec_of(p) for p in WRONG}) >= 8
    assert len(EQUIVALENT) >= 15 and len({_spec_of(p) for p in EQUIVALENT}) >= 6
    assert len(RED_TEAM) >= 30 and len({_spec_of(p) for p in RED_TEAM}) >= 6


@pytest.mark.parametrize("path", WRONG + EQUIVALENT + BORDERLINE,
                         ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_corpus_kernel_names_its_spec_and_says_why(path, read_corpus):
    entry = read_corpus(path)
    assert entry.spec.name == _spec_of(path)
    assert len(entry.why) > 10, f"{path.name}: say what is wrong or why it is equivalent"


@pytest.mark.parametrize("path, seed", _tiered(WRONG, seeds=(0, 1, 2)))
def test_wrong_kernel_is_refused_with_a_counterexample(path, seed, read_corpus):
    entry = read_corpus(path)
    verdict = check(entry.kernel, entry.spec, examples=entry.examples or WRONG_EXAMPLES,
                    baseline=entry.baseline, seed=seed)
    assert not verdict.equivalent, f"{path.name} was accepted: {entry.why}"
    cex = verdict.counterexample
    assert cex is not None and cex.found_by
    m = cex.mismatch
    if m.check == "range":  # refused statically, and no input tried showed it
        assert verdict.range_refusal and m.index == () and "line" in m.detail
        return
    assert m.check in ("semantics", "precision", "non-finite")
    shape = entry.kernel.output_type.shape
    assert len(m.index) == len(shape)
    assert all(0 <= i < n for i, n in zip(m.index, shape, strict=True))
    assert isinstance(m.expected, float) and isinstance(m.got, float)
    assert m.expected != m.got or np.isnan(m.got)
    assert m.error > 1.0
    text = cex.describe()
    assert m.check in text and str(list(m.index)) in text
    assert set(cex.inputs) == set(entry.spec.inputs)


@pytest.mark.parametrize("path", [pytest.param(p, marks=() if _spec_of(p) != "vector_add"
                                                  else pytest.mark.slow)
                                   for p in RED_TEAM], ids=lambda p: p.stem)
def test_red_team_kernel_is_wrong_on_its_witness_input(path):
    """The witness is a legal input (inside the spec's ranges) on which the kernel's
    output really differs: replayed alone, without the range analysis's help."""
    inputs, kernel, spec = witness_inputs(path)
    for name, x in inputs.items():
        lo, hi = spec.inputs[name].bounds
        assert np.all((np.asarray(x, np.float64) >= lo) & (np.asarray(x, np.float64) <= hi))
    verdict = check(kernel, spec, examples=1, extra_inputs=[inputs], structured=False)
    assert not verdict.equivalent
    assert verdict.counterexample.mismatch.check in ("semantics", "precision", "non-finite")
    assert verdict.counterexample.found_by.endswith("given input")


# acceptance runs every example (up to 200 on a full-size spec): seconds a kernel, all
# slow; the fast tier refuses the wrong kernels above, which fail on their first inputs
@pytest.mark.parametrize("path, seed", _tiered(EQUIVALENT, fast_specs=frozenset()))
def test_equivalent_kernel_is_accepted(path, seed, read_corpus):
    entry = read_corpus(path)
    examples = entry.examples or EQUIVALENT_EXAMPLES.get(entry.spec.name, EQUIVALENT_DEFAULT)
    verdict = check(entry.kernel, entry.spec, examples=examples, baseline=entry.baseline,
                    seed=seed)
    assert verdict.equivalent, (f"{path.name} was refused: "
                                f"{verdict.counterexample.describe()}")
    assert verdict.examples == examples
    assert verdict.max_semantic_error <= 1.0 and verdict.max_precision_error <= 1.0


# which check refuses a kernel is part of the design: exact math with lost precision
# must pass the semantic check and fail the precision check, an overflow the non-finite
# rule, and a bug that uniform inputs hide must be found by a structured case
@pytest.mark.parametrize("name, check_name", [
    ("matmul__bf16_result", "precision"),
    ("matmul__bf16_partial_sums", "precision"),
    ("rmsnorm__bf16_sum_of_squares", "precision"),
    ("matmul_bias_gelu__bf16_hidden", "precision"),
    ("layernorm__one_pass_variance", "precision"),
    ("softmax_wide__no_max_subtraction", "non-finite"),
    ("softmax_wide__max_of_first_half", "non-finite"),
    ("rotary__concat_swapped", "semantics"),
    ("mla_decode__pe_term_dropped", "semantics"),
])
@pytest.mark.slow
def test_the_right_check_refuses_each_kind_of_wrong_kernel(name, check_name, read_corpus):
    entry = read_corpus(CORPUS / "wrong" / f"{name}.leir")
    verdict = check(entry.kernel, entry.spec, examples=WRONG_EXAMPLES, baseline=entry.baseline)
    assert verdict.counterexample.mismatch.check == check_name
    if check_name == "precision":
        assert verdict.max_semantic_error <= 1.0  # the math itself is right


@pytest.mark.parametrize("name, patterns", [
    ("attention_scores__masked_to_zero", {"mask": {"all_false_rows", "single_true",
                                                   "all_false"}}),
    ("softmax_wide__max_of_first_half", {"x": {"outlier", "one_hot"}}),
    ("rmsnorm__clamped_mean_square", {"x": {"constant_rows", "outlier", "zeros",
                                            "constant"}}),
])
def test_bugs_that_uniform_inputs_hide_are_found_by_structured_cases(name, patterns,
                                                                      read_corpus):
    entry = read_corpus(CORPUS / "wrong" / f"{name}.leir")
    uniform_only = check(entry.kernel, entry.spec, examples=1, structured=False,
                         baseline=entry.baseline)
    verdict = check(entry.kernel, entry.spec, examples=WRONG_EXAMPLES, baseline=entry.baseline)
    assert not verdict.equivalent
    for name_, allowed in patterns.items():
        assert verdict.counterexample.recipes[name_].pattern in allowed
    # a single plain draw does not show these bugs (the draw shrinks towards uniform)
    assert uniform_only.equivalent or uniform_only.counterexample.recipes is None or any(
        uniform_only.counterexample.recipes[n].pattern != "uniform" for n in patterns)
