"""Interval back-propagation: which input values put a decision's operand in a range.

From a wanted interval for a node, walk the value graph back to the kernel's inputs
through the ops that can be inverted on intervals: movement and shape ops (the same
values), neg, a constant added, subtracted, multiplied or divided, two values added or
subtracted (half of the interval each: both near 0 for a sum near 0; and where both
are views of inputs, through slices, transposes and constant scales and shifts, one view
set from the other so that the difference (the sum) holds its wanted value: a
*relation*), exp and log, sqrt,
rsqrt, reciprocal, tanh, abs (both signs), casts, comparisons with a constant (true
or false wanted), and reductions, where a whole row takes one value (a max, a min or a
mean of a constant row is that value; a sum over n is n of them); and a row's range,
its max minus its min over the last axis, which asks for rows with that spread. The
result is a list of *alternatives*, each a conjunction of *goals*: an input, the
interval its elements should lie in, and whether single elements or whole rows must be
set, or rows of a given spread (a where splits
into its two branches, both its condition and the branch wanted; goals on one input
intersect). A goal whose interval misses the input's declared range is dropped: along
that path the wanted values are out of reach.

This is a heuristic, not a solver: where two tensors meet it follows one operand when
the other is a constant, both only for a sum or a difference (each half the interval),
and it says nothing about the rest of the kernel. The
directed search (directed.py) builds inputs from the goals and keeps those that
reach the side they were built for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stochopt.leir.ir import Kernel
from stochopt.leir.rules import Const
from stochopt.verify.relations import affine_step, compose

Interval = tuple[float, float]
SAME = frozenset({"load", "store", "relayout", "slice", "broadcast_to", "transpose",
                  "reshape", "cast", "concat"})
DEPTH = 48


@dataclass(frozen=True)
class Goal:
    input: str
    interval: Interval
    rows: bool   # True: whole rows at one value (through a reduction); else elements
    spread: bool = False  # rows whose max - min lies in the interval (a row's range)
    # a relation instead of an interval: (source input, its view, this input's view,
    # alpha, beta): this input's view set to alpha * the source's view + beta, each view
    # the slices and transposes that lead from the input to the value compared
    copy: tuple | None = None


Alternative = tuple[Goal, ...]   # goals that must hold together
MAX_ALTERNATIVES = 8


def backprop(kernel: Kernel, node: int, want: Interval, rows: bool = False,
             depth: int = 0) -> list[Alternative]:
    """Ways to put node's value in `want`: each a conjunction of goals on the inputs
    (module doc); a where splits into its two branches, abs into two signs."""
    lo, hi = want
    if depth > DEPTH or not lo <= hi or np.isnan(lo) or np.isnan(hi):
        return []
    n = kernel.nodes[node]
    op = n.op
    if op == "input":
        return [(Goal(n.attr("name"), (lo, hi), rows),)]
    tensors = n.inputs
    consts = [float(a.value) for a in n.args if isinstance(a, Const)]

    def back(src: int, interval: Interval, by_rows: bool = rows) -> list[Alternative]:
        return backprop(kernel, src, interval, by_rows, depth + 1)

    if op in SAME:
        return [alt for src in tensors for alt in back(src, (lo, hi))][:MAX_ALTERNATIVES]
    if op in ("reduce_max", "reduce_min"):
        return back(tensors[0], (lo, hi), True)
    if op == "reduce_sum":
        count = kernel.nodes[tensors[0]].type.shape[n.attr("axis")]
        return back(tensors[0], (lo / count, hi / count), True)
    if op == "neg":
        return back(tensors[0], (-hi, -lo))
    if op == "where" and len(tensors) == 3 and not consts:
        c, x, y = n.args
        return (both(back(c, (1.0, 1.0)), back(x, (lo, hi)))
                + both(back(c, (0.0, 0.0)), back(y, (lo, hi))))[:MAX_ALTERNATIVES]
    if op in ("gt", "ge", "lt", "le", "eq") and len(tensors) == 1 and consts:
        return _compare(n, tensors[0], consts[0], lo, hi, back)
    if op == "mul" and len(n.args) == 2 and n.args[0] == n.args[1] and hi >= 0:
        low, top = np.sqrt(max(lo, 0.0)), np.sqrt(hi)  # a square
        return back(tensors[0], (low, top)) + back(tensors[0], (-top, -low))
    if op == "sub" and len(tensors) == 2 and not consts:
        ranged = _row_range(kernel, n.args[0], n.args[1])
        if ranged is not None:
            source, sign = ranged
            return _spread(kernel, source, (lo, hi) if sign > 0 else (-hi, -lo), depth + 1)
        a, b = n.args  # a == b where 0 is wanted, else half of the interval each way
        return (_equal(kernel, a, b, False, lo, hi)
                + both(back(a, (lo / 2, hi / 2)), back(b, (-hi / 2, -lo / 2))))[:MAX_ALTERNATIVES]
    if op == "add" and len(tensors) == 2 and not consts:
        # b == -a where 0 is wanted; else half of the interval each: one way among many,
        # and the only one where both terms cannot go below 0 (|a| + |b| near 0)
        a, b = n.args
        return (_equal(kernel, a, b, True, lo, hi)
                + both(back(a, (lo / 2, hi / 2)), back(b, (lo / 2, hi / 2))))[:MAX_ALTERNATIVES]
    if len(tensors) == 1 and len(consts) == 1 and op in ("add", "sub", "mul", "div"):
        return _affine(n, tensors[0], consts[0], lo, hi, back)
    if len(tensors) != 1 or consts:
        return []
    with np.errstate(all="ignore"):
        if op == "exp":
            return back(tensors[0], (np.log(lo) if lo > 0 else -np.inf, np.log(hi)))
        if op == "log":
            return back(tensors[0], (np.exp(lo), np.exp(hi)))
        if op == "sqrt" and hi >= 0:
            return back(tensors[0], (max(lo, 0.0) ** 2, hi ** 2))
        if op == "rsqrt" and hi > 0:
            return back(tensors[0], (1 / hi ** 2, 1 / max(lo, 0.0) ** 2))
        if op == "reciprocal" and (lo > 0 or hi < 0):
            return back(tensors[0], (1 / hi, 1 / lo))
        if op == "tanh":
            return back(tensors[0], (np.arctanh(max(lo, -1.0)), np.arctanh(min(hi, 1.0))))
        if op == "abs" and hi >= 0:
            low = max(lo, 0.0)
            return back(tensors[0], (low, hi)) + back(tensors[0], (-hi, -low))
    return []


# ops that keep each row's values (the last axis is the row in both), so its spread
_SAME_ROWS = frozenset({"load", "store", "relayout", "cast"})
# and those that may also stand between a row's reduction (one value per row, kept as
# an axis) and the difference of two of them
_PER_ROW = _SAME_ROWS | {"broadcast_to", "reshape"}


def _row_range(kernel: Kernel, a, b) -> tuple[int, int] | None:
    """(source, sign) where a - b is sign * (max - min) of source's rows (last axis)."""
    def reduction(arg):
        while type(arg) is int and kernel.nodes[arg].op in _PER_ROW:
            arg = kernel.nodes[arg].args[0]
        if type(arg) is not int or kernel.nodes[arg].op not in ("reduce_max", "reduce_min"):
            return None
        node = kernel.nodes[arg]
        source = node.args[0]
        if node.attr("axis") != len(kernel.nodes[source].type.shape) - 1:
            return None
        return node.op, source

    first, second = reduction(a), reduction(b)
    if first is None or second is None or first[1] != second[1] or first[0] == second[0]:
        return None
    return first[1], 1 if first[0] == "reduce_max" else -1


