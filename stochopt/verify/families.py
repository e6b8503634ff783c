"""The input space in full: families of inputs that fixed patterns and uniform draws miss.

A kernel with a fast path or a special case is wrong only where its condition holds,
and conditions live where uniform draws never go. Each family below is a tensor pattern
with one parameter (Recipe.fraction), swept log-spaced, or a link that makes one input
from another; every family is drawn for every input and every pair of inputs that it
fits, always inside the spec's declared ranges:

    scaled          values at scale s around the range's point nearest 0, s log-spaced
                    from 0.1 down to a few units of the dtype's smallest subnormal
    mixed_scales    every element at its own log-uniform scale over the whole range,
                    down to the smallest subnormal, with exact zeros and -0.0
    signed_zeros    0.0 and -0.0, with a few of the smallest subnormals
    spread          rows with a spread s (log-spaced) around a centre: nearly constant
    integers        whole numbers over the whole range (integer-valued floats)
    equal_rows      every row the same
    shifted_rows    every row the first row plus its own offset
    rolled_rows     every row the first row rolled by its index
    row_ties        each row's max repeated k times (up to the whole row), its min
                    k times in the places left
    kept_per_row    bool: exactly k true per row, k log-spaced from 1 to all
    kept_per_column bool: exactly k true per column
    dropped_per_row bool: all but k true per row
    prefix_per_row  bool: each row true on a prefix of its own length (a padding or
                    causal mask), or on a suffix

    mask_top_k / mask_bottom_k         a mask keeping the k largest / smallest values of
                                       a float input of its shape, per row
    query_equal / query_opposite /     rows of q equal, opposite or orthogonal to rows of
    query_orthogonal                   k (same leading and last axes), scaled into range
    opposite                           one input the negation of another
    rotation                           two inputs of one shape (ranges holding [-1, 1])
                                       a rotary table: cos and sin of position x
                                       frequency, so cos^2 + sin^2 = 1 everywhere

A link's pair is one of the pairs that fit, chosen by the recipe's seed, or the one
named after a colon (`opposite:1`, the second pair).

    all scaled      every float input scaled at once: first where their products are
                    16 spacings of f32's subnormal grid (product_scale), then at one of
                    the deepest scales, which the seed picks
    corners         every row one sign pattern at the range's ends (lo or hi per
                    column): drawn only for every float input at once, plain and under
                    each link, so extremes meet (a query opposite every key reaches the
                    least score the ranges allow)
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from stochopt.spec import Spec, TensorSpec

# k for the counting families: 1, 2, 3 ... log-spaced up to the whole row
KEPT = (1, 2, 3, 4, 5, 8, 12, 16, 32, 64, 128, 255, 256, 257, 512, 1024, 2048, 4096)
SPREADS = (1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-9)
SCALE_STEPS = 12
SMALLEST = {"f32": float(np.finfo(np.float32).smallest_subnormal),
            "bf16": float(ml_dtypes.finfo(ml_dtypes.bfloat16).smallest_subnormal),
            "i32": 1.0}

FLOAT_FAMILIES = ("scaled", "mixed_scales", "signed_zeros", "spread", "integers",
                  "equal_rows", "shifted_rows", "rolled_rows", "row_ties")
BOOL_FAMILIES = ("kept_per_row", "kept_per_column", "dropped_per_row", "prefix_per_row")
FAMILY_LINKS = ("mask_top_k", "mask_bottom_k", "query_equal", "query_opposite",
                "query_orthogonal", "opposite", "rotation")
# the rotary table's base: frequencies base^(-j/n) along a row, positions down the rows
ROTARY_BASE = 10000.0
# families built only for every float input at once (strategies.family_recipes)
JOINT_FAMILIES = ("corners",)


def centre_and_reach(t: TensorSpec) -> tuple[float, float]:
    """The range's point nearest 0, which "scaled" values shrink towards, and the
    farthest any value of the range lies from it."""
    lo, hi = t.bounds
    centre = min(max(0.0, lo), hi)
    return centre, max(hi - centre, centre - lo)


def scales(t: TensorSpec) -> tuple[float, ...]:
    """Log-spaced scales from 0.1 down to where values are a few of the dtype's
    smallest subnormals."""
    reach = max(centre_and_reach(t)[1], 1e-300)
    low = np.log10(max(4 * SMALLEST[t.dtype] / reach, 1e-300))
    return tuple(float(s) for s in np.logspace(-1, low, SCALE_STEPS))


# where the product of two tiny inputs lands: 16 spacings of f32's subnormal grid, so a
# product rounds there at a few bits (2^-145; the grid's spacing is 2^-149)
TINY_PRODUCT = 2.0**-145


def product_scale(tensors: list[TensorSpec]) -> float:
    """The "scaled" parameter at which every float input's values, multiplied by one
    another's, land on the subnormal grid at TINY_PRODUCT: products there round at
    a few bits, so a kernel that moves a scale before a product (or after it) rounds
    differently from the baseline however exact the scale is."""
    reaches = [max(centre_and_reach(t)[1], 1e-300) for t in tensors]
    mean_reach = float(np.exp(np.mean(np.log(reaches))))
    return float(np.sqrt(TINY_PRODUCT)) / mean_reach


def parameters(pattern: str, t: TensorSpec) -> tuple[float, ...]:
    """The values a family's parameter takes for this tensor (empty: none)."""
    n = t.shape[-1]
    if pattern == "scaled":
        return scales(t)
    if pattern == "spread":
        return SPREADS
    if pattern == "prefix_per_row":
        return (0.0, 1.0)  # a prefix or a suffix
    if pattern in ("kept_per_row", "dropped_per_row", "row_ties"):
        return tuple(float(k) for k in KEPT if k < n) + (float(n),)
    if pattern == "kept_per_column":
        m = t.shape[-2] if len(t.shape) > 1 else n
        return tuple(float(k) for k in KEPT if k < m) + (float(m),)
    return (0.5,)


