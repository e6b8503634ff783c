"""Inputs that hunt: rows built to break kernels, placed where the kernel cuts its data.

The plain patterns of strategies.py fill a whole tensor alike. A kernel that is wrong
only on one kind of row (a max taken over part of the row, a reduction that skips the
last column of a tile, a variance shifted by the first element) needs that row, at that
place. Here every row (a vector along the last axis) can take its own pattern:

    plain           uniform in [low, high]
    constant        one value
    two_clusters    one part near one end of the range, the rest near the other, split
                    at a random point or at one of the kernel's slice/concat boundaries
    edge_extreme    small values around the centre, low or high at a boundary position
                    (first or last index, either side of a kernel boundary)
    offset_outlier  a large common offset with a small spread, one element far away
    near_overflow   values where exp overflows or underflows in f32 (|x| near 88.7),
                    when the range reaches there; else two_clusters
    one_hot         the centre everywhere, high once

and a tensor pattern either gives all rows one of these or mixes them row by row
(`mixed_rows`). Correlations between inputs (`Recipe.link`) make one input from another:
two inputs equal, q aligned with rows of k so one score per row dominates, a mask that
keeps only the largest values of an input (or only the smallest).
"""

from __future__ import annotations

import numpy as np

from stochopt.leir.ir import Kernel
from stochopt.spec import Spec

ROW_PATTERNS = ("plain", "constant", "two_clusters", "edge_extreme", "offset_outlier",
                "near_overflow", "one_hot")
HUNT_PATTERNS = ("mixed_rows", "two_clusters", "edge_extreme", "offset_outlier",
                 "near_overflow")
LINKS = ("equal", "aligned", "mask_top", "mask_bottom")
EXP_EDGE = 88.72  # where exp overflows f32 (and exp(-x) nears its smallest normal)

Boundaries = dict[str, tuple[tuple[int, ...], ...]]  # input -> per axis, cut positions


def kernel_boundaries(kernel: Kernel | None, spec: Spec) -> Boundaries:
    """Per input and axis, the positions on both sides of every cut the kernel makes:
    its slices of the input (through loads, relayouts and casts), and its concats,
    which are applied to every input with the same size on that axis. The first and
    last index of every axis are always included."""
    cuts: dict[str, list[set[int]]] = {n: [{0, s - 1} for s in t.shape]
                                       for n, t in spec.inputs.items()}
    if kernel is None:
        return _frozen(cuts)
    from stochopt.verify.ranges import slice_views

    for name, bounds in slice_views(kernel):
        if name in cuts:
            for axis, (lo, hi) in enumerate(bounds):
                cuts[name][axis].update((lo - 1, lo, hi - 1, hi))
    for node in kernel.nodes:
        if node.op != "concat":
            continue
        axis = node.attr("axis")
        size, at = node.type.shape[axis], 0
        for a in node.inputs[:-1]:
            at += kernel.nodes[a].type.shape[axis]
            for name, t in spec.inputs.items():
                if len(t.shape) == len(node.type.shape) and t.shape[axis] == size:
                    cuts[name][axis].update((at - 1, at))
    for name, t in spec.inputs.items():
        for axis, n in enumerate(t.shape):
            cuts[name][axis] = {p for p in cuts[name][axis] if 0 <= p < n}
    return _frozen(cuts)


def _frozen(cuts: dict[str, list[set[int]]]) -> Boundaries:
    return {n: tuple(tuple(sorted(c)) for c in axes) for n, axes in cuts.items()}


def hunt_tensor(pattern: str, rng: np.random.Generator, shape: tuple[int, ...], lo: float,
                hi: float, cuts: tuple[tuple[int, ...], ...] | None) -> np.ndarray:
    """A float tensor in float64 for one of HUNT_PATTERNS (values inside [lo, hi]).
    Rows of one kind are drawn together: a tensor of 4,096 rows built row by row in
    Python was a third of a full check's time on mla_decode."""
    n = shape[-1]
    rows = int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1
    last_cuts = cuts[-1] if cuts else (0, n - 1)
    if pattern == "mixed_rows":
        kinds = rng.integers(len(ROW_PATTERNS), size=rows)
    else:
        kinds = np.full(rows, ROW_PATTERNS.index(pattern))
    out = np.empty((rows, n))
    for k, kind in enumerate(ROW_PATTERNS):
        which = np.flatnonzero(kinds == k)
        if which.size:
            out[which] = hunt_rows(kind, rng, which.size, n, lo, hi, last_cuts)
    if cuts and len(shape) > 1 and pattern == "edge_extreme":
        # the rows at the kernel's row cuts carry the extreme too, at a random place
        picks = [c for c in _flat_rows(shape, cuts)]
        for r in picks:
            out[r, rng.integers(n)] = hi if rng.random() < 0.5 else lo
    return out.reshape(shape)


