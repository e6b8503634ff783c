"""The screening set: the chain's cheap fixed test inputs, grown by counterexamples."""

from __future__ import annotations

from stochopt.machine import load_machine
from stochopt.verify import ScreeningSet, check
from stochopt.verify.screening import FAIL_COST, MAX_INPUT_COST

MACHINE = load_machine(None)


def test_the_baseline_costs_nothing(spec_and_baseline):
    for path in ("specs/softmax.py", "specs/layernorm.py", "specs/attention_scores.py"):
        spec, baseline = spec_and_baseline(path)
        screen = ScreeningSet(spec, baseline, MACHINE, count=3)
        assert len(screen) == 3 and screen.error(baseline) == 0.0


def test_a_wrong_kernel_costs_something(read_corpus, repo):
    entry = read_corpus(repo / "tests/verify/corpus/wrong/softmax__exp_to_tanh.leir")
    screen = ScreeningSet(entry.spec, entry.baseline, MACHINE, count=3)
    error = screen.error(entry.kernel)
    # wrong math on every input: the full cost of each
    assert error == 3 * (FAIL_COST + MAX_INPUT_COST)


def test_a_precision_failure_costs_less_than_wrong_math(read_corpus, repo):
    entry = read_corpus(repo / "tests/verify/corpus/wrong/matmul__bf16_result.leir")
    screen = ScreeningSet(entry.spec, entry.baseline, MACHINE, count=3)
    assert FAIL_COST < screen.error(entry.kernel) < 3 * (FAIL_COST + MAX_INPUT_COST)


def test_the_range_analysis_refuses_a_stale_shift_on_every_input_unemulated(read_corpus,
                                                                            repo):
    # the first-half max passes a plain uniform input, but it can overflow on another
    entry = read_corpus(repo / "tests/verify/corpus/wrong/softmax_wide__max_of_first_half.leir")
    screen = ScreeningSet(entry.spec, entry.baseline, MACHINE, count=1)
    assert screen.range_refused(entry.kernel)
    assert screen.error(entry.kernel) == FAIL_COST + MAX_INPUT_COST
    assert not screen.range_refused(entry.baseline) and screen.error(entry.baseline) == 0.0


def test_an_added_counterexample_makes_the_error_grow(read_corpus, repo):
    # the clamped mean square passes a plain uniform input; a structured case shows it
    entry = read_corpus(repo / "tests/verify/corpus/wrong/rmsnorm__clamped_mean_square.leir")
    screen = ScreeningSet(entry.spec, entry.baseline, MACHINE, count=1)
    assert screen.error(entry.kernel) == 0.0
    verdict = check(entry.kernel, entry.spec, examples=40, baseline=entry.baseline)
    screen.add(verdict.counterexample.inputs)
    assert len(screen) == 2 and screen.error(entry.kernel) > 0.0
    assert screen.error(entry.baseline) == 0.0


def test_screening_stops_once_past_the_threshold(read_corpus, repo):
    entry = read_corpus(repo / "tests/verify/corpus/wrong/softmax__normalize_by_max.leir")
    screen = ScreeningSet(entry.spec, entry.baseline, MACHINE, count=3)
    assert screen.error(entry.kernel, threshold=1.0) == FAIL_COST + MAX_INPUT_COST


def test_screening_agrees_with_the_check_on_equivalent_rewrites(read_corpus, repo):
    for name in ("softmax__subtract_row_min", "gelu__sigmoid_form", "rmsnorm__folded_scale"):
        entry = read_corpus(repo / f"tests/verify/corpus/equivalent/{name}.leir")
        screen = ScreeningSet(entry.spec, entry.baseline, MACHINE, count=3)
        assert screen.error(entry.kernel) == 0.0, name