def family_tensor(t: TensorSpec, pattern: str, parameter: float,
                  rng: np.random.Generator) -> np.ndarray:
    """One tensor of a family, float64 for floats (to be rounded by the caller)."""
    shape = t.shape
    n = shape[-1]
    rows = int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1
    if t.dtype == "bool":
        return _mask(pattern, parameter, rng, shape)
    lo, hi = t.bounds
    centre, reach = centre_and_reach(t)
    u = _uniform_rows(rng, lo, hi, rows, n, USE_OF_UNIFORM.get(pattern, rows))
    if pattern == "scaled":
        x = centre + (u - centre) * parameter
    elif pattern == "mixed_scales":
        low = np.log10(max(SMALLEST[t.dtype], 1e-300) / max(reach, 1e-300))
        size = reach * 10.0 ** rng.uniform(low, 0.0, (rows, n))
        up = rng.random((rows, n)) < (hi - centre) / max(hi - lo, 1e-300)
        x = np.where(up, centre + size, centre - size)
        x = np.where(rng.random((rows, n)) < 0.05, centre, x)
        if lo <= 0.0 <= hi:
            x = np.where(rng.random((rows, n)) < 0.05, -0.0, x)
    elif pattern == "signed_zeros":
        x = _signed_zeros(t, rng, (rows, n), lo, hi, u)
    elif pattern == "spread":
        middle = rng.uniform(lo, hi, (rows, 1))
        x = middle + (u - (lo + hi) / 2) * parameter
    elif pattern == "integers":
        x = np.floor(rng.uniform(np.ceil(lo), np.floor(hi) + 1, (rows, n)))
    elif pattern == "equal_rows":
        x = np.repeat(u[:1], rows, axis=0)
    elif pattern == "shifted_rows":
        half = (hi - lo) / 2
        x = rng.uniform(lo, lo + half, (1, n)) + rng.uniform(0, half, (rows, 1))
    elif pattern == "rolled_rows":
        x = u[0][(np.arange(n)[None, :] - np.arange(rows)[:, None]) % n]
    elif pattern == "row_ties":
        x = _ties(u, int(parameter), rng)
    elif pattern == "corners":
        x = np.repeat(np.where(rng.random((1, n)) < 0.5, lo, hi), rows, axis=0)
    else:
        raise ValueError(f"unknown family {pattern!r}")
    return np.clip(x, lo, hi).reshape(shape)