def _spread(kernel: Kernel, node: int, want: Interval, depth: int) -> list[Alternative]:
    """Rows of node whose max - min lies in want, followed back to an input through ops
    that keep rows, constants added (the same spread) and constant scales."""
    lo, hi = max(want[0], 0.0), want[1]
    if depth > DEPTH or lo > hi:
        return []
    n = kernel.nodes[node]
    if n.op == "input":
        return [(Goal(n.attr("name"), (lo, hi), True, spread=True),)]
    consts = [float(a.value) for a in n.args if isinstance(a, Const)]
    if n.op in _SAME_ROWS or n.op == "neg":
        return _spread(kernel, n.args[0], (lo, hi), depth + 1)
    if len(n.inputs) == 1 and len(consts) == 1:
        c = abs(consts[0])
        if n.op in ("add", "sub"):
            return _spread(kernel, n.inputs[0], (lo, hi), depth + 1)
        if n.op == "mul" and c > 0:
            return _spread(kernel, n.inputs[0], (lo / c, hi / c), depth + 1)
        if n.op == "div" and c > 0 and n.args[0] == n.inputs[0]:
            return _spread(kernel, n.inputs[0], (lo * c, hi * c), depth + 1)
    return []


# ops that hand on the values of their operand as they are (a view: its elements, moved)
_VIEW_SAME = frozenset({"load", "store", "relayout", "cast"})
COPY_REPEATS = 64  # a copy between overlapping views of one input, applied until it holds


