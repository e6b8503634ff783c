"""The two checks of equivalence, as plain functions on arrays (docs/verification.md).

semantics: the kernel in exact mode (float64, no rounding) against the float64
reference, within SEMANTIC_TOL of the output's scale (never less than its scale on a
plain uniform input): wrong math cannot hide in a loose precision tolerance.

precision: the kernel in its own dtypes against the reference, within the spec's
rtol/atol when it gives them; otherwise within the output dtype's default AND no worse
than twice the baseline kernel's error on the same input (above a floor of a few units
in the last place of the output's scale), so accuracy is never traded away silently.
Where the baseline itself misses the default on an input (an ill-conditioned input),
twice the baseline's error is the limit.

Non-finite values (nan, +inf, -inf) must appear exactly where the reference has them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SEMANTIC_TOL = 1e-9
# default (rtol, atol as a fraction of the output's scale) per output dtype
DEFAULT_TOL = {"f32": (1e-4, 1e-5), "bf16": (2e-2, 4e-3), "i32": (0.0, 0.0),
               "bool": (0.0, 0.0)}
ULP = {"f32": 2.0**-23, "bf16": 2.0**-7, "i32": 0.0, "bool": 0.0}
# rounding noise: exp(x - c) with |x - c| up to 16 loses 4-6 ulps to the rounding of
# its argument alone, so a floor of "a few" ulps would refuse such rewrites of softmax
FLOOR_ULPS = 16


@dataclass(frozen=True)
class Mismatch:
    """The worst element of a failed comparison."""
    check: str          # "semantics", "precision" or "non-finite"
    index: tuple[int, ...]
    expected: float
    got: float
    error: float        # how far past the tolerance: > 1 fails
    detail: str

    def describe(self) -> str:
        return (f"{self.check} check failed at {list(self.index)}: expected "
                f"{self.expected!r}, got {self.got!r} ({self.detail})")


def output_scale(ref: np.ndarray) -> float:
    finite = np.abs(ref[np.isfinite(ref)])
    scale = float(finite.max()) if finite.size else 0.0
    return scale if scale > 0 else 1.0


def nonfinite_mismatch(got: np.ndarray, ref: np.ndarray) -> Mismatch | None:
    """nan where nan, +inf where +inf, -inf where -inf, finite elsewhere."""
    g, r = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    bad = (np.isnan(g) != np.isnan(r)) | (np.isinf(g) != np.isinf(r)) | (
        np.isinf(r) & (np.sign(g) != np.sign(r)))
    if not bad.any():
        return None
    idx = np.unravel_index(int(np.argmax(bad)), bad.shape)
    return Mismatch("non-finite", tuple(int(i) for i in idx), float(r[idx]), float(g[idx]),
                    float("inf"), f"{int(bad.sum())} elements differ in nan/inf")


def semantic_limit(ref: np.ndarray, typical_scale: float = 0.0) -> float:
    """The largest |exact - reference| the semantic check lets through."""
    return SEMANTIC_TOL * max(output_scale(np.asarray(ref, np.float64)), typical_scale)


def semantic_error(got: np.ndarray, ref: np.ndarray, typical_scale: float = 0.0
                   ) -> tuple[float, Mismatch | None]:
    """Largest |exact - reference| over the output's scale, in units of SEMANTIC_TOL.

    The scale is never taken below typical_scale (the output's scale on a plain uniform
    input): the float64 reference has rounding of its own, and where an input makes the
    output tiny by cancellation (gelu's 1 + tanh(z) far in the tail, on a constant
    input) that rounding is far more than 1e-9 of the tiny output."""
    bad = nonfinite_mismatch(got, ref)
    if bad is not None:
        return float("inf"), Mismatch("semantics", bad.index, bad.expected, bad.got,
                                      float("inf"), bad.detail)
    g, r = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    finite = np.isfinite(r)
    with np.errstate(invalid="ignore"):  # inf - inf where both are inf: masked out
        err = np.where(finite, np.abs(g - r), 0.0) / semantic_limit(r, typical_scale)
    worst = float(err.max()) if err.size else 0.0
    if worst <= 1.0:
        return worst, None
    idx = np.unravel_index(int(np.argmax(err)), err.shape)
    return worst, Mismatch("semantics", tuple(int(i) for i in idx), float(r[idx]),
                           float(g[idx]), worst,
                           f"{worst:.3g}x the semantic tolerance of {SEMANTIC_TOL:g} of scale")


def tolerance(ref: np.ndarray, dtype: str, rtol: float | None, atol: float | None):
    """Per-element allowed error: the spec's rtol/atol, or the dtype's default."""
    r = np.abs(np.asarray(ref, np.float64))
    if rtol is not None or atol is not None:
        return (atol or 0.0) + (rtol or 0.0) * r
    d_rtol, d_atol = DEFAULT_TOL[dtype]
    return d_atol * output_scale(ref) + d_rtol * r


def precision_ratio(got: np.ndarray, ref: np.ndarray, tol: np.ndarray) -> np.ndarray:
    """Per-element error over tolerance (0 where the reference is not finite)."""
    g, r = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    finite = np.isfinite(r)
    with np.errstate(invalid="ignore"):  # inf - inf where both are inf: masked out
        diff = np.where(finite, np.abs(g - r), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(diff == 0, 0.0, diff / np.where(tol > 0, tol, 0.0))
    return np.nan_to_num(ratio, nan=np.inf, posinf=np.inf)


def floor_ratio(ref: np.ndarray, dtype: str, tol: np.ndarray) -> np.ndarray:
    """Rounding noise that no kernel need beat, whatever the baseline achieved, as a
    fraction of each element's tolerance: FLOOR_ULPS units in the last place of the
    output's scale. Of the scale, not of the element, because the rounding of a sum or
    a dot product follows the size of its terms, not of its possibly cancelled result."""
    ulps = FLOOR_ULPS * ULP[dtype] * output_scale(ref)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(tol > 0, ulps / np.where(tol > 0, tol, 1.0), np.inf)


def precision_allowance(ref: np.ndarray, dtype: str, rtol: float | None, atol: float | None,
                        baseline: np.ndarray | None, baseline_error: float = 0.0):
    """(tolerance, allowed fraction of it, why) per element: what precision_check lets
    through on this input. It depends only on the input, so screening computes it once."""
    tol = tolerance(ref, dtype, rtol, atol)
    allowed = np.ones_like(tol)
    why = "the tolerance"
    if rtol is None and atol is None and baseline is not None:
        base_ratio = precision_ratio(baseline, ref, tol)
        base_worst = max(float(base_ratio.max()) if base_ratio.size else 0.0,
                         baseline_error)
        # twice the baseline's error, capped at the tolerance -- unless the baseline is
        # itself past the tolerance on this input (an ill-conditioned input, such as
        # gelu's 1 + tanh(z) near -1 or layernorm's x - mean on a constant row): then
        # no worse than twice the baseline, or the baseline could not pass itself. A
        # baseline that is not finite where the reference is sets no limit: the
        # tolerance does.
        ill = 1.0 < base_worst < np.inf
        twice = 2.0 * base_worst if base_worst < np.inf else 1.0
        allowed = np.maximum(twice, floor_ratio(ref, dtype, tol))
        if not ill:
            allowed = np.minimum(1.0, allowed)
        why = (f"twice the baseline's error ({base_worst:.3g} of tolerance), which is past "
               "the tolerance on this input" if ill else
               f"the tolerance or twice the baseline's error "
               f"({base_worst:.3g} of tolerance), whichever is smaller")
    return tol, allowed, why


def precision_check(got: np.ndarray, ref: np.ndarray, dtype: str, rtol: float | None,
                    atol: float | None, baseline: np.ndarray | None,
                    baseline_error: float = 0.0) -> tuple[float, Mismatch | None]:
    """Largest error as a fraction of what is allowed (> 1 fails), and the worst element
    when the check fails. baseline_error: the baseline's worst error (as a fraction of
    the tolerance) on inputs near this one, taken when larger than its error here."""
    bad = nonfinite_mismatch(got, ref)
    if bad is not None:
        return float("inf"), bad
    tol, allowed, why = precision_allowance(ref, dtype, rtol, atol, baseline, baseline_error)
    ratio = precision_ratio(got, ref, tol)
    with np.errstate(divide="ignore", invalid="ignore"):
        over = np.where(ratio == 0, 0.0, ratio / allowed)
    worst = float(over.max()) if over.size else 0.0
    if worst <= 1.0:
        return worst, None
    idx = np.unravel_index(int(np.argmax(over)), over.shape)
    g, r = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    return worst, Mismatch("precision", tuple(int(i) for i in idx), float(r[idx]),
                           float(g[idx]), worst,
                           f"error is {float(ratio[idx]):.3g} of the tolerance, more than "
                           f"{why}")