# how many rows of the uniform tensor drawn first a family reads (the rest of its draws
# are skipped, not made: the values after them stay the same); absent: every row
USE_OF_UNIFORM = {"mixed_scales": 0, "integers": 0, "shifted_rows": 0, "corners": 0,
                  "equal_rows": 1, "rolled_rows": 1}


def _uniform_rows(rng, lo: float, hi: float, rows: int, n: int, used: int) -> np.ndarray:
    """The first ``used`` rows of ``rng.uniform(lo, hi, (rows, n))``, leaving the
    generator where drawing all of them would have left it."""
    u = rng.uniform(lo, hi, (used, n))
    rng.bit_generator.advance((rows - used) * n)
    return u


def _signed_zeros(t: TensorSpec, rng, shape, lo: float, hi: float, u) -> np.ndarray:
    if not lo <= 0.0 <= hi:
        return np.full(shape, min(max(0.0, lo), hi))  # the point nearest 0, everywhere
    x = np.where(rng.random(shape) < 0.5, 0.0, -0.0)
    tiny = SMALLEST[t.dtype] * rng.integers(1, 4, shape)
    x = np.where(rng.random(shape) < 0.05, np.clip(tiny * np.sign(u), lo, hi), x)
    return np.where(rng.random(shape) < 0.05, u, x)


def _ties(u: np.ndarray, k: int, rng) -> np.ndarray:
    """Each row's max copied to k places of the row (k >= 1, up to all of it), and its
    min to k of the others, as many as there are: a count of ties at the max takes
    every value from 1 to the whole row (past 256, where bf16 stops counting)."""
    rows, n = u.shape
    x = u.copy()
    order = np.argsort(rng.random((rows, n)), axis=1)
    top, bottom = u.max(axis=1, keepdims=True), u.min(axis=1, keepdims=True)
    take = min(k, n)
    np.put_along_axis(x, order[:, :take], top, axis=1)
    np.put_along_axis(x, order[:, take:take + min(k, n - take)], bottom, axis=1)
    return x


def prefix_rows(rng, rows: int, n: int, suffix: bool) -> np.ndarray:
    """rows x n booleans, each row true on a prefix of its own length, 1 to n (a padding
    or causal mask), or on a suffix."""
    keep = np.arange(n)[None, :] < rng.integers(1, n + 1, size=(rows, 1))
    return keep[:, ::-1] if suffix else keep


def _mask(pattern: str, parameter: float, rng, shape) -> np.ndarray:
    """Exactly k true per row (per column, or all but k per row)."""
    k = int(parameter)
    if pattern == "kept_per_column" and len(shape) > 1:
        return np.swapaxes(_mask("kept_per_row", parameter, rng,
                                 shape[:-2] + (shape[-1], shape[-2])), -1, -2)
    n = shape[-1]
    if pattern == "prefix_per_row":
        rows = int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1
        return prefix_rows(rng, rows, n, bool(parameter)).reshape(shape)
    rank = np.argsort(np.argsort(rng.random(shape), axis=-1), axis=-1)
    keep = rank < min(k, n)
    return ~keep if pattern == "dropped_per_row" else keep


# ---------------------------------------------------------------------------------
# links: one input made from another
# ---------------------------------------------------------------------------------

