"""Moves over inputs for the directed search: named, parameterized changes of one input.

Each move takes the inputs (float64 copies for floats, bools for masks), the name of
the input to change, a parameter and a numpy generator, and returns the changed inputs;
`legal` then rounds every value to its dtype inside its declared range. A move with a
parameter is a *direction*: the directed search walks it (a line search over the
parameter); the AFL-style loop draws moves and parameters at random.

    fill        every element = v          fill_row    one row = v
    fill_some   a tenth of the elements = v
    scale       c + (x - c) * s            (c the range's point nearest 0)
    spread      each row's mean + (x - mean) * s
    shift       x + d
    extreme     one element per row at low or high (at a random column)
    grid        quantized values: x rounded to multiples of v (1: whole numbers, 1/2 ...
                1/16: fixed point), to bf16 (v = 0), or to levels {-1, 0, 1} (v = -1:
                ternary weights) or {0, 1} (v = -2: multi-hot features), per row
    copy_row    one row copied over another (equal rows, ties)
    ties        each row's max copied to k places (k from 1 to the whole row: a count
                of ties at the max past what bf16 counts)
    sort        about half the rows sorted, increasing (v > 0) or decreasing: runs
    kept        exactly k true per row (masks)
    flip        a tenth of a mask's values flipped
    prefix      every row true on a prefix of its own length (v = 0) or a suffix: the
                padding and causal masks (masks)
    negate_from / copy_from    x = -y or y for an input y of the same shape
"""

from __future__ import annotations

import numpy as np

from stochopt.spec import Spec
from stochopt.verify.families import KEPT, prefix_rows
from stochopt.verify.strategies import representable

FLOAT_MOVES = ("fill", "fill_row", "fill_some", "scale", "spread", "shift", "extreme",
               "grid", "copy_row", "ties", "sort", "negate_from", "copy_from")
MASK_MOVES = ("kept", "flip", "fill_row", "fill", "prefix")
SCALES = tuple(10.0 ** -k for k in (0.5, 1, 2, 3, 5, 8, 12, 20, 30, 37, 40, 44))


def legal(spec: Spec, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every input in its dtype, inside its declared range."""
    out = {}
    for name, x in inputs.items():
        t = spec.inputs[name]
        if t.dtype == "bool":
            out[name] = np.asarray(x, bool)
        else:
            lo, hi = t.bounds
            out[name] = representable(np.clip(np.asarray(x, np.float64), lo, hi), t.dtype,
                                      lo, hi)
    return out


def widened(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Copies to change: float64 for numbers, bool for masks."""
    return {n: (x.copy() if x.dtype == np.bool_ else np.asarray(x, np.float64).copy())
            for n, x in inputs.items()}


def _rows(x: np.ndarray) -> np.ndarray:
    """A (rows, last axis) view of x (a 1-D input is one row)."""
    return x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)


