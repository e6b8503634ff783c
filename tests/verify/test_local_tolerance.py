"""Local tolerances (docs/verification.md): an element's limits follow the magnitudes
that produce it, so a sentinel or an outlier elsewhere in the output cannot open them,
and the 2x-baseline rule compares row by row."""

from __future__ import annotations

import numpy as np

from stochopt.leir import parse
from stochopt.verify.compare import local_scale, precision_check, semantic_error
from stochopt.verify.magnitude import magnitudes

SUM = parse('''def kernel(x: "f32[2,4] @ dram") -> "f32[2,1] @ dram":
    return store(reduce_sum(load(x, "(2,4)/((2),(4))"), axis=1, keepdims=True))
''')


def test_the_magnitude_of_a_cancelling_sum_is_the_sum_of_its_terms():
    x = np.array([[1e6, -1e6, 1.0, 2.0], [0.5, 0.25, 0.0, 0.0]], np.float32)
    ref = x.astype(np.float64).sum(axis=1, keepdims=True)
    assert magnitudes(SUM, {"x": x}, ref).ravel().tolist() == [2e6 + 3.0, 0.75]


def test_a_sentinel_row_opens_no_other_rows_limits():
    ref = np.array([[1.0, 2.0], [-1e30, -1e30]])
    size = np.abs(ref)
    wrong = ref.copy()
    wrong[0, 0] += 1e-3  # a wrong value next to the sentinel row
    _, bad = semantic_error(wrong, ref, 1.0, size)
    assert bad is not None and bad.index == (0, 0)
    _, bad = precision_check(wrong, ref, "f32", None, None, ref, magnitude=size)
    assert bad is not None and bad.index == (0, 0)
    # the same error without magnitudes, at the scale of the whole output, passed
    assert semantic_error(wrong, ref, 1.0)[1] is None


def test_a_sentinel_in_the_same_row_but_not_among_the_terms_opens_nothing():
    ref = np.array([[3.0, -1e30, 2.0]])
    size = np.array([[3.0, 1e30, 2.0]])  # the sentinel is not a term of 3.0 or 2.0
    assert local_scale(ref, size).tolist() == [[3.0, 1e30, 2.0]]
    wrong = ref + np.array([[1e-2, 0.0, 0.0]])
    assert precision_check(wrong, ref, "f32", None, None, ref, magnitude=size)[1] is not None


def test_a_cancelled_element_is_judged_at_its_rows_scale_not_its_own():
    ref = np.array([[4.0, 1e-6]])
    size = np.array([[4.0, 8.0]])  # 1e-6 is what is left of terms of size 8
    assert local_scale(ref, size).tolist() == [[4.0, 4.0]]


def test_the_baseline_rule_is_per_row():
    ref = np.array([[1.0, 1.0], [1.0, 1.0]])
    base = ref + np.array([[1e-4, 0.0], [0.0, 0.0]])  # poor in row 0 only
    got = ref + np.array([[0.0, 0.0], [5e-5, 0.0]])   # 5e-5 off in row 1
    _, bad = precision_check(got, ref, "f32", None, None, base, magnitude=np.abs(ref))
    assert bad is not None and bad.index == (1, 0)
    # the same error in row 0, where the baseline is as poor, passes
    got = ref + np.array([[5e-5, 0.0], [0.0, 0.0]])
    assert precision_check(got, ref, "f32", None, None, base, magnitude=np.abs(ref))[1] is None
