"""Native sums in the machine's order: fixed by the layout, never by numpy's memory order.

A float sum rounds after every addition, so its value depends on the order of the
additions. numpy picks that order from the array's strides (pairwise over a contiguous
axis, row by row over a strided one), so the same kernel written with a transposed
operand could round differently. Here the order is the machine's (docs/leir.md, section 7):

- reduce_sum: each PE adds its own elements of the axis one after the other in local
  order (float32 accumulator), then the tree adds the PEs' partials level by level, PE
  level first, units in order. bf16 partials are rounded to bf16 when they leave a PE and
  after every tree level.
- matmul: each MAU streams its share of K in order (the K elements local to its PEs),
  adding each product, rounded to float32, to a float32 accumulator; partials of a K spread
  over MABs, L1Bs or L2Bs are then added level by level as for reduce_sum.

Each sum is a loop of vectorised adds over the summed elements in order, rounded to
float32 at every step.
"""

from __future__ import annotations

from math import prod

import ml_dtypes
import numpy as np

from stochopt.leir.layout import Factor, Layout

BF16 = np.dtype(ml_dtypes.bfloat16)
TREE_ORDER = ("PE", "MAB", "L1B", "L2B")  # partials meet innermost level first


def _sequential(x: np.ndarray) -> np.ndarray:
    """Sum over axis 0 in order, in float32: ((x0 + x1) + x2) + ... Long sums of few
    values each run as running sums along a contiguous last axis (np.add.accumulate is
    sequential by definition, and fast there); short ones as a loop of vectorised adds."""
    if x.shape[0] > x[0].size:
        rows = np.ascontiguousarray(np.moveaxis(x, 0, -1), dtype=np.float32)
        return np.add.accumulate(rows, axis=-1, dtype=np.float32)[..., -1]
    acc = np.array(x[0], dtype=np.float32)
    for i in range(1, x.shape[0]):
        np.add(acc, x[i], out=acc, dtype=np.float32)
    return acc


def _sum_digit_groups(x: np.ndarray, ndigits: int, groups: list[list[int]],
                      round_each: bool) -> np.ndarray:
    """``x``'s first ndigits axes are digits of one summed axis (major first); sum the
    digit groups in turn, each sequentially over its digits' combined index."""
    alive = list(range(ndigits))  # digit -> its axis in x, while not yet summed
    for group in groups:
        axes = [alive.index(d) for d in group]
        rest = [a for a in range(x.ndim) if a not in axes]
        x = np.transpose(x, axes + rest)
        x = x.reshape((prod(x.shape[:len(axes)]),) + x.shape[len(axes):])
        x = _sequential(x)
        if round_each:
            x = x.astype(BF16).astype(np.float32)
        alive = [d for d in alive if d not in group]
    return x


def _groups(factors: tuple[Factor, ...], stream: tuple[str | None, ...]) -> list[list[int]]:
    """Digit groups in summing order: the digits of levels in ``stream`` (None: local)
    first, then each tree level, innermost first."""
    first = [i for i, f in enumerate(factors) if f.level in stream]
    out = [first] if first else []
    for level in TREE_ORDER:
        digits = [i for i, f in enumerate(factors) if f.level == level and level not in stream]
        if digits:
            out.append(digits)
    return out


def ordered_sum(x: np.ndarray, axis: int, keepdims: bool, layout: Layout) -> np.ndarray:
    """reduce_sum of a float32 or bf16 array in the machine's order, in x's dtype."""
    axis %= x.ndim
    factors = layout.axes[axis]
    sizes = tuple(f.size for f in factors)
    y = np.moveaxis(x.astype(np.float32), axis, 0)
    y = y.reshape(sizes + y.shape[1:])
    out = _sum_digit_groups(y, len(sizes), _groups(factors, (None,)), x.dtype == BF16)
    if keepdims:
        out = np.expand_dims(out, axis)
    return out.astype(x.dtype)


def ordered_matmul(a: np.ndarray, b: np.ndarray, a_layout: Layout) -> np.ndarray:
    """matmul with float32 accumulation over K in the machine's order (float32 result)."""
    a = a.astype(np.float32)
    b = b.astype(np.float32)
    factors = a_layout.axes[-1]
    sizes = tuple(f.size for f in factors)
    groups = _groups(factors, (None, "PE"))
    stream = groups[0] if groups and factors[groups[0][0]].level in (None, "PE") else []
    tree = [d for g in groups for d in g if d not in stream]
    # K indices as (tree digits, stream digits): row t is what one MAU streams, in order
    k = np.arange(a.shape[-1]).reshape(sizes)
    k = np.transpose(k, tree + stream).reshape(prod(sizes[d] for d in tree), -1)
    units, steps = k.shape
    lead = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    m, n = a.shape[-2], b.shape[-1]
    # K first and contiguous, so each step reads two contiguous slices
    left_k = np.ascontiguousarray(np.moveaxis(a, -1, 0)[k.T])    # (steps, units, ..., m)
    right_k = np.ascontiguousarray(np.moveaxis(b, -2, 0)[k.T])   # (steps, units, ..., n)
    left_k = np.moveaxis(left_k, 1, -2)[..., :, :, None]         # (steps, ..., units, m, 1)
    right_k = np.moveaxis(right_k, 1, -2)[..., :, None, :]       # (steps, ..., units, 1, n)
    acc = np.zeros(lead + (units, m, n), np.float32)
    product = np.empty_like(acc)
    for step in range(steps):  # each product rounded to f32, then added
        np.multiply(left_k[step], right_k[step], out=product)
        np.add(acc, product, out=acc)
    if not tree:
        return acc[..., 0, :, :]
    # the MAUs' partials: (..., units, m, n) -> tree digits first, then added level by level
    acc = np.moveaxis(acc, -3, 0).reshape(tuple(sizes[d] for d in tree) + lead + (m, n))
    order = [[tree.index(d) for d in g] for g in groups if g != stream]
    return _sum_digit_groups(acc, len(tree), order, False)