def move(spec: Spec, inputs: dict[str, np.ndarray], name: str, kind: str, value: float,
         rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The inputs with one move applied to input `name` (module doc)."""
    out = widened(inputs)
    x = out[name]
    rows = _rows(x)
    t = spec.inputs[name]
    lo, hi = t.bounds
    centre = min(max(0.0, lo), hi)
    r = rng.integers(rows.shape[0])
    if t.dtype == "bool":
        if kind == "kept":
            k = int(value)
            rank = np.argsort(np.argsort(rng.random(rows.shape), axis=1), axis=1)
            rows[:] = rank < k
        elif kind == "flip":
            flip = rng.random(rows.shape) < 0.1
            rows[flip] = ~rows[flip]
        elif kind == "prefix":
            rows[:] = prefix_rows(rng, *rows.shape, bool(value))
        elif kind == "fill_row":
            rows[r] = bool(value)
        else:
            rows[:] = bool(value)
        return out
    if kind == "fill":
        rows[:] = value
    elif kind == "fill_row":
        rows[r] = value
    elif kind == "fill_some":
        rows[rng.random(rows.shape) < 0.1] = value
    elif kind == "scale":
        rows[:] = centre + (rows - centre) * value
    elif kind == "spread":
        mean = rows.mean(axis=1, keepdims=True)
        rows[:] = mean + (rows - mean) * value
    elif kind == "shift":
        rows[:] = rows + value
    elif kind == "extreme":
        rows[np.arange(rows.shape[0]), rng.integers(rows.shape[1], size=rows.shape[0])] = (
            hi if value > 0 else lo)
    elif kind == "grid" and value > 0:
        rows[:] = np.rint(rows / value) * value
    elif kind == "grid" and value == 0:
        rows[:] = representable(rows, "bf16", -np.inf, np.inf)
    elif kind == "grid":  # levels: a third of each row's size and more is a step
        size = np.abs(rows).max(axis=1, keepdims=True)
        levels = np.rint(rows / np.where(size > 0, size, 1.0) * 1.5)
        rows[:] = np.clip(levels, -1.0 if value == -1 else 0.0, 1.0)
    elif kind == "copy_row":
        rows[r] = rows[rng.integers(rows.shape[0])]
    elif kind == "sort":
        pick = rng.random(rows.shape[0]) < 0.5
        pick[r] = True
        ordered = np.sort(rows[pick], axis=1)
        rows[pick] = ordered if value > 0 else ordered[:, ::-1]
    elif kind == "ties":
        rank = np.argsort(np.argsort(rng.random(rows.shape), axis=1), axis=1)
        rows[:] = np.where(rank < int(value), rows.max(axis=1, keepdims=True), rows)
    elif kind in ("negate_from", "copy_from"):
        others = [n for n, y in inputs.items() if n != name and spec.inputs[n].dtype
                  in ("f32", "bf16") and np.shape(y) == x.shape]
        if others:  # a share of the elements: both sides of the decision in one input
            y = np.asarray(inputs[others[rng.integers(len(others))]], np.float64)
            pick = rng.random(x.shape) < (value if 0 < value <= 1 else 0.5)
            x[pick] = (-y if kind == "negate_from" else y)[pick]
    return out


def thresholds(spec: Spec, name: str, kind: str, constants: list[float]) -> list[float]:
    """For fills, the kernel's own constants and their near neighbours inside the
    input's range: where its thresholds lie, walked first."""
    if kind not in ("fill", "fill_row", "fill_some") or spec.inputs[name].dtype == "bool":
        return []
    lo, hi = spec.inputs[name].bounds
    near = [v * f for v in constants for f in (1.0, 1 - 1e-4, 1 + 1e-4, 1 - 1e-2, 1 + 1e-2)]
    return [v for v in dict.fromkeys(near) if lo <= v <= hi]


def parameters(spec: Spec, name: str, kind: str, constants: list[float]) -> list[float]:
    """The values a direction walks: for fills the kernel's own constants and their
    neighbours (thresholds()), then magnitudes from the range's ends down to the
    smallest subnormals, both signs."""
    t = spec.inputs[name]
    lo, hi = t.bounds
    n = t.shape[-1] if t.shape else 1
    if t.dtype == "bool":
        return [float(k) for k in KEPT if k < n] + [float(n), 0.0] if kind == "kept" \
            else [0.0, 1.0] if kind == "prefix" else [1.0, 0.0]
    if kind == "ties":
        return [float(k) for k in KEPT if k < n] + [float(n)]
    if kind in ("fill", "fill_row", "fill_some"):
        magnitudes = [s * m for m in (hi, lo) for s in (1.0,) + SCALES]
        values = thresholds(spec, name, kind, constants) + [0.0, lo, hi, (lo + hi) / 2]
        return [v for v in dict.fromkeys(values + magnitudes) if lo <= v <= hi]
    if kind in ("scale", "spread"):
        return list(SCALES)
    if kind == "shift":
        width = hi - lo
        return [s * width * d for d in (1.0, -1.0) for s in (0.5, 0.1, 1e-2, 1e-4)]
    if kind in ("extreme", "sort"):
        return [1.0, -1.0]
    if kind in ("negate_from", "copy_from"):
        return [0.5, 1.0, 0.1]  # the share of elements taken from the other input
    if kind == "grid":  # whole numbers first, as before there were other grids
        return [1.0, 0.0, 0.125, 0.5, 0.0625, -1.0, -2.0]
    return [0.0]


def kernel_constants(kernel) -> list[float]:
    """The numbers a kernel compares, clamps and fills with: where its thresholds lie."""
    from stochopt.leir.rules import Const

    out = []
    for node in kernel.nodes:
        if node.op == "full":
            out.append(float(node.attr("value")))
        out += [float(a.value) for a in node.args if isinstance(a, Const)]
    finite = [v for v in out if np.isfinite(v)]
    return list(dict.fromkeys(finite + [-v for v in finite]))
