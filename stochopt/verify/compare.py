"""The two checks of equivalence, as plain functions on arrays (docs/verification.md).

semantics: the kernel in exact mode (float64, no rounding) against the float64
reference, within SEMANTIC_TOL of the output's scale (never less than its scale on a
plain uniform input): wrong math cannot hide in a loose precision tolerance.

precision: the kernel in its own dtypes against the reference, within the spec's
rtol/atol when it gives them; otherwise no worse than twice the baseline kernel's error
in the same row on the same input, above a floor of a few units in the last place of
the local scale (the floor capped at the output dtype's default tolerance), so accuracy
is never traded away silently. Where the baseline uses more than half the default
tolerance on an input (a poorly conditioned input), twice its error passes the
tolerance.

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
# the spacing of the dtype's grid below its smallest normal number (its smallest
# subnormal): no result can be nearer than half of it, so no tolerance is finer than
# GRID_SPACINGS of it, and the rounding floor is at least FLOOR_ULPS of it
SPACING = {"f32": 2.0**-149, "bf16": 2.0**-133, "i32": 0.0, "bool": 0.0}
GRID_SPACINGS = 2
# rounding noise: exp(x - c) with |x - c| up to 16 loses 4-6 ulps to the rounding of
# its argument alone, so a floor of "a few" ulps would refuse such rewrites of softmax;
# 32, not 16, since the baseline rule is judged per row, where luck weighs more
FLOOR_ULPS = 32
# the semantic limit never falls below this fraction of the typical scale
SEMANTIC_FLOOR = 1e-3
# the same n additions in another order: each rounding an error uniform within half a
# unit (variance 1/12 of a unit squared), so two orders differ by sqrt(n / 6) units in the
# last place of the terms' size, as a standard deviation; this many of them is rounding
# noise no kernel need beat, however lucky the baseline's order was on an input (a
# flash-decoding split of attention_decode's 2,048 positions rounds 33-96 units off
# where the baseline rounds 11; magnitude.reduction_terms counts n)
REORDER_SIGMAS = 4.0


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
    if np.isfinite(g).all() and np.isfinite(r).all():  # the common case, decided at once
        return None
    bad = (np.isnan(g) != np.isnan(r)) | (np.isinf(g) != np.isinf(r)) | (
        np.isinf(r) & (np.sign(g) != np.sign(r)))
    if not bad.any():
        return None
    idx = np.unravel_index(int(np.argmax(bad)), bad.shape)
    return Mismatch("non-finite", tuple(int(i) for i in idx), float(r[idx]), float(g[idx]),
                    float("inf"), f"{int(bad.sum())} elements differ in nan/inf")


def semantic_limit(ref: np.ndarray, typical_scale: float = 0.0,
                   magnitude: np.ndarray | None = None):
    """The largest |exact - reference| the semantic check lets through: per element
    SEMANTIC_TOL of its magnitude (magnitude.py), never below SEMANTIC_FLOOR of the
    typical scale; without magnitudes, of the output's scale (its largest element)."""
    if magnitude is None:
        return SEMANTIC_TOL * max(output_scale(np.asarray(ref, np.float64)), typical_scale)
    return SEMANTIC_TOL * np.maximum(magnitude, SEMANTIC_FLOOR * typical_scale)


def semantic_error(got: np.ndarray, ref: np.ndarray, typical_scale: float = 0.0,
                   magnitude: np.ndarray | None = None) -> tuple[float, Mismatch | None]:
    """Largest |exact - reference| over its limit (semantic_limit), in units of
    SEMANTIC_TOL: above 1 fails. The floor matters where an input makes the output tiny
    by cancellation (gelu's 1 + tanh(z) far in the tail): the float64 reference has
    rounding of its own there, far more than 1e-9 of the tiny output."""
    bad = nonfinite_mismatch(got, ref)
    if bad is not None:
        return float("inf"), Mismatch("semantics", bad.index, bad.expected, bad.got,
                                      float("inf"), bad.detail)
    g, r = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    finite = np.isfinite(r)
    limit = semantic_limit(r, typical_scale, magnitude)
    with np.errstate(invalid="ignore", divide="ignore"):  # inf - inf where both are inf
        diff = np.where(finite, np.abs(g - r), 0.0)
        err = np.where(diff == 0, 0.0, diff / limit)
    err = np.nan_to_num(err, nan=np.inf, posinf=np.inf)
    worst = float(err.max()) if err.size else 0.0
    if worst <= 1.0:
        return worst, None
    idx = np.unravel_index(int(np.argmax(err)), err.shape)
    what = "of scale" if magnitude is None else "of the element's magnitude"
    return worst, Mismatch("semantics", tuple(int(i) for i in idx), float(r[idx]),
                           float(g[idx]), worst,
                           f"{worst:.3g}x the semantic tolerance of {SEMANTIC_TOL:g} {what}")