def view_of(kernel: Kernel, node: int) -> tuple[str, tuple, float, float] | None:
    """(input, steps, scale, shift) when node's value is scale * view + shift, the view an
    input's elements through slices and transposes (steps from the input outwards) and
    scale and shift made of constants; else None."""
    steps, scale, shift = [], 1.0, 0.0
    while True:
        n = kernel.nodes[node]
        if n.op == "input":
            return n.attr("name"), tuple(reversed(steps)), scale, shift
        if n.op in _VIEW_SAME and type(n.args[0]) is int:
            if n.op == "cast" and n.attr("dtype") in ("i32", "bool") and \
                    kernel.nodes[n.args[0]].type.dtype != n.attr("dtype"):
                return None  # truncates: not the same values
        elif n.op == "slice":
            steps.append(("slice", n.attr("bounds")))
        elif n.op == "transpose":
            steps.append(("transpose", n.attr("perm") or
                          tuple(reversed(range(len(n.type.shape))))))
        elif (step := affine_step(n)) is not None and step[0] != 0:
            scale, shift = compose((scale, shift), step)
        else:
            return None
        node = n.inputs[0]


def _equal(kernel: Kernel, a, b, added: bool, lo: float, hi: float) -> list[Alternative]:
    """a - b (a + b where added) held at a value t of the interval, where both are views
    of inputs up to constant scales and shifts: b's view set from a's. Two slices of one
    input (rows repeated, doubled, offset, halves opposite), a tensor and another's
    transpose (a Gram matrix), two heads of one mask: relations that intervals cannot
    state, and no zero or constant input shows a bug behind them."""
    t = 0.0 if lo <= 0.0 <= hi else (lo + hi) / 2 if np.isfinite(lo + hi) else None
    if t is None or type(a) is not int or type(b) is not int or \
            kernel.nodes[a].type.shape != kernel.nodes[b].type.shape:
        return []
    source, target = view_of(kernel, a), view_of(kernel, b)
    if source is None or target is None or source[:2] == target[:2] or target[2] == 0:
        return []
    (_, _, sa, ha), (_, _, sb, hb) = source, target
    # sb B + hb = sa A + ha - t (a - b = t), or t - sa A - ha (a + b = t)
    alpha, beta = ((-sa, t - ha - hb) if added else (sa, ha - t - hb))
    return [(Goal(target[0], (lo, hi), False, copy=(source[0], source[1], target[1],
                                                      alpha / sb, beta / sb)),)]


def through(x: np.ndarray, steps: tuple) -> np.ndarray:
    """The view of x the steps give (view_of)."""
    for kind, arg in steps:
        x = x[tuple(slice(a, b) for a, b in arg)] if kind == "slice" else np.transpose(x, arg)
    return x


def _written(x: np.ndarray, steps: tuple, values: np.ndarray) -> np.ndarray:
    """x with the view that the steps give replaced by values."""
    if not steps:
        return np.broadcast_to(values, x.shape).astype(x.dtype).copy()
    (kind, arg), rest = steps[0], steps[1:]
    if kind == "transpose":
        inverse = np.argsort(arg)
        return np.transpose(_written(np.transpose(x, arg), rest, values), inverse)
    out = x.copy()
    index = tuple(slice(a, b) for a, b in arg)
    out[index] = _written(x[index], rest, values)
    return out


