"""The definitions of docs/verification.md, pinned on small arrays: the semantic
tolerance, the default tolerances, twice the baseline above a floor, the ill-conditioned
rule, the non-finite rule."""

from __future__ import annotations

import numpy as np
import pytest

from stochopt.verify.compare import (
    DEFAULT_TOL,
    FLOOR_ULPS,
    SEMANTIC_TOL,
    ULP,
    precision_check,
    semantic_error,
)

REF = np.array([[1.0, -2.0, 0.5, 4.0]])  # output scale 4


def _off(ref, where, by):
    out = ref.copy()
    out[where] += by
    return out


def test_the_documented_constants():
    assert SEMANTIC_TOL == 1e-9
    assert DEFAULT_TOL["f32"] == (1e-4, 1e-5) and DEFAULT_TOL["bf16"] == (2e-2, 4e-3)
    assert FLOOR_ULPS == 32 and ULP["f32"] == 2.0**-23 and ULP["bf16"] == 2.0**-7


def test_semantics_allows_1e_9_of_the_output_scale():
    assert semantic_error(_off(REF, (0, 2), 0.9e-9 * 4), REF)[1] is None
    err, bad = semantic_error(_off(REF, (0, 2), 1.1e-9 * 4), REF)
    assert bad.check == "semantics" and bad.index == (0, 2) and err == pytest.approx(1.1)


def test_semantics_never_takes_the_scale_below_the_typical_one():
    tiny = REF * 1e-6
    got = _off(tiny, (0, 0), 1e-12)
    assert semantic_error(got, tiny)[1] is not None
    assert semantic_error(got, tiny, typical_scale=4.0)[1] is None


def test_precision_default_tolerance_is_rtol_plus_atol_of_scale():
    # f32: 1e-4 |ref| + 1e-5 * scale at element 0 (ref 1, scale 4) = 1.4e-4
    assert precision_check(_off(REF, (0, 0), 1.3e-4), REF, "f32", None, None, None)[1] is None
    ratio, bad = precision_check(_off(REF, (0, 0), 1.5e-4), REF, "f32", None, None, None)
    assert bad.check == "precision" and ratio == pytest.approx(1.5 / 1.4)


def test_precision_spec_tolerance_replaces_the_default_and_the_baseline():
    got = _off(REF, (0, 0), 0.05)
    exact_baseline = REF.copy()
    assert precision_check(got, REF, "f32", 0.1, None, exact_baseline)[1] is None
    assert precision_check(got, REF, "f32", None, 0.01, exact_baseline)[1] is not None


def test_precision_no_worse_than_twice_the_baseline():
    baseline = _off(REF, (0, 3), 2e-5)           # 2e-5 / (4e-4 + 4e-5) of the tolerance
    ok = _off(REF, (0, 3), 3.9e-5)
    worse = _off(REF, (0, 3), 4.1e-5)
    assert precision_check(ok, REF, "f32", None, None, baseline)[1] is None
    bad = precision_check(worse, REF, "f32", None, None, baseline)[1]
    assert bad is not None and "twice the baseline" in bad.detail


def test_precision_floor_is_a_few_ulps_of_the_scale():
    floor = FLOOR_ULPS * ULP["f32"] * 4.0        # absolute, at every element
    exact_baseline = REF.copy()
    assert precision_check(_off(REF, (0, 2), 0.9 * floor), REF, "f32", None, None,
                           exact_baseline)[1] is None
    assert precision_check(_off(REF, (0, 2), 1.1 * floor), REF, "f32", None, None,
                           exact_baseline)[1] is not None


def test_precision_never_more_than_the_tolerance_where_the_baseline_uses_under_half():
    baseline = _off(REF, (0, 0), 0.6e-4)          # 0.43 of the tolerance
    got = _off(REF, (0, 0), 1.5e-4)               # 1.07 of it: past the tolerance
    bad = precision_check(got, REF, "f32", None, None, baseline)[1]
    assert bad is not None and "whichever is smaller" in bad.detail
    # the floor is capped at the tolerance too, whatever the baseline achieved
    assert precision_check(_off(REF, (0, 0), 1.5e-4), REF, "f32", None, None,
                           REF.copy())[1] is not None


def test_precision_past_the_tolerance_within_twice_a_baseline_that_uses_over_half():
    # no cliff where the baseline nears the tolerance: 0.71 of it allows 1.42, as 1.01
    # of it allows 2.02 (gelu's tail, where the f32 formula lives near its tolerance)
    baseline = _off(REF, (0, 0), 1.0e-4)          # 0.71 of the tolerance
    assert precision_check(_off(REF, (0, 0), 1.9e-4), REF, "f32", None, None,
                           baseline)[1] is None  # 1.36 of it: within twice the baseline
    bad = precision_check(_off(REF, (0, 0), 2.1e-4), REF, "f32", None, None, baseline)[1]
    assert bad is not None and "past half the tolerance" in bad.detail