def link_pairs(spec: Spec, link: str) -> list[tuple[str, str]]:
    """The (source, made) pairs of inputs a link fits, in a fixed order."""
    floats = [n for n, t in spec.inputs.items() if t.dtype in ("f32", "bf16")]
    masks = [n for n, t in spec.inputs.items() if t.dtype == "bool"]
    shape = {n: t.shape for n, t in spec.inputs.items()}
    if link in ("mask_top_k", "mask_bottom_k"):
        return [(f, m) for m in masks for f in floats if shape[f] == shape[m]]
    if link == "opposite":
        return [(a, b) for a in floats for b in floats if a != b and shape[a] == shape[b]]
    if link == "rotation":
        unit = [n for n in floats if spec.inputs[n].bounds[0] <= -1.0
                and spec.inputs[n].bounds[1] >= 1.0]
        return [(a, b) for a in unit for b in unit if a != b and shape[a] == shape[b]]
    if link.startswith("query_"):
        return [(k, q) for q in floats for k in floats if q != k and _alignable(shape[q],
                                                                                shape[k])]
    return []


def _alignable(sq: tuple[int, ...], sk: tuple[int, ...]) -> bool:
    return len(sq) >= 2 and len(sk) == len(sq) and sq[:-2] == sk[:-2] and sq[-1] == sk[-1]


def apply_link(spec: Spec, arrays: dict[str, np.ndarray], link: str,
               rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The inputs with one made from another by a FAMILY_LINKS link (float64 for the
    floats made, to be rounded by the caller); unchanged where the link fits no pair."""
    name, _, index = link.partition(":")
    pairs = link_pairs(spec, name)
    if not pairs:
        return arrays
    source, made = pairs[int(index) % len(pairs) if index else rng.integers(len(pairs))]
    out = dict(arrays)
    x = np.asarray(arrays[source], np.float64)
    lo, hi = spec.inputs[made].bounds
    if name in ("mask_top_k", "mask_bottom_k"):
        k = min(KEPT[rng.integers(len(KEPT))], x.shape[-1])
        order = np.argsort(np.argsort(x if name == "mask_bottom_k" else -x, axis=-1,
                                      kind="stable"), axis=-1)
        out[made] = order < k
    elif name == "opposite":
        out[made] = np.clip(-x, lo, hi)
    elif name == "rotation":
        out[source], out[made] = rotary_table(x.shape)
    else:
        out[made] = _query(x, spec.inputs[made].shape, name, lo, hi, rng)
    return out


def rotary_table(shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of position x frequency: row r of the last two axes is position r,
    column j frequency ROTARY_BASE^(-j/n)."""
    n = shape[-1]
    rows = shape[-2] if len(shape) > 1 else 1
    angle = np.arange(rows)[:, None] * ROTARY_BASE ** (-np.arange(n)[None, :] / n)
    angle = np.broadcast_to(angle.reshape((rows, n) if len(shape) > 1 else (n,)), shape)
    return np.cos(angle), np.sin(angle)


def _query(k: np.ndarray, shape: tuple[int, ...], link: str, lo: float, hi: float,
           rng) -> np.ndarray:
    """Rows of q (of this shape) equal, opposite or orthogonal to randomly picked rows
    of k, scaled so that every element lies in [lo, hi]."""
    pick = rng.integers(k.shape[-2], size=shape[:-1])
    rows = np.take_along_axis(k, pick[..., None], axis=-2)
    if link == "query_opposite":
        rows = -rows
    elif link == "query_orthogonal":
        other = rng.standard_normal(rows.shape)
        norm = np.maximum((rows * rows).sum(-1, keepdims=True), 1e-300)
        rows = other - rows * (other * rows).sum(-1, keepdims=True) / norm
    size = np.maximum(np.abs(rows).max(axis=-1, keepdims=True), 1e-300)
    room = max(min(abs(lo), abs(hi)), 0.0) if lo < 0 < hi else max(abs(lo), abs(hi))
    return np.clip(rows * np.minimum(1.0, room / size), lo, hi)
