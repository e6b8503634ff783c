"""Decision points: where a candidate chooses, and the baseline does not choose alike.

A wrong kernel that passes random inputs almost always has a fast path or a special
case whose condition those inputs never meet. So every decision the candidate makes
that the baseline does not make in the same form (its value key, leir/terms.py, is not
one of the baseline's) becomes a coverage target, with a *margin*, a value per element
whose sign says which way the decision goes:

    gt, ge, lt, le, eq (a, b)    a - b                     a comparison
    maximum, minimum (a, b)      a - b                     a clamp (b a constant) or a
                                                           select between two values
    where (c, x, y)              +1 where c, -1 elsewhere  (c not itself a target),
                                                           only where x and y differ
    where (c1, where (c2, ..))   the least of the          a path: both conditions,
                                 conditions' margins       one side (taken somewhere)
    cast to i32 or bool          x                         truncation, zero or not
    a count held in bf16         |x| - 256                 past bf16's whole numbers
    x + c, c a guard far below   |x| - |c|                 the operand at the guard's
      x's reach (an eps)                                   scale, where the guard
                                                           changes the value
    reduce over some columns     max(rest) - max(these)    the rest holds the extreme
      of a value (a subset)      (min alike, sums by size)
    exp, tanh of a steep operand its operand               a switch written as
      (x scaled by 1e3 or more,                            arithmetic: exp(-1e30 d) is
      and reaching 1e3 or more)                            1 where d = 0, else 0
    w squared n times (2^n >= 1e3)  2^n * ln|w|            the same switch without a
                                                           constant: w^(2^40) is 1
                                                           where w = 1, else 0 or inf

Each target has three *sides* (a path one): below (a margin < 0 somewhere), above (> 0
somewhere) and the band around the boundary (|margin| <= BAND of the operands' size, or
exactly 0; for a switch, the operand within SWITCH_BAND of 0, where exp and tanh are
neither saturated nor flushed). The range analysis says which sides no legal input can reach, by the
margin's interval or its relations (x == max(x) is never above): those are named as
such, the declared ranges making them dead.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from stochopt.leir.ir import Kernel
from stochopt.leir.rules import Const
from stochopt.verify.backprop import VIEW_OPS
from stochopt.verify.counts import counted_nodes
from stochopt.verify.relations import affine_step

SIDES = ("below", "above", "band")
# the band around a boundary, as a fraction of the larger operand's size
BAND = 1e-3
COMPARISONS = ("gt", "ge", "lt", "le", "eq")
# where a bf16 count stops being exact
BF16_WHOLE = 256.0
# an added constant is a guard (an eps) when it is this far below its operand's reach,
# and small itself (1 + exp(-z) is a sigmoid's denominator, not a guard)
GUARD, GUARD_MAX = 1e-6, 1e-2
# exp, tanh, a reciprocal or rsqrt (a division's divisor) is a switch when its operand is some
# value scaled by at least STEEP (through sums, magnitudes, shifts and negations) and
# reaches at least STEEP in the declared ranges: it saturates (or flushes to 0) on all but
# a sliver of the value's range, which no random input meets. Its band is where the
# operand lies within SWITCH_BAND of 0 (tanh(16) is 1 - 3e-14, exp(-16) is 1e-7, 1/16)
SWITCHES = ("exp", "tanh", "reciprocal", "rsqrt", "div")
STEEP, SWITCH_BAND = 1e3, 16.0
# an operand reaching this many band units is a switch however it is scaled (a tensor of
# 1e30, a moderate constant times a sum over a whole cache, a divisor against a tiny
# numerator), as long as the declared ranges let it reach that far
REACH_ALONE = 1e6


@dataclass(frozen=True)
class Target:
    """One decision point of the candidate: its node and how to read its margin."""
    node: int
    op: str
    kind: str  # "compare", "clamp", "select", "mask", "path", "cast", "subset", "guard",
    # "switch"
    text: str            # what it is, in the kernel's terms ("line 7: lt(var, 1e-07)")
    left: int | float    # margin = left - right (a node's value or a number)
    right: int | float
    # for "subset": the base value and the columns of it the reduction takes
    base: int | None = None
    axis: int | None = None
    columns: tuple[int, int] | None = None
    # sides no input inside the declared ranges can reach (the range analysis)
    dead: frozenset[str] = frozenset()
    # for a "path": the conditions of nested selections that all hold along it, each
    # (op, a, b, wanted truth) with op a comparison of a and b, or "bool" for a bool a
    conds: tuple = ()
    sides: tuple[str, ...] = SIDES
    # for a "mask": the two values the where chooses between; a side counts only at
    # elements where they differ (where they agree, the choice changes nothing)
    branches: tuple = ()
    # for a "switch" made by squaring: 2^n, the left the value squared n times; the
    # margin is then power * ln|left| (the exponent the chain raises e to)
    power: float = 0.0
    # for a "switch": the operand's margin is operand / unit (a division's numerator size)
    unit: float = 1.0

    def nodes(self) -> list[int]:
        """The nodes whose values the margin reads."""
        return self.deciding() + [v for v in self.branches if type(v) is int]

    def deciding(self) -> list[int]:
        """The nodes the decision itself reads (not the values a where chooses from)."""
        operands = [v for c in self.conds for v in c[1:3]]
        return [v for v in (self.left, self.right, self.base, *operands) if type(v) is int]


def decision_targets(kernel: Kernel, baseline: Kernel | None,
                     ranges: dict[str, tuple[float, float]]) -> list[Target]:
    """The candidate's decision points that the baseline lacks in the same form, each
    with the sides that the declared ranges make dead."""
    from stochopt.verify.ranges import _Analysis

    known = _keys(baseline) if baseline is not None else set()
    if all(_key(kernel, i) in known for i in range(len(kernel.nodes))):
        return []  # the baseline itself, or a layout of it: nothing to cover
    analysis = _Analysis(kernel, ranges)
    analysis.run()
    counted = counted_nodes(kernel)
    squared = {a for n in kernel.nodes for a in _squared(n)}
    targets: list[Target] = []
    for i in range(len(kernel.nodes)):
        if _key(kernel, i) in known:
            continue
        target = _target(kernel, i, counted, analysis)
        if target is None and i not in squared:  # the top of a chain of squarings
            target = _squaring(kernel, i)
        if target is not None:
            targets.append(replace(target, dead=_dead(target, analysis)))
    # a where whose condition is a comparison target of its own adds nothing
    compared = {t.node for t in targets if t.kind == "compare"}
    return [t for t in targets if not (t.kind == "mask" and t.left in compared)] + [
        p for i in range(len(kernel.nodes)) if _key(kernel, i) not in known
        for p in _paths(kernel, i)]


def _paths(kernel: Kernel, i: int) -> list[Target]:
    """where(c1, where(c2, x, y), z) (and a where in the false branch): the value x is
    taken only where both conditions hold, a conjunction no single side covers (a band
    written as two comparisons). One target per inner branch, its one side "above":
    taken somewhere."""
    node = kernel.nodes[i]
    if node.op != "where" or not isinstance(node.args[0], int):
        return []
    out = []
    for branch, outer in ((node.args[1], True), (node.args[2], False)):
        inner = kernel.nodes[branch] if isinstance(branch, int) else None
        if inner is None or inner.op != "where" or not isinstance(inner.args[0], int):
            continue
        for truth in (True, False):
            conds = (_cond(kernel, node.args[0], outer), _cond(kernel, inner.args[0], truth))
            words = " and ".join(f"{_name(kernel, c)} {'holds' if want else 'fails'}"
                                 for c, want in ((node.args[0], outer),
                                                 (inner.args[0], truth)))
            out.append(Target(i, node.op, "path", _text(kernel, i, f"where {words}"),
                              0.0, 0.0, conds=conds, sides=("above",)))
    return out


def _cond(kernel: Kernel, c: int, want: bool) -> tuple:
    node = kernel.nodes[c]
    if node.op in COMPARISONS and len(node.args) == 2:
        return (node.op, _operand(node.args[0]), _operand(node.args[1]), want)
    return ("bool", c, 0.0, want)


def _dead(target: Target, analysis) -> frozenset[str]:
    """The sides the margin cannot reach: by its interval, or, for a value against a
    bound over parts holding it (x against max(x)), by that relation."""
    if target.kind == "mask":
        return frozenset({"band"})  # a bool condition has two sides and no band
    if target.kind in ("subset", "path"):
        return frozenset()
    intervals = analysis.intervals

    def interval(v):
        return intervals[v] if type(v) is int else (float(v), float(v))

    lo_a, hi_a = interval(target.left)
    threshold = magnitude_threshold(target)
    if target.power:  # power * ln|left| over the left's interval
        top = max(abs(lo_a), abs(hi_a))
        low = 0.0 if lo_a <= 0 <= hi_a else min(abs(lo_a), abs(hi_a))
        with np.errstate(divide="ignore"):
            lo, hi = target.power * np.log(low), target.power * np.log(top)
    elif threshold is not None:
        top = max(abs(lo_a), abs(hi_a))
        low = 0.0 if lo_a <= 0 <= hi_a else min(abs(lo_a), abs(hi_a))
        lo, hi, size = low - threshold, top - threshold, threshold
    else:
        lo_b, hi_b = interval(target.right)
        lo, hi = lo_a - hi_b, hi_a - lo_b
        size = max(abs(lo_a), abs(hi_a), abs(lo_b), abs(hi_b))
        if type(target.left) is int and type(target.right) is int:
            limits = analysis.rel.bounded_by(target.left, target.right, (lo_b, hi_b))
            if limits is not None:
                lo, hi = max(lo, limits[0]), min(hi, limits[1])
    if target.kind == "switch":
        size = SWITCH_BAND / BAND
        if not target.power:
            lo, hi = lo / target.unit, hi / target.unit
    if np.isnan(lo) or np.isnan(hi):
        return frozenset()
    dead = set()
    if lo >= 0:
        dead.add("below")
    if hi <= 0:
        dead.add("above")
    if lo > BAND * size or hi < -BAND * size:
        dead.add("band")
    return frozenset(dead)


def magnitude_threshold(target: Target) -> float | None:
    """t where the margin is |x| - t (a count held in bf16, a guard), else None."""
    if target.kind == "guard" or (target.kind == "cast" and target.right == BF16_WHOLE):
        return float(target.right)
    return None


def _key(kernel: Kernel, i: int):
    """The value key a decision is compared by: exact (layouts and float dtypes do not
    change a decision), but native for casts and bf16 values, whose rounding is the
    decision (a count held in bf16 is not the baseline's count held in f32)."""
    term, node = kernel.terms[i], kernel.nodes[i]
    return term.native_key if node.op == "cast" or node.type.dtype == "bf16" else \
        term.exact_key


def _keys(kernel: Kernel) -> set:
    return {_key(kernel, i) for i in range(len(kernel.nodes))}


def _operand(a) -> int | float:
    return float(a.value) if isinstance(a, Const) else a


def _name(kernel: Kernel, a) -> str:
    if isinstance(a, Const):
        return f"{float(a.value):g}"
    node = kernel.nodes[a]
    return node.name or f"%{a}"


def _text(kernel: Kernel, i: int, what: str | None = None) -> str:
    node = kernel.nodes[i]
    where = f"line {node.line}: " if node.line is not None else ""
    if what is None:
        what = f"{node.op}({', '.join(_name(kernel, a) for a in node.args)})"
    return where + what


def _target(kernel: Kernel, i: int, counted, analysis) -> Target | None:
    node = kernel.nodes[i]
    op = node.op
    relations = analysis.rel
    if op in COMPARISONS:
        a, b = node.args
        return Target(i, op, "compare", _text(kernel, i), _operand(a), _operand(b))
    if op in ("maximum", "minimum") and len(node.args) == 2:
        a, b = node.args
        kind = "clamp" if any(isinstance(x, Const) for x in node.args) else "select"
        return Target(i, op, kind, _text(kernel, i), _operand(a), _operand(b))
    if op == "where" and isinstance(node.args[0], int):
        return Target(i, op, "mask", _text(kernel, i), node.args[0], 0.0,
                      branches=(_operand(node.args[1]), _operand(node.args[2])))
    if op == "cast" and isinstance(node.args[0], int):
        dtype = node.attr("dtype")
        if dtype in ("i32", "bool") and kernel.nodes[node.args[0]].type.dtype != "bool":
            return Target(i, op, "cast", _text(kernel, i), node.args[0], 0.0)
    if op in ("reduce_max", "reduce_min", "reduce_sum") and isinstance(node.args[0], int):
        subset = _subset(kernel, i, relations)
        if subset is not None:
            return subset
    if op in ("add", "sub") and len(node.inputs) == 1 and node.type.dtype in ("f32", "bf16"):
        c = next(abs(float(a.value)) for a in node.args if isinstance(a, Const))
        reach = max(abs(v) for v in analysis.intervals[node.inputs[0]])
        if 0 < c <= GUARD_MAX and c < GUARD * reach:  # x + eps: eps matters at its scale
            what = f"{_text(kernel, i)}, a guard {c:g} against {_name(kernel, node.inputs[0])}"
            return Target(i, op, "guard", what, node.inputs[0], c)
    operand = node.args[-1] if op in SWITCHES else None  # a division's divisor
    if type(operand) is int and (op != "div" or len(node.args) == 2):
        slope, value = steep_slope(kernel, operand)
        unit = _numerator_size(node, analysis) if op == "div" else 1.0
        reach = max(abs(v) for v in analysis.intervals[operand]) / unit
        if abs(slope) >= STEEP and reach >= STEEP:
            what = (f"{op}({_name(kernel, operand)}), a switch: "
                    f"{_name(kernel, value)} scaled by {slope:g}")
            return Target(i, op, "switch", _text(kernel, i, what), operand, 0.0, unit=unit)
        if reach >= REACH_ALONE:  # steep however it is written: a tensor of 1e30, a sum
            what = (f"{op}({_name(kernel, operand)}), a switch: reaching {reach:.3g} "
                    f"times its band's unit")
            return Target(i, op, "switch", _text(kernel, i, what), operand, 0.0, unit=unit)
    if i in counted and node.type.dtype == "bf16":  # a count held in bf16: past 256?
        what = f"{_name(kernel, i)} = {node.op}(...), a count held in bf16"
        return Target(i, op, "cast", _text(kernel, i, what), i, BF16_WHOLE)
    return None


def _moved(node) -> bool:
    """Whether the node hands on its operand's values, only moved (a cast to a float
    type among them: a truncation is a decision of its own)."""
    return node.op in VIEW_OPS and type(node.args[0]) is int and (
        node.op != "cast" or node.type.dtype in ("f32", "bf16"))


def _numerator_size(node, analysis) -> float:
    """The largest magnitude a division's numerator reaches (1 where it is unknown or 0):
    a / d is live, neither flushed towards 0 nor past a's size, where |d| is within
    SWITCH_BAND of it (1e-45 / (c + 1e-45) is 1 at c = 0 and negligible from c = 1e-43)."""
    a = node.args[0]
    size = abs(float(a.value)) if isinstance(a, Const) else max(
        abs(v) for v in analysis.intervals[a])
    return size if 0 < size < np.inf else 1.0


def _squared(node) -> tuple[int, ...]:
    """The value node squares (mul(a, a)) or passes on unchanged in a chain of
    squarings, if any."""
    if node.op == "mul" and len(node.args) == 2 and node.args[0] == node.args[1] and \
            type(node.args[0]) is int:
        return (node.args[0],)
    if _moved(node) and node.type.dtype in ("f32", "bf16"):
        return (node.args[0],)
    return ()


def _squaring(kernel: Kernel, i: int) -> Target | None:
    """A switch made by squaring a value n times, 2^n >= STEEP: w^(2^n) is 1 where
    |w| = 1 and flushes to 0 or overflows to inf as soon as |w| leaves 1 by about
    1 / 2^n, exp(2^n ln|w|) with no constant to show the slope."""
    squarings, node = 0, i
    while (below := _squared(kernel.nodes[node])):
        squarings += kernel.nodes[node].op == "mul"
        node = below[0]
    if squarings == 0 or 2.0 ** squarings < STEEP:
        return None
    power = 2.0 ** squarings
    what = (f"{_name(kernel, node)} squared {squarings} times, a switch: "
            f"exp({power:g} ln|{_name(kernel, node)}|)")
    return Target(i, "mul", "switch", _text(kernel, i, what), node, 0.0, power=power)


def steep_slope(kernel: Kernel, arg: int) -> tuple[float, int]:
    """(k, v) where arg is k * v + c through constant scales, shifts, negations, sums
    and magnitudes (k 1 and v arg when it is none of those)."""
    slope, node = 1.0, arg
    while True:
        n = kernel.nodes[node]
        if _moved(n) or (n.op == "reduce_sum" and type(n.args[0]) is int):  # sums too
            node = n.args[0]
        elif n.op == "abs":
            slope, node = abs(slope), n.args[0]
        elif (step := affine_step(n)) is not None:  # scales, shifts and negations
            slope, node = slope * step[0], n.inputs[0]
        else:
            break
        if not np.isfinite(slope) or slope == 0:
            break
    return slope, node


def _subset(kernel: Kernel, i: int, relations) -> Target | None:
    """A reduction over some of the columns of a value (its view cuts the reduced
    axis): the rest of the row may hold what the reduction misses."""
    node = kernel.nodes[i]
    src = node.args[0]
    axis = node.attr("axis") % len(kernel.nodes[src].type.shape)
    base, bounds = relations.views.get(src, (src, None))
    if base == src or bounds is None or relations.images.get(src) != (1.0, 0.0):
        return None
    full = kernel.nodes[base].type.shape
    if len(full) != len(bounds) or bounds[axis] == (0, full[axis]):
        return None
    others = [b for k, b in enumerate(bounds) if k != axis]
    if any(b != (0, full[k]) for k, b in enumerate(bounds) if k != axis) and others:
        return None  # rows cut too: the rest of the row is not this one's
    what = f"{node.op} over columns {bounds[axis][0]}:{bounds[axis][1]} of " \
           f"{_name(kernel, base)}'s {full[axis]}"
    return Target(i, node.op, "subset", _text(kernel, i, what), src, 0.0, base=base,
                  axis=axis, columns=bounds[axis])


# ---------------------------------------------------------------------------------
# margins
# ---------------------------------------------------------------------------------

def margin(target: Target, values: dict[int, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(margin, size) per element for one input: the sign says the side, and the band
    is |margin| <= BAND * size (or margin == 0)."""
    def value(v):
        return np.asarray(values[v], np.float64) if isinstance(v, int) and not isinstance(
            v, bool) else np.float64(v)

    with np.errstate(all="ignore"):
        if target.kind == "path":
            return _path_margin(target, value)
        if target.kind == "mask":
            cond = np.asarray(values[target.left], bool)
            m = np.where(cond, 1.0, -1.0)
            if target.branches:  # only where the choice changes the value
                x, y = (value(b) for b in target.branches)
                m = np.where(np.broadcast_to(x != y, np.broadcast_shapes(
                    m.shape, np.shape(x), np.shape(y))), m, np.nan)
            return m, np.ones_like(m)
        if target.kind == "switch":  # the operand itself, its band SWITCH_BAND wide
            x = np.nan_to_num(value(target.left), nan=0.0)
            if target.power:  # a chain of squarings: the exponent it raises e to
                x = np.nan_to_num(target.power * np.log(np.abs(x)), nan=0.0)
            else:
                x = x / target.unit
            return x, np.full_like(x, SWITCH_BAND / BAND)
        threshold = magnitude_threshold(target)
        if threshold is not None:
            x = value(target.left)
            size = np.maximum(np.abs(x), threshold) if target.kind == "guard" else \
                np.full_like(x, threshold)
            return np.abs(x) - threshold, size
        if target.kind == "cast":
            x = value(target.left)
            return x, np.ones_like(x)
        if target.kind == "subset":
            return _subset_margin(target, value(target.base))
        a, b = value(target.left), value(target.right)
        m = np.nan_to_num(a - b, nan=0.0)
        size = np.maximum(np.abs(a), np.abs(b))
        return m, np.nan_to_num(np.broadcast_to(size, m.shape), nan=0.0, posinf=0.0)


def _path_margin(target: Target, value):
    """Above 0 where every condition of the path has the truth it wants: the least of
    their truth margins (a comparison's distance past its boundary, the wanted way)."""
    margins, sizes = [], []
    for op, a, b, want in target.conds:
        if op == "bool":
            m, size = np.where(np.asarray(value(a), bool), 1.0, -1.0), np.float64(1.0)
        else:
            x, y = value(a), value(b)
            m = {"gt": x - y, "ge": x - y + 0.0, "lt": y - x, "le": y - x + 0.0,
                 "eq": -np.abs(x - y)}[op]
            size = np.maximum(np.abs(x), np.abs(y))
            if op in ("ge", "le", "eq"):  # true at equality: count it past the boundary
                m = np.where(m == 0, np.maximum(size, 1e-300) * BAND, m)
        margins.append(m if want else -m)
        sizes.append(size)
    shape = np.broadcast_shapes(*[np.shape(m) for m in margins])
    m = np.min([np.broadcast_to(x, shape) for x in margins], axis=0)
    size = np.max([np.broadcast_to(s, shape) for s in sizes], axis=0)
    return np.nan_to_num(m, nan=-np.inf), size


def _subset_margin(target: Target, base: np.ndarray):
    """Above 0 where the columns left out hold what the reduction should have seen: a
    larger value (max), a smaller one (min), a larger magnitude (sum)."""
    axis, (lo, hi) = target.axis, target.columns
    inside = np.take(base, np.arange(lo, hi), axis=axis)
    rest = np.delete(base, np.arange(lo, hi), axis=axis)
    if target.op == "reduce_max":
        m = rest.max(axis=axis) - inside.max(axis=axis)
    elif target.op == "reduce_min":
        m = inside.min(axis=axis) - rest.min(axis=axis)
    else:
        m = np.abs(rest).max(axis=axis) - np.abs(inside).max(axis=axis)
    size = np.maximum(np.abs(inside).max(axis=axis), np.abs(rest).max(axis=axis))
    return np.nan_to_num(m, nan=0.0), size


def assess(target: Target, values: dict[int, np.ndarray]) -> dict[str, float]:
    """Per side, from one input's values: minus the nearest approach to the boundary
    among elements on that side (-0.0 for the band) where the side is reached, so the
    input closest to the boundary scores highest; else the distance still to go, >
    0, relative to the operands' size, so a search can descend on it."""
    m, size = margin(target, values)
    scale = np.maximum(size, 1e-300)
    with np.errstate(all="ignore"):
        near = np.abs(m) / scale
        in_band = (m == 0) | (np.abs(m) <= BAND * size)
    out = {}
    for side, on in (("below", m < 0), ("above", m > 0)):
        if on.any():
            out[side] = -float(near[on].min())
        else:
            out[side] = _least(near) if side in ("below", "above") else np.inf
    if target.kind in ("mask", "path"):
        out["band"] = np.inf
    elif in_band.any():
        out["band"] = -0.0
    else:
        out["band"] = _least(np.maximum(near - BAND, 0.0))
    return out


def _least(d: np.ndarray) -> float:
    d = np.where(np.isfinite(d), d, np.inf)
    return max(float(d.min()), 1e-300) if d.size else float("inf")