def test_precision_where_the_baseline_misses_the_tolerance_twice_its_error_is_the_limit():
    baseline = _off(REF, (0, 0), 1e-3)            # 7.1x the tolerance: ill-conditioned
    assert precision_check(_off(REF, (0, 0), 1.9e-3), REF, "f32", None, None,
                           baseline)[1] is None
    bad = precision_check(_off(REF, (0, 0), 2.1e-3), REF, "f32", None, None, baseline)[1]
    assert bad is not None and "past half the tolerance on this input" in bad.detail
    # the baseline passes itself on such an input
    assert precision_check(baseline, REF, "f32", None, None, baseline)[1] is None


def test_precision_baseline_error_measured_nearby_raises_the_yardstick():
    exact_baseline = REF.copy()
    got = _off(REF, (0, 0), 2e-5)                 # 0.14 of the tolerance, past the floor
    assert precision_check(got, REF, "f32", None, None, exact_baseline)[1] is not None
    assert precision_check(got, REF, "f32", None, None, exact_baseline,
                           baseline_error=0.1)[1] is None


def test_inside_the_tolerance_the_floor_is_at_the_scale_of_the_terms():
    # a score of 0.01 that a dot product of terms summing to 4 in magnitude cancels to:
    # the floor is 32 ulps of 4, not of 0.01, so any order of the additions passes
    # inside the tolerance (1.1e-4 of 0.01 in a row of one element)
    ref, size = np.array([[0.01]]), np.array([[4.0]])
    exact_baseline = ref.copy()
    inside = _off(ref, (0, 0), 0.9e-6)            # 0.82 of the tolerance, 75 ulps of 0.01
    assert precision_check(inside, ref, "f32", None, None, exact_baseline)[1] is not None
    assert precision_check(inside, ref, "f32", None, None, exact_baseline,
                           magnitude=size)[1] is None
    # the tolerance still binds: the terms' scale opens nothing past it
    past = _off(ref, (0, 0), 1.2e-6)
    assert precision_check(past, ref, "f32", None, None, exact_baseline,
                           magnitude=size)[1] is not None
    # where the terms are the result's own size, the floor is as before
    assert precision_check(inside, ref, "f32", None, None, exact_baseline,
                           magnitude=np.abs(ref))[1] is not None


@pytest.mark.parametrize("got_value, ref_value", [
    (np.nan, 1.0), (np.inf, 1.0), (1.0, np.inf), (-np.inf, np.inf), (1.0, np.nan),
])
def test_non_finite_values_must_match_exactly(got_value, ref_value):
    ref = _off(REF, (0, 1), 0.0)
    ref[0, 1] = ref_value
    got = ref.copy()
    got[0, 1] = got_value
    sem, bad = semantic_error(got, ref)
    assert bad.check == "semantics" and bad.index == (0, 1) and sem == np.inf
    prec, bad = precision_check(got, ref, "f32", None, None, None)
    assert bad.check == "non-finite" and bad.index == (0, 1)


def test_matching_infinities_and_nans_pass():
    ref = np.array([-np.inf, 1.0, np.nan, np.inf])
    assert semantic_error(ref.copy(), ref)[1] is None
    assert precision_check(ref.copy(), ref, "f32", None, None, ref.copy())[1] is None


def test_a_baseline_that_is_not_finite_leaves_the_tolerance_to_decide():
    baseline = _off(REF, (0, 0), np.nan)
    assert precision_check(_off(REF, (0, 0), 1e-4), REF, "f32", None, None,
                           baseline)[1] is None
    assert precision_check(_off(REF, (0, 0), 1e-3), REF, "f32", None, None,
                           baseline)[1] is not None


def test_bf16_outputs_get_the_bf16_default():
    # 2e-2 |ref| + 4e-3 * scale = 0.036 at element 0
    assert precision_check(_off(REF, (0, 0), 0.03), REF, "bf16", None, None, REF)[1] is None
    assert precision_check(_off(REF, (0, 0), 0.04), REF, "bf16", None, None, REF)[1] is not None


def test_the_floor_grows_with_the_terms_of_the_baselines_sums():
    """Sums of n terms in another order differ by about sqrt(n / 6) units, so an error
    of 60 units at the output's scale (4) is noise after 4,224 terms (a 106-unit floor)
    and a difference after none (32 units), where the baseline is exact."""
    from stochopt.verify.compare import REORDER_SIGMAS

    got = _off(REF, (0, 3), 60 * ULP["f32"] * 4)
    assert precision_check(got, REF, "f32", None, None, REF.copy())[1] is not None
    assert precision_check(got, REF, "f32", None, None, REF.copy(), terms=4224)[1] is None
    assert REORDER_SIGMAS * np.sqrt(4224 / 6) == pytest.approx(106.1, abs=0.1)
    far = _off(REF, (0, 3), 120 * ULP["f32"] * 4)
    assert precision_check(far, REF, "f32", None, None, REF.copy(), terms=4224)[1] is not None


def test_the_terms_are_the_baselines_sums_and_contractions(spec_and_baseline):
    from stochopt.verify.magnitude import reduction_terms

    _, baseline = spec_and_baseline("specs/attention_decode.py")
    assert reduction_terms(baseline) == 128 + 2048 + 2048  # q k^T, the row sum, p v
    _, baseline = spec_and_baseline("specs/gelu.py")
    assert reduction_terms(baseline) == 0