def both(first: list[Alternative], second: list[Alternative]) -> list[Alternative]:
    """Alternatives that meet both lists: goals on the same input and scope intersect,
    and a pair whose intervals do not meet is no alternative."""
    out = []
    for a in first:
        for b in second:
            merged: dict[tuple[str, bool, bool], Interval] = {}
            copies = tuple(g for g in a + b if g.copy is not None)
            for goal in a + b:
                if goal.copy is not None:
                    continue
                key = (goal.input, goal.rows, goal.spread)
                lo, hi = merged.get(key, (-np.inf, np.inf))
                merged[key] = (max(lo, goal.interval[0]), min(hi, goal.interval[1]))
            if all(lo <= hi for lo, hi in merged.values()):
                out.append(tuple(Goal(name, iv, rows, spread)
                                 for (name, rows, spread), iv in merged.items()) + copies)
    return out


def _compare(n, src: int, c: float, lo: float, hi: float, back) -> list[Alternative]:
    """x > c (and the rest) wanted true (interval above 0) or false (holding only 0)."""
    truth = lo > 0.5
    if not truth and hi >= 0.5:
        return []  # either outcome will do: no goal
    op = n.op if isinstance(n.args[1], Const) else {  # c > x is x < c
        "gt": "lt", "lt": "gt", "ge": "le", "le": "ge", "eq": "eq"}[n.op]
    above, below = (c, np.inf), (-np.inf, c)
    ranges = {"gt": above, "ge": above, "lt": below, "le": below, "eq": (c, c)}
    if truth:
        return back(src, ranges[op])
    opposite = {"gt": below, "ge": below, "lt": above, "le": above}.get(op)
    return back(src, opposite) if opposite else []


def _affine(n, src: int, c: float, lo: float, hi: float, back) -> list[Alternative]:
    first = n.args[0] == src
    with np.errstate(all="ignore"):
        if n.op == "add":
            return back(src, (lo - c, hi - c))
        if n.op == "sub":
            return back(src, (lo + c, hi + c) if first else (c - hi, c - lo))
        if n.op == "mul" and c != 0:
            a, b = lo / c, hi / c
            return back(src, (min(a, b), max(a, b)))
        if n.op == "div" and first and c != 0:
            a, b = lo * c, hi * c
            return back(src, (min(a, b), max(a, b)))
    return []


def realize(spec, inputs: dict[str, np.ndarray], alternative: Alternative,
            rng: np.random.Generator, share: float) -> dict[str, np.ndarray] | None:
    """The inputs with every goal of the alternative met on a share of the same rows
    (or elements) of its input; None when a goal misses the declared range."""
    seed = int(rng.integers(1 << 31))  # the same rows picked for every goal
    out = dict(inputs)
    # the intervals first, then the relations, which copy the values they set
    for goal in sorted(alternative, key=lambda g: g.copy is not None):
        out = _realize_goal(spec, out, goal, np.random.default_rng(seed), share) \
            if goal.copy is None else _realize_copy(spec, out, goal)
        if out is None:
            return None
    return out


def _realize_copy(spec, inputs: dict[str, np.ndarray], goal: Goal) -> dict | None:
    """The inputs with goal.input's view set to alpha * the source's view + beta, kept
    inside the declared range (legal() rounds it); between overlapping views of one
    input (a period: x[k:] from x[:-k]) the copy is repeated until it holds."""
    source, source_steps, steps, alpha, beta = goal.copy
    t = spec.inputs[goal.input]
    if t.dtype == "bool" and (alpha, beta) != (1.0, 0.0):
        return None
    x = np.asarray(inputs[goal.input])
    x = x.astype(bool) if t.dtype == "bool" else x.astype(np.float64)
    out = dict(inputs)
    for _ in range(COPY_REPEATS if source == goal.input else 1):
        values = through(np.asarray(out[source]), source_steps)
        values = np.asarray(values, bool) if t.dtype == "bool" else np.clip(
            alpha * np.asarray(values, np.float64) + beta, *t.bounds)
        if source == goal.input and np.array_equal(through(x, steps), values):
            break
        try:
            x = _written(x, steps, values)
        except ValueError:  # shapes that do not line up after all
            return None
        out[goal.input] = x
    return out