def _flat_rows(shape: tuple[int, ...], cuts) -> list[int]:
    """Flat row numbers (over all axes but the last) that lie on a cut of the first
    axis, at index 0 of the others (rows are few enough to mark without more)."""
    if len(shape) < 2:
        return []
    inner = int(np.prod(shape[1:-1], dtype=np.int64))
    return [c * inner for c in cuts[0]]


def hunt_row(kind: str, rng: np.random.Generator, n: int, lo: float, hi: float,
             cuts: tuple[int, ...]) -> np.ndarray:
    """One row of n values in [lo, hi] of the given ROW_PATTERNS kind."""
    return hunt_rows(kind, rng, 1, n, lo, hi, cuts)[0]


def hunt_rows(kind: str, rng: np.random.Generator, m: int, n: int, lo: float, hi: float,
              cuts: tuple[int, ...]) -> np.ndarray:
    """m rows of n values in [lo, hi] of the given ROW_PATTERNS kind, each drawn on its
    own (its split, its extreme's place, its offset)."""
    width = hi - lo
    centre = min(max(0.0, lo), hi)
    every = np.arange(m)
    at_cut = np.asarray(cuts)
    if kind == "plain":
        return rng.uniform(lo, hi, (m, n))
    if kind == "constant":
        return np.repeat(rng.uniform(lo, hi, (m, 1)), n, axis=1)
    if kind == "one_hot":
        rows = np.full((m, n), centre)
        rows[every, rng.integers(n, size=m)] = hi
        return rows
    if kind == "edge_extreme":
        rows = np.clip(centre + 0.01 * width * rng.uniform(-0.5, 0.5, (m, n)), lo, hi)
        rows[every, at_cut[rng.integers(len(cuts), size=m)]] = np.where(
            rng.random(m) < 0.5, hi, lo)
        return rows
    if kind == "offset_outlier":
        top = rng.random(m) < 0.5
        offset = np.where(top, hi - 0.01 * width, lo + 0.01 * width)[:, None]
        rows = np.clip(offset + 1e-3 * width * rng.uniform(-0.5, 0.5, (m, n)), lo, hi)
        where = np.where(rng.random(m) < 0.5, at_cut[rng.integers(len(cuts), size=m)],
                         rng.integers(n, size=m))
        rows[every, where] = np.where(top, lo, hi)
        return rows
    if kind == "near_overflow":
        near = _near_overflow(rng, m, n, lo, hi)
        if near is not None:
            return near
    # two_clusters: split at a kernel cut half the time, else at a random point
    split = np.where(rng.random(m) < 0.5, at_cut[rng.integers(len(cuts), size=m)] + 1,
                     rng.integers(1, max(2, n), size=m))
    low_first = rng.random(m) < 0.5
    jitter = 0.01 * width * rng.random((m, n))
    low = (np.arange(n)[None, :] < split[:, None]) == low_first[:, None]
    return np.where(low, lo + jitter, hi - jitter)


def _near_overflow(rng, m: int, n: int, lo: float, hi: float) -> np.ndarray | None:
    """Values with |x| in [80, 88.72] where the range holds some, with the rest of the
    row at the far end of the range: exp of them nears f32's largest (or smallest
    normal) value, and a kernel that shifts by less than the row's max overflows."""
    for a, b in ((80.0, EXP_EDGE), (-EXP_EDGE, -80.0)):
        a, b = max(a, lo), min(b, hi)
        if a < b:
            return np.where(rng.random((m, n)) < 0.5, rng.uniform(a, b, (m, n)),
                            lo if b > 0 else hi)
    return None


