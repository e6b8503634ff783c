"""The two checks of equivalence, as plain functions on arrays (docs/verification.md).

semantics: the kernel in exact mode (float64, no rounding) against the float64
reference, within SEMANTIC_TOL of the output's scale: wrong math cannot hide in a
loose precision tolerance.

precision: the kernel in its own dtypes against the reference, within the spec's
rtol/atol when it gives them; otherwise within the output dtype's default AND no worse
than twice the baseline kernel's error on the same input (above a floor of a few units
in the last place), so accuracy is never traded away silently.

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
FLOOR_ULPS = 4


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


def semantic_error(got: np.ndarray, ref: np.ndarray) -> tuple[float, Mismatch | None]:
    """Largest |exact - reference| over the output's scale, in units of SEMANTIC_TOL."""
    bad = nonfinite_mismatch(got, ref)
    if bad is not None:
        return float("inf"), Mismatch("semantics", bad.index, bad.expected, bad.got,
                                      float("inf"), bad.detail)
    g, r = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    finite = np.isfinite(r)
    err = np.where(finite, np.abs(g - r), 0.0) / (SEMANTIC_TOL * output_scale(r))
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
    diff = np.where(finite, np.abs(g - r), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(diff == 0, 0.0, diff / np.where(tol > 0, tol, 0.0))
    return np.nan_to_num(ratio, nan=np.inf, posinf=np.inf)


def floor_ratio(ref: np.ndarray, dtype: str, tol: np.ndarray) -> np.ndarray:
    """A few units in the last place per element, as a fraction of its tolerance: no
    kernel need be more accurate than this, whatever the baseline achieved."""
    r = np.abs(np.asarray(ref, np.float64))
    ulps = FLOOR_ULPS * ULP[dtype] * np.maximum(r, output_scale(ref) * ULP[dtype])
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(tol > 0, ulps / np.where(tol > 0, tol, 1.0), np.inf)


def precision_check(got: np.ndarray, ref: np.ndarray, dtype: str, rtol: float | None,
                    atol: float | None, baseline: np.ndarray | None
                    ) -> tuple[float, Mismatch | None]:
    """Largest error as a fraction of what is allowed (> 1 fails), and the worst element
    when the check fails."""
    bad = nonfinite_mismatch(got, ref)
    if bad is not None:
        return float("inf"), bad
    tol = tolerance(ref, dtype, rtol, atol)
    ratio = precision_ratio(got, ref, tol)
    allowed = np.ones_like(ratio)
    why = "the tolerance"
    if rtol is None and atol is None and baseline is not None:
        base_ratio = precision_ratio(baseline, ref, tol)
        base_worst = float(base_ratio.max()) if base_ratio.size else 0.0
        allowed = np.minimum(1.0, np.maximum(2.0 * base_worst, floor_ratio(ref, dtype, tol)))
        why = (f"the tolerance or twice the baseline's error "
               f"({base_worst:.3g} of tolerance), whichever is smaller")
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