def _realize_goal(spec, inputs: dict[str, np.ndarray], goal: Goal,
                  rng: np.random.Generator, share: float) -> dict[str, np.ndarray] | None:
    """The inputs with a share of goal.input's elements (or rows) set to values in the
    goal's interval, within the declared range; None when the two do not meet."""
    t = spec.inputs[goal.input]
    if t.dtype == "bool":
        return _realize_mask(inputs, goal, rng, share)
    lo, hi = t.bounds
    if goal.spread:  # a row's max - min: no more than the declared range's width
        a, b = max(goal.interval[0], 0.0), min(goal.interval[1], hi - lo)
    else:
        a, b = max(goal.interval[0], lo), min(goal.interval[1], hi)
    if a > b:
        return None
    out = dict(inputs)
    x = np.asarray(inputs[goal.input], np.float64).copy()
    rows = x.reshape(-1, x.shape[-1])
    if goal.rows:
        pick = rng.random(rows.shape[0]) < share
        pick[rng.integers(rows.shape[0])] = True
        k = int(pick.sum())
        rows[pick] = _spread_rows(rng, a, b, lo, hi, (k, rows.shape[1])) if goal.spread \
            else _draw(rng, a, b, (k, 1))
    else:
        pick = rng.random(rows.shape) < share
        rows[pick] = _draw(rng, a, b, int(pick.sum()))
    out[goal.input] = x
    return out


def _spread_rows(rng, a: float, b: float, lo: float, hi: float, shape) -> np.ndarray:
    """Rows in [lo, hi] whose max - min lies in [a, b]: each uniform between a start and
    start + w, both ends taken by one element each."""
    k, n = shape
    # inside the interval: a spread at its very end may round onto the boundary
    width = _draw(rng, a + (b - a) * 0.05, b - (b - a) * 0.05, (k, 1)) if b > a else \
        np.full((k, 1), a)
    start = lo + rng.random((k, 1)) * (hi - lo - width)
    values = start + width * rng.random((k, n))
    if n > 1:
        values[:, 0], values[:, 1] = start[:, 0], (start + width)[:, 0]
        values = values[:, rng.permutation(n)]
    return values


def _draw(rng, a: float, b: float, shape) -> np.ndarray:
    """Values in [a, b]: its ends and points between, log-spaced where it is wide."""
    if a == b:
        return np.full(shape, a)
    if a > 0 and b / a > 100:
        return np.exp(rng.uniform(np.log(a), np.log(b), shape))
    if b < 0 and a / b > 100:
        return -np.exp(rng.uniform(np.log(-b), np.log(-a), shape))
    return np.where(rng.random(shape) < 0.2, np.where(rng.random(shape) < 0.5, a, b),
                    rng.uniform(a, b, shape))


def _realize_mask(inputs, goal: Goal, rng, share: float):
    """A bool input's elements true (interval above 1/2), false (below), or, through a
    reduction (a count), each row with its share of true values in the interval."""
    a, b = max(goal.interval[0], 0.0), min(goal.interval[1], 1.0)
    if a > b:
        return None
    out = dict(inputs)
    x = np.asarray(inputs[goal.input], bool).copy()
    rows = x.reshape(-1, x.shape[-1])
    n = rows.shape[1]
    if goal.rows:
        low, high = int(np.ceil(a * n - 1e-9)), int(np.floor(b * n + 1e-9))
        if low > high:
            return None  # no whole count of n lies in the interval
        k = int(rng.integers(low, high + 1))
        rank = np.argsort(np.argsort(rng.random(rows.shape), axis=1), axis=1)
        pick = rng.random(rows.shape[0]) < share
        rows[pick] = rank[pick] < k
    else:
        pick = rng.random(rows.shape) < share
        rows[pick] = a > 0.5 or (b >= 0.5 and rng.random() < 0.5)
    out[goal.input] = x
    return out