# ---------------------------------------------------------------------------------
# correlated inputs
# ---------------------------------------------------------------------------------

def link_inputs(spec: Spec, arrays: dict[str, np.ndarray], link: str,
                rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Make inputs from one another (LINKS), where the spec has inputs that fit; the
    result is in float64 for float inputs, to be rounded by the caller."""
    floats = [n for n, t in spec.inputs.items() if t.dtype in ("f32", "bf16")]
    masks = [n for n, t in spec.inputs.items() if t.dtype == "bool"]
    out = dict(arrays)
    if link == "equal":
        for i, a in enumerate(floats):
            for b in floats[i + 1:]:
                if spec.inputs[a].shape == spec.inputs[b].shape:
                    lo, hi = spec.inputs[b].bounds
                    out[b] = np.clip(np.asarray(out[a], np.float64), lo, hi)
                    return out
    if link == "aligned":
        return _aligned(spec, out, floats, masks, rng)
    if link in ("mask_top", "mask_bottom"):
        for m in masks:
            for f in floats:
                if spec.inputs[f].shape == spec.inputs[m].shape:
                    x = np.asarray(out[f], np.float64)
                    q = np.quantile(x, 0.9 if link == "mask_top" else 0.1, axis=-1,
                                    keepdims=True)
                    out[m] = x >= q if link == "mask_top" else x <= q
                    return out
        return _aligned(spec, out, floats, masks, rng, top_only=link == "mask_top")
    return out


def _alignable(sa: tuple[int, ...], sb: tuple[int, ...]) -> bool:
    return len(sa) >= 2 and len(sb) == len(sa) and sa[:-2] == sb[:-2] and sa[-1] == sb[-1]


def link_applies(spec: Spec, link: str) -> bool:
    """Whether the spec has inputs that this link relates (so a linked case differs)."""
    floats = [t.shape for t in spec.inputs.values() if t.dtype in ("f32", "bf16")]
    masks = [t.shape for t in spec.inputs.values() if t.dtype == "bool"]
    pairs = [(a, b) for i, a in enumerate(floats) for j, b in enumerate(floats) if i != j]
    if link == "equal":
        return any(a == b for a, b in pairs)
    aligned = [(a, b) for a, b in pairs if _alignable(a, b)]
    if link == "aligned":
        return bool(aligned)
    return any(m in floats for m in masks) or any(
        m == a[:-1] + (b[-2],) for m in masks for a, b in aligned)


def _aligned(spec: Spec, out: dict, floats: list[str], masks: list[str], rng,
             top_only: bool | None = None) -> dict:
    """q[..., i, :] and k[..., j_i, :] (same leading axes and last axis) set to the
    corners of their ranges with equal signs, so score (i, j_i) dominates its row; a
    mask of shape (..., m, n) then keeps only that score (top_only True), every score
    but it (False), or is left alone."""
    for a in floats:
        for b in floats:
            sa, sb = spec.inputs[a].shape, spec.inputs[b].shape
            if not _alignable(sa, sb) or a == b:
                continue
            m, n = sa[-2], sb[-2]
            kb = np.asarray(out[b], np.float64).copy()
            pick = rng.integers(n, size=sa[:-2] + (m,))
            rows = np.take_along_axis(kb, pick[..., None], axis=-2)
            signs = np.where(rows < 0, -1.0, 1.0)
            # k's picked rows and q's rows at the corners of their ranges, signs alike:
            # their dot product is the largest any row of k can reach
            lo_b, hi_b = spec.inputs[b].bounds
            lo_a, hi_a = spec.inputs[a].bounds
            np.put_along_axis(kb, pick[..., None], np.where(signs > 0, hi_b, lo_b), axis=-2)
            out[b] = kb
            out[a] = np.where(signs > 0, hi_a, lo_a)
            for name in masks:
                if top_only is None or spec.inputs[name].shape != sa[:-1] + (n,):
                    continue
                hit = np.zeros(sa[:-1] + (n,), bool)
                np.put_along_axis(hit, pick[..., None], True, axis=-1)
                out[name] = hit if top_only else ~hit
            return out
    return out
