"""Interval back-propagation: which input values put a decision's operand in a range.

From a wanted interval for a node, walk the value graph back to the kernel's inputs
through the ops that can be inverted on intervals: movement and shape ops (the same
values), neg, a constant added, subtracted, multiplied or divided, two values added or
subtracted (half of the interval each: both near 0 for a sum near 0; and where both
are views of inputs, through slices, transposes, reshapes, broadcasts, concats and
constant scales and shifts, one view set from the other so that the difference (the
sum) holds its wanted value, or where one is a view and the other a value computed from
other inputs, the view set from that value: a *relation*), exp and log, sqrt,
rsqrt, reciprocal, tanh, abs (both signs), a product or quotient of two values wanted
near 0 (a factor or the numerator 0), casts, comparisons with a constant (true
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
the other is a constant, both only for a sum or a difference (each half the interval)
and a product near 0 (either factor), and it says nothing about the rest of the kernel. The
directed search (directed.py) builds inputs from the goals and keeps those that
reach the side they were built for.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from stochopt.leir.ir import Kernel
from stochopt.leir.rules import Const
from stochopt.verify import traced
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
    norm: bool = False    # varied rows whose sum of squares lies in the interval
    # a relation instead of an interval: (source input, its view, this input's view,
    # alpha, beta): this input's view set to alpha * the source's view + beta, each view
    # the movements (slices, transposes, reshapes, concats) that lead from the input to
    # the value compared (view_of)
    copy: tuple | None = None
    # where the relation's source is a node (copy[0] an int): the kernel that computes it
    kernel: Kernel | None = field(default=None, compare=False, repr=False)


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
        return (_norm_rows(kernel, n, lo, hi)
                + back(tensors[0], (lo / count, hi / count), True))[:MAX_ALTERNATIVES]
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
    if op in ("mul", "div") and len(tensors) == 2 and not consts and lo <= 0 <= hi:
        # a product is 0 where a factor is, a quotient where its numerator is
        factors = n.args if op == "mul" else n.args[:1]
        return [alt for f in factors for alt in back(f, (0.0, 0.0))][:MAX_ALTERNATIVES]
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


def _norm_rows(kernel: Kernel, n, lo: float, hi: float) -> list[Alternative]:
    """A sum over the last axis of a square of a view of an input (scaled, not shifted):
    varied rows of that input scaled to the wanted sum of squares (unit-norm keys), where
    rows at one value would meet it only as constants, on which a fast path for such rows
    may well agree with the right one."""
    square = kernel.nodes[n.inputs[0]]
    axis = n.attr("axis")
    if hi <= 0 or axis not in (-1, len(square.type.shape) - 1) or square.op != "mul" or \
            square.args[0] != square.args[1] or type(square.args[0]) is not int:
        return []
    view = view_of(kernel, square.args[0])
    if view is None or view[1] != ("input",) or view[3] != 0 or view[2] == 0:
        return []
    name, _, scale, _ = view
    return [(Goal(name, (max(lo, 0.0) / scale ** 2, hi / scale ** 2), True, norm=True),)]


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
# and those that move them: a view of the operand's elements
_VIEW_STEPS = frozenset({"slice", "transpose", "reshape", "broadcast_to"})
VIEW_OPS = _VIEW_SAME | _VIEW_STEPS  # every element's value kept, only moved
COPY_REPEATS = 64  # a copy between overlapping views of one input, applied until it holds


def view_of(kernel: Kernel, node: int) -> tuple[str, tuple, float, float] | None:
    """(input, view, scale, shift) when node's value is scale * view + shift, the view an
    input's elements through slices, transposes, reshapes, broadcasts and concats of
    views of that one input (a tree: ("input",) at its leaves, evaluated by through)
    and scale and shift made of constants; else None."""
    n = kernel.nodes[node]
    if n.op == "input":
        return n.attr("name"), ("input",), 1.0, 0.0
    if n.op == "concat":
        parts = [view_of(kernel, a) if type(a) is int else None for a in n.args]
        if any(p is None for p in parts) or len({(p[0], p[2], p[3]) for p in parts}) != 1:
            return None  # a constant, another input or another image among the parts
        name, _, scale, shift = parts[0]
        return name, ("concat", n.attr("axis"), tuple(p[1] for p in parts)), scale, shift
    if not n.args or type(n.args[0]) is not int:  # a full(), a constant operand
        return None
    if n.op in _VIEW_SAME:
        if n.op == "cast" and n.attr("dtype") in ("i32", "bool") and \
                kernel.nodes[n.args[0]].type.dtype != n.attr("dtype"):
            return None  # truncates: not the same values
        return view_of(kernel, n.args[0])
    step = affine_step(n)
    if n.op not in _VIEW_STEPS and (step is None or step[0] == 0):
        return None
    inner = view_of(kernel, n.inputs[0])
    if inner is None:
        return None
    name, view, scale, shift = inner
    if step is not None:
        scale, shift = compose(step, (scale, shift))
        return name, view, scale, shift
    arg = {"slice": lambda: n.attr("bounds"),
           "transpose": lambda: n.attr("perm") or tuple(reversed(range(len(n.type.shape)))),
           "reshape": lambda: n.type.shape, "broadcast_to": lambda: n.type.shape}[n.op]()
    return name, (n.op, arg, view), scale, shift


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
    if (source is None) != (target is None):
        return _from_value(kernel, a if source is None else b, source or target,
                           source is not None, added, t, lo, hi)
    if source is None or target is None or source[:2] == target[:2] or target[2] == 0:
        return []
    (_, _, sa, ha), (_, _, sb, hb) = source, target
    # sb B + hb = sa A + ha - t (a - b = t), or t - sa A - ha (a + b = t)
    alpha, beta = ((-sa, t - ha - hb) if added else (sa, ha - t - hb))
    return [(Goal(target[0], (lo, hi), False, copy=(source[0], source[1], target[1],
                                                      alpha / sb, beta / sb)),)]


def _from_value(kernel: Kernel, other: int, view: tuple, view_first: bool, added: bool,
                t: float, lo: float, hi: float) -> list[Alternative]:
    """One side a view of an input (scale s, shift h), the other a value computed from
    other inputs: the view set from that value, so that a - b (a + b) is t. A mask equal
    to x > 0, a tensor equal to another's relu: what only the kernel's own computation
    states."""
    name, steps, s, h = view
    need = traced.needed(kernel, [other])
    if s == 0 or any(need[i] and n.op == "input" and n.attr("name") == name
                     for i, n in enumerate(kernel.nodes)):
        return []  # the value reads the input it would set
    # a - b = t with a the view: s V + h - w = t; with b the view: w - s V - h = t;
    # a + b = t: s V + h + w = t
    alpha = (-1.0 if added else 1.0) / s
    beta = ((t if added or view_first else -t) - h) / s
    return [(Goal(name, (lo, hi), False, copy=(other, None, steps, alpha, beta),
                  kernel=kernel),)]


def through(x: np.ndarray, view: tuple) -> np.ndarray:
    """The view of x (view_of)."""
    kind = view[0]
    if kind == "input":
        return x
    if kind == "concat":
        return np.concatenate([through(x, v) for v in view[2]], axis=view[1])
    inner = through(x, view[2])
    if kind == "slice":
        return inner[tuple(slice(a, b) for a, b in view[1])]
    if kind == "transpose":
        return np.transpose(inner, view[1])
    if kind == "reshape":
        return inner.reshape(view[1])
    return np.broadcast_to(inner, view[1])


def _indices(shape: tuple, view: tuple) -> np.ndarray:
    """The flat index, in an input of this shape, of each element the view reads."""
    return through(np.arange(int(np.prod(shape))).reshape(shape), view)


def _written(x: np.ndarray, view: tuple, values: np.ndarray) -> np.ndarray:
    """x with the elements the view reads replaced by values (where the view reads an
    element twice, one of its values)."""
    index = _indices(x.shape, view)
    out = x.copy().reshape(-1)
    out[index.reshape(-1)] = np.broadcast_to(values, index.shape).reshape(-1)
    return out.reshape(x.shape)


def _tied(shape: tuple, source: tuple, target: tuple) -> np.ndarray:
    """For each element of an input of this shape, the first element it must equal
    where the two views of it must be equal element by element: the classes of the
    equalities (a union-find by least index, pointers jumped each round)."""
    a = _indices(shape, source).reshape(-1)
    b = _indices(shape, target).reshape(-1)
    labels = np.arange(int(np.prod(shape)))
    for _ in range(COPY_REPEATS):
        least = np.minimum(labels[a], labels[b])
        before = labels.copy()
        np.minimum.at(labels, a, least)
        np.minimum.at(labels, b, least)
        labels = labels[labels]
        if np.array_equal(labels, before):
            break
    return labels


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
                key = (goal.input, goal.rows, goal.spread, goal.norm)
                lo, hi = merged.get(key, (-np.inf, np.inf))
                merged[key] = (max(lo, goal.interval[0]), min(hi, goal.interval[1]))
            if all(lo <= hi for lo, hi in merged.values()):
                out.append(tuple(Goal(name, iv, rows, spread, norm=norm)
                                 for (name, rows, spread, norm), iv in merged.items()) + copies)
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
    """The inputs with goal.input's view set to alpha * the source's view (or a node's
    value on these inputs) + beta, kept inside the declared range (legal() rounds it);
    equal views of one input make its elements equal in classes (a period, rows in
    pairs); other relations between overlapping views of one input are repeated until
    they hold."""
    source, source_view, view, alpha, beta = goal.copy
    t = spec.inputs[goal.input]
    if t.dtype == "bool" and (alpha, beta) != (1.0, 0.0):
        return None
    x = np.asarray(inputs[goal.input])
    x = x.astype(bool) if t.dtype == "bool" else x.astype(np.float64)
    out = dict(inputs)
    if source == goal.input and (alpha, beta) == (1.0, 0.0):  # equal views of one input
        try:
            out[goal.input] = x.reshape(-1)[_tied(x.shape, source_view, view)].reshape(
                x.shape)
        except ValueError:  # shapes that do not line up after all
            return None
        return out
    for _ in range(COPY_REPEATS if source == goal.input else 1):
        values = through(np.asarray(out[source]), source_view) if type(source) is str \
            else traced.run(goal.kernel, out, [source], exact=False)[source]
        values = np.asarray(values, bool) if t.dtype == "bool" else np.clip(
            alpha * np.asarray(values, np.float64) + beta, *t.bounds)
        if source == goal.input and np.array_equal(through(x, view), values):
            break
        try:
            x = _written(x, view, values)
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
    elif goal.norm:  # a row's sum of squares: no more than its elements' largest
        a, b = max(goal.interval[0], 0.0), min(goal.interval[1],
                                               (t.shape[-1] if t.shape else 1)
                                               * max(lo * lo, hi * hi))
    else:
        a, b = max(goal.interval[0], lo), min(goal.interval[1], hi)
    if a > b:
        return None
    out = dict(inputs)
    x = np.asarray(inputs[goal.input], np.float64).copy()
    rows = x.reshape(-1, x.shape[-1])
    if goal.rows:
        # rows normalized come as a whole tensor of them (every key of a QK-norm cache)
        pick = rng.random(rows.shape[0]) < (1.0 if goal.norm else share)
        pick[rng.integers(rows.shape[0])] = True
        k = int(pick.sum())
        if goal.norm:  # uniform rows, each scaled to its sum of squares
            fresh = rng.uniform(lo, hi, (k, rows.shape[1]))
            size = np.sum(fresh * fresh, axis=1, keepdims=True)
            rows[pick] = fresh * np.sqrt(_draw(rng, a, b, (k, 1)) / np.where(size > 0, size,
                                                                               1.0))
        else:
            rows[pick] = _spread_rows(rng, a, b, lo, hi, (k, rows.shape[1])) \
                if goal.spread else _draw(rng, a, b, (k, 1))
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