def tolerance(ref: np.ndarray, dtype: str, rtol: float | None, atol: float | None,
              magnitude: np.ndarray | None = None):
    """Per-element allowed error: the spec's rtol/atol, or the dtype's default with its
    atol a fraction of the element's local scale (of the output's scale without
    magnitudes)."""
    r = np.abs(np.asarray(ref, np.float64))
    grid = GRID_SPACINGS * SPACING[dtype]
    if rtol is not None or atol is not None:
        return np.maximum((atol or 0.0) + (rtol or 0.0) * r, grid)
    d_rtol, d_atol = DEFAULT_TOL[dtype]
    return np.maximum(d_atol * _scale(ref, magnitude) + d_rtol * r, grid)


def _scale(ref: np.ndarray, magnitude: np.ndarray | None):
    return output_scale(ref) if magnitude is None else local_scale(ref, magnitude)


def precision_ratio(got: np.ndarray, ref: np.ndarray, tol: np.ndarray) -> np.ndarray:
    """Per-element error over tolerance (0 where the reference is not finite)."""
    g, r = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    finite = np.isfinite(r)
    with np.errstate(invalid="ignore"):  # inf - inf where both are inf: masked out
        diff = np.where(finite, np.abs(g - r), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(diff == 0, 0.0, diff / np.where(tol > 0, tol, 0.0))
    return np.nan_to_num(ratio, nan=np.inf, posinf=np.inf)


def row_worst(ratio: np.ndarray) -> np.ndarray:
    """The largest ratio of each row (the last axis), kept as an axis of size 1."""
    ratio = np.asarray(ratio, np.float64)
    if ratio.ndim == 0:
        return ratio
    if ratio.size == 0:
        return np.zeros(ratio.shape[:-1] + (1,))
    return ratio.max(axis=-1, keepdims=True)


def floor_ratio(ref: np.ndarray, dtype: str, tol: np.ndarray,
                magnitude: np.ndarray | None = None, scale=None,
                terms: int = 0) -> np.ndarray:
    """Rounding noise that no kernel need beat, whatever the baseline achieved, as a
    fraction of each element's tolerance: FLOOR_ULPS units in the last place of the
    element's local scale (local_scale; the output's scale without magnitudes; or
    `scale`), where a unit is never less than the grid's spacing (subnormal results);
    or, where more, REORDER_SIGMAS deviations of the f32 sums of ``terms`` terms in
    another order."""
    if scale is None:
        scale = _scale(ref, magnitude)
    ulps = FLOOR_ULPS * np.maximum(ULP[dtype] * scale, SPACING[dtype])
    if terms and dtype in ("f32", "bf16"):
        ulps = np.maximum(ulps, REORDER_SIGMAS * np.sqrt(terms / 6) * ULP["f32"] * scale)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(tol > 0, ulps / np.where(tol > 0, tol, 1.0), np.inf)


def local_scale(ref: np.ndarray, magnitude: np.ndarray) -> np.ndarray:
    """The scale an element's precision is judged at: the largest finite |reference| in
    its row (the last axis), since a sum or a dot product rounds at the size of its
    terms and not of its possibly cancelled result -- but no more than the element's
    magnitude (magnitude.py), so a sentinel elsewhere in the row that is not among the
    element's terms opens nothing; and never less than |reference| itself. Not the
    magnitude alone: it also counts cancellation that a division amplifies (layernorm's
    x - mean over sqrt(eps) on a constant row), which the baseline rounds far better.
    Where the whole row is 0, the magnitude stands in."""
    r = np.abs(np.asarray(ref, np.float64))
    row = row_worst(np.where(np.isfinite(r), r, 0.0))
    row = np.where(row > 0, row, magnitude)  # a row of zeros: its terms are all we know
    return np.maximum(np.where(np.isfinite(r), r, 0.0), np.minimum(row, magnitude))


def precision_allowance(ref: np.ndarray, dtype: str, rtol: float | None, atol: float | None,
                        baseline: np.ndarray | None, baseline_error=0.0,
                        magnitude: np.ndarray | None = None,
                        resolution: np.ndarray | None = None, terms: int = 0):
    """(tolerance, allowed fraction of it, the baseline's worst error per row) per
    element: what precision_check lets through on this input. It depends only on the
    input, so screening computes it once. baseline_error: the baseline's worst error on
    nearby inputs, a number or one per row. resolution: an error per element that no
    kernel need beat because the inputs themselves hold no finer value (tiny.py).
    terms: the baseline's sums' terms (magnitude.reduction_terms), for the floor."""
    tol = tolerance(ref, dtype, rtol, atol, magnitude)
    allowed = np.ones_like(tol)
    base_worst = None
    if rtol is None and atol is None and baseline is not None:
        # twice the baseline's error in the same row (the last axis), never below the
        # rounding floor, the floor capped at the tolerance unless the baseline misses
        # the tolerance in that row on this input. Twice the baseline may pass
        # the tolerance: where the baseline uses more than half of it on this input (a
        # poorly conditioned input, such as gelu's 1 + tanh(z) near -1 or layernorm's
        # x - mean on a constant row), a kernel as accurate as the baseline on average
        # misses the tolerance as often as the baseline does, by luck of rounding; a
        # cap there refused gelu's factored polynomial, whose errors over every f32 in
        # [-6, 6] are the baseline's (docs/verification.md). A baseline that is not
        # finite where the reference is sets no limit: the tolerance does. Per row, so
        # a row where the baseline is poor opens no other row's limit.
        base_worst = np.maximum(row_worst(precision_ratio(baseline, ref, tol)),
                                baseline_error)
        twice = np.where(base_worst < np.inf, 2.0 * base_worst, 1.0)
        floor = floor_ratio(ref, dtype, tol, magnitude, terms=terms)
        ill = (1.0 < base_worst) & (base_worst < np.inf)  # the baseline misses it here
        # inside the tolerance, the floor is at the scale of the element's terms (its
        # magnitude), not of their possibly cancelled result: a dot product that cancels
        # to 1/100 of its terms rounds at the terms' size in any order of its additions,
        # and which order rounds luckier on one input is not a property of the kernel
        at_terms = floor if magnitude is None else floor_ratio(
            ref, dtype, tol, scale=np.maximum(_scale(ref, magnitude), magnitude), terms=terms)
        allowed = np.where(ill, np.maximum(twice, floor),
                           np.maximum(twice, np.minimum(1.0, at_terms)))
    if resolution is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            allowed = np.maximum(allowed, np.nan_to_num(resolution / tol))
    return tol, allowed, base_worst


def _why(base_worst, idx: tuple) -> str:
    if base_worst is None:
        return "the tolerance"
    rows = np.asarray(base_worst, np.float64)
    row = float(rows[idx[:-1] + (0,)]) if rows.ndim else float(rows)
    if 0.5 < row < np.inf:
        return (f"twice the baseline's error in this row ({row:.3g} of tolerance), which "
                "is past half the tolerance on this input")
    return (f"the tolerance or twice the baseline's error in this row ({row:.3g} of "
            "tolerance), whichever is smaller")


def precision_check(got: np.ndarray, ref: np.ndarray, dtype: str, rtol: float | None,
                    atol: float | None, baseline: np.ndarray | None,
                    baseline_error=0.0, magnitude: np.ndarray | None = None,
                    resolution: np.ndarray | None = None,
                    allowance: tuple | None = None,
                    terms: int = 0) -> tuple[float, Mismatch | None]:
    """Largest error as a fraction of what is allowed (> 1 fails), and the worst element
    when the check fails. baseline_error: the baseline's worst error (as a fraction of
    the tolerance) on inputs near this one, per row or in all, taken when larger than
    its error here. ``allowance``: the precision_allowance of these arguments, where the
    caller keeps it (it depends on the input alone)."""
    if allowance is None:
        allowance = precision_allowance(ref, dtype, rtol, atol, baseline, baseline_error,
                                        magnitude, resolution, terms)
    over = precision_excess(got, ref, dtype, rtol, atol, baseline, baseline_error, magnitude,
                            resolution, allowance, terms)
    if isinstance(over, Mismatch):
        return float("inf"), over
    worst = float(over.max()) if over.size else 0.0
    if worst <= 1.0:
        return worst, None
    idx = np.unravel_index(int(np.argmax(over)), over.shape)
    tol, _, base_worst = allowance
    ratio = precision_ratio(got, ref, tol)
    g, r = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    return worst, Mismatch("precision", tuple(int(i) for i in idx), float(r[idx]),
                           float(g[idx]), worst,
                           f"error is {float(ratio[idx]):.3g} of the tolerance, more than "
                           f"{_why(base_worst, idx)}")


def precision_excess(got: np.ndarray, ref: np.ndarray, dtype: str, rtol: float | None,
                     atol: float | None, baseline: np.ndarray | None, baseline_error=0.0,
                     magnitude: np.ndarray | None = None,
                     resolution: np.ndarray | None = None,
                     allowance: tuple | None = None, terms: int = 0) -> np.ndarray | Mismatch:
    """Per element, the error as a fraction of what is allowed (> 1 fails), or the
    non-finite mismatch. The local search over inputs climbs on this."""
    bad = nonfinite_mismatch(got, ref)
    if bad is not None:
        return bad
    tol, allowed, _ = allowance or precision_allowance(ref, dtype, rtol, atol, baseline,
                                                       baseline_error, magnitude, resolution,
                                                       terms)
    ratio = precision_ratio(got, ref, tol)
    with np.errstate(divide="ignore", invalid="ignore"):
        over = np.where(ratio == 0, 0.0, ratio / allowed)
    return np.nan_to_num(over, nan=np.inf)  # off where nothing is allowed: inf / inf
