"""Relations between values that plain intervals forget (the range analysis's memory).

One interval per value cannot say that x - max(x) is never positive, which every
softmax-like kernel relies on. This module keeps, beside ranges.py's intervals, what is
known about how values relate, reasoning about *terms* rather than names:

- identity: two nodes with the same hash-consed native value key (leir/terms.py) hold
  the same bits, however the kernel names them, so x * x is a square also when the two
  factors are written out twice, and a tile's scores recomputed for its exp are the
  scores its max was taken of;
- images: a value made from another by multiplying or dividing by a constant, adding
  one, or negating is an affine image s * v + o of it, so max(x) / c is the max of
  x / c, and -min(-x) is max(x); a value and a bound of an image with the same scale
  and another offset differ by the offsets' gap (x - (max(x) - 16) is at most 16);
- parts: some columns (along one axis) of the image of a value, in given rows; loads,
  stores, relayouts, slices and widening casts move a value's columns and rows but keep
  it the same value;
- bounds: reduce_max / reduce_min / reduce_sum (of non-negative values) of a part, and
  maximum()/minimum()/add of bounds of one kind, are the max / min / sum over the union
  of their parts (the tiles of a flash-decoding kernel, each its own matmul); so is
  maximum(bound, v) where v never wins (a running max started from -inf), a reduction
  over groups of a reshape that splits the axis then over the groups, and a reduction
  of a transposed value transposed back; a max or min rounded to a narrower float is
  the bound within half an ulp (its spread);
- peaks: x - (a max bound over parts holding x), or x + (a min bound of -x), is at
  most 0 (the gap, the spread) and, across the bound's
  parts, 0 once per row; so is a tile's max minus the max over all tiles. Monotone maps
  (exp, positive scales) keep a peak, a non-negative factor scales it, and sums of
  peaked non-negative values over parts that together cover the bound are at least the
  smallest peak value: a softmax's row sum, whole, as tiles' partial sums added, or as
  tile sums rescaled by exp(m_t - m) and added (online softmax), is at least 1;
- shares: x / s lies in [0, 1] where x >= 0 and s > 0 is a sum over parts holding x's
  columns, or a partial sum over some of s's parts (a partial sum by the total).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

import ml_dtypes
import numpy as np

from stochopt.leir.ir import Kernel, Node
from stochopt.leir.rules import Const

Image = tuple[float, float]  # (scale, offset): the value is scale * base + offset
IDENTITY: Image = (1.0, 0.0)
# images that differ by less than this (relative) are taken as one (1/c written as a
# rounded literal): the shift by such a bound is "at most" a rounding's worth above 0
IMAGE_SLACK = 1e-6
# a narrowing cast to these floats: (relative error of a round to nearest, half the
# smallest subnormal), so |v - cast(v)| <= unit * |v| + least
ROUNDING = {dt: (float(ml_dtypes.finfo(t).eps) / 2,
                 float(ml_dtypes.finfo(t).smallest_subnormal) / 2)
            for dt, t in (("bf16", ml_dtypes.bfloat16), ("f32", np.float32))}


@dataclass(frozen=True, order=True)
class Part:
    """Columns `covered` along `axis` of the image `image` of value `base`, in the rows
    `others` (the bounds of the other axes, in base's coordinates)."""
    base: int
    axis: int
    others: tuple
    covered: tuple[tuple[int, int], ...]
    image: Image = IDENTITY


@dataclass(frozen=True)
class Bound:
    """This value is, row by row, the maximum ("max"), the minimum ("min") or the sum of
    non-negative elements ("sum") of its parts. Max and min bounds are attained in their
    parts: two bounds with the same parts hold the same values."""
    kind: str
    parts: tuple[Part, ...]   # as union() leaves them: sorted, columns merged
    # the value lies within this of the exact max / min / sum of its parts (a max
    # rounded to bf16): 0 where it is exact
    spread: float = 0.0

    def part_of(self, base: int, bounds: tuple, axis: int, image: Image) -> Part | None:
        """The part holding the view (base, bounds) of an image of base with the same
        scale along axis, if any (its offset may differ: max(x - 16) against x)."""
        others = bounds[:axis] + bounds[axis + 1:]
        for part in self.parts:
            if ((part.base, part.axis, part.others) == (base, axis, others)
                    and _same_scale(part.image, image) and _inside(bounds[axis], part.covered)):
                return part
        return None

    def holds(self, other: Bound) -> bool:
        """Every part of `other` lies inside a part of this bound."""
        return all(any((p.base, p.axis, p.others) == (q.base, q.axis, q.others)
                       and _same_image(p.image, q.image)
                       and all(_inside(c, q.covered) for c in p.covered)
                       for q in self.parts) for p in other.parts)

    def mapped(self, image: Image) -> Bound | None:
        """The bound of the image scale * this + offset: a max (min) of parts is the max
        (min, for a negative scale) of their images; a sum scales by a positive factor."""
        scale, offset = image
        if scale == 0 or (self.kind == "sum" and (scale < 0 or offset != 0)):
            return None
        kind = self.kind if scale > 0 else {"max": "min", "min": "max"}[self.kind]
        return Bound(kind, union(tuple(replace(p, image=compose(image, p.image))
                                       for p in self.parts)), self.spread * abs(scale))

    def rounded(self, error: float) -> Bound | None:
        """The bound once rounded to a narrower type, within `error` of it (a max or a
        min; a rounded sum is no longer at least each of its terms)."""
        return None if self.kind == "sum" else replace(self, spread=self.spread + error)


@dataclass(frozen=True)
class Peak:
    """A value computed from x - bound by monotone steps, or a sum of such values along
    the axis: `pieces` are parts of the bound, each with a value this takes (at least)
    where the bound is attained in that part. Since the bound is attained in its parts,
    sums whose pieces together cover all of them are, in every row, at least the
    smallest piece value."""
    axis: int
    bound: Bound
    pieces: tuple[tuple[Part, float], ...]

    def least(self) -> float | None:
        """The smallest piece value, when the pieces cover the bound's parts."""
        if union(tuple(part for part, _ in self.pieces)) != self.bound.parts:
            return None
        return min(value for _, value in self.pieces)

    def scaled(self, f) -> Peak:
        return Peak(self.axis, self.bound, tuple((p, f(v)) for p, v in self.pieces))


def union(parts: tuple[Part, ...]) -> tuple[Part, ...]:
    """Parts of one image, rows and axis joined into one part with columns merged."""
    grouped: dict[tuple, tuple] = {}
    for part in parts:
        key = (part.base, part.axis, part.others, part.image)
        grouped[key] = grouped.get(key, ()) + part.covered
    return tuple(sorted(Part(b, a, o, _merge(c), i) for (b, a, o, i), c in grouped.items()))


def canonical_nodes(kernel: Kernel) -> list[int]:
    """For each node, the first node with the same native value key: the same bits."""
    first: dict[int, int] = {}
    out = []
    for i, term in enumerate(kernel.terms):
        out.append(first.setdefault(id(term.native_key), i))
    return out


class Relations:
    """The relations of ranges._Analysis's values, node by node (module doc). Every
    method is called on node i once its operands are known, with their intervals."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.same = canonical_nodes(kernel)
        self.views: dict[int, tuple[int, tuple]] = {}   # node -> (base node, bounds)
        self.images: dict[int, Image] = {}
        self.bounds: dict[int, Bound] = {}
        self.peaks: dict[int, Peak] = {}       # elementwise values x - bound, exp of them
        self.peak_sums: dict[int, Peak] = {}   # their sums along the axis; tiles' shifts
        self.inverses: dict[int, int] = {}     # reciprocal(v) -> v
        # transpose(value j, perm) -> (j, perm); j < 0 keys the facts of a reduction of
        # an untransposed value, which its transpose back takes
        self.permuted: dict[int, tuple[int, tuple]] = {}
        self.split: dict[int, tuple[int, int]] = {}  # reshape splitting v's axis -> (v, axis)
        # a reduction over the groups of a split axis -> (kind, v, axis, keepdims)
        self.grouped: dict[int, tuple[str, int, int, bool]] = {}

    def copy(self, i: int, source: int) -> None:
        """Node i holds the same value as source: it has all of its relations."""
        for facts in (self.views, self.images, self.bounds, self.peaks, self.peak_sums,
                      self.inverses, self.permuted, self.split, self.grouped):
            if source in facts:
                facts[i] = facts[source]

    def start(self, i: int, node: Node) -> None:
        self.views[i] = (i, tuple((0, s) for s in node.type.shape))
        self.images[i] = IDENTITY

    def squares(self, node: Node) -> bool:
        """a * a, the two factors the same value however they are written."""
        a, b = node.args
        return isinstance(a, int) and isinstance(b, int) and self.same[a] == self.same[b]

    # -- values that keep their base --------------------------------------------
    def movement(self, i: int, node: Node, widening: bool, interval) -> None:
        """Loads, stores, relayouts, slices and widening casts keep the value; a
        broadcast of the same rank keeps its facts (facts name axes by number); a
        narrowing cast keeps a max (min) bound, rounded; transposes and reshapes are
        remembered for the reductions over them."""
        src, op = node.args[0], node.op
        if op in ("load", "store", "relayout", "cast", "slice") and widening:
            base, bounds = self.views[src]
            if op == "slice":
                bounds = tuple((b0 + lo, b0 + hi) for (b0, _), (lo, hi)
                               in zip(bounds, node.attr("bounds"), strict=True))
            self.views[i] = (base, bounds)
            self.images[i] = self.images[src]
        if op == "slice" and src in self.peaks:
            self._slice_peak(i, node)
        same_rank = len(node.type.shape) == len(self.kernel.nodes[src].type.shape)
        if (op in ("relayout", "store", "load") or (op == "broadcast_to" and same_rank)
                or (op == "cast" and widening)):
            for facts in (self.bounds, self.peaks, self.peak_sums):
                if src in facts:
                    facts[i] = facts[src]
        elif op == "cast" and src in self.bounds and node.type.dtype in ROUNDING:
            # a max rounded to a narrower float: within half an ulp of it
            unit, least = ROUNDING[node.type.dtype]
            error = unit * max(abs(interval[0]), abs(interval[1])) + least
            rounded = self.bounds[src].rounded(error) if np.isfinite(error) else None
            if rounded is not None:
                self.bounds[i] = rounded
        if op == "transpose":
            self._transpose(i, node)
        if op == "reshape":
            self._reshape(i, node)

    def _slice_peak(self, i: int, node: Node) -> None:
        """Some columns of a peaked value (e[:, 0:256] of e = exp(x - m)) hold the peak
        where the bound is attained in those columns: its one piece, cut alike."""
        peak = self.peaks[node.args[0]]
        if len(peak.pieces) != 1:
            return
        (part, value), = peak.pieces
        if len(part.covered) != 1:
            return
        cut = node.attr("bounds")
        start = part.covered[0][0]
        others = tuple((o0 + lo, o0 + hi) for (o0, _), (lo, hi)
                       in zip(part.others, cut[:peak.axis] + cut[peak.axis + 1:], strict=True))
        columns = ((start + cut[peak.axis][0], start + cut[peak.axis][1]),)
        self.peaks[i] = Peak(peak.axis, peak.bound,
                             ((replace(part, others=others, covered=columns), value),))

    def affine(self, i: int, node: Node) -> None:
        """x * c, x / c, x + c, x - c, c - x, -x: an image of x (and of x's bound)."""
        image = affine_step(node)
        if image is None:
            return
        x = node.inputs[0]
        self.views[i] = self.views[x]
        self.images[i] = compose(image, self.images[x])
        if x in self.bounds:
            mapped = self.bounds[x].mapped(image)
            if mapped is not None:
                self.bounds[i] = mapped

    # -- bounds ------------------------------------------------------------------
    def part(self, v: int, axis: int) -> Part:
        """The columns of v along axis, as a part of (the image of) v's base."""
        base, bounds = self.views[v]
        return Part(base, axis, bounds[:axis] + bounds[axis + 1:], (bounds[axis],),
                    self.images[v])

    def extreme(self, i: int, node: Node) -> None:
        self._reduction(i, node, "max" if node.op == "reduce_max" else "min")

    def summed(self, i: int, node: Node, nonnegative: bool) -> float | None:
        """reduce_sum: a sum bound of non-negative parts, and a peak sum; returns the
        least the sum can be (its smallest peak), or None."""
        return self._reduction(i, node, "sum") if nonnegative else None

    def _reduction(self, i: int, node: Node, kind: str) -> float | None:
        """A reduction's bound (with keepdims) and, for a sum, its peak sum and least
        value. Over a transposed value it is the reduction of the value transposed (its
        facts wait, under a key of their own, for the transpose back); over the groups
        of a reshaped axis, then over the groups, it is the reduction over the axis."""
        src, axis, keep = node.args[0], node.attr("axis"), node.attr("keepdims")
        split = self.split.get(src)
        if split is not None and axis == split[1] + 1:
            self.grouped[i] = (kind, split[0], split[1], keep)
        grouped, permuted = self.grouped.get(src), self.permuted.get(src)
        if grouped is not None and grouped == (kind, grouped[1], axis, False) and keep:
            src = grouped[1]
        least = None
        if permuted is not None and permuted[0] >= 0 and keep:
            # also the reduction of the untransposed value, transposed
            self.permuted[i] = (-1 - i, permuted[1])
            least = self._reduced(-1 - i, permuted[0], permuted[1][axis], kind, keep)
        direct = self._reduced(i, src, axis, kind, keep)
        return direct if least is None else least if direct is None else max(direct, least)

    def _reduced(self, i: int, src: int, axis: int, kind: str, keep: bool) -> float | None:
        if keep:
            self.bounds[i] = Bound(kind, (self.part(src, axis),))
        peak = self.peaks.get(src)
        if kind == "sum" and peak is not None and peak.axis == axis:
            self.peak_sums[i] = peak
            return peak.least()
        return None

    def _transpose(self, i: int, node: Node) -> None:
        """transpose(v, perm), or of a transposed value: the same value once the
        permutations compose to none."""
        src = node.args[0]
        rank = len(node.type.shape)
        perm = node.attr("perm") or tuple(reversed(range(rank)))
        base, before = self.permuted.get(src, (src, tuple(range(rank))))
        composed = tuple(before[k] for k in perm)
        if composed == tuple(range(rank)):
            self.copy(i, base)
        else:
            self.permuted[i] = (base, composed)

    def _reshape(self, i: int, node: Node) -> None:
        """A reshape that splits one axis into (groups, n) of consecutive columns."""
        before, after = self.kernel.nodes[node.args[0]].type.shape, node.type.shape
        if len(after) != len(before) + 1:
            return
        for a in range(len(before)):
            if (after[:a] == before[:a] and after[a + 2:] == before[a + 1:]
                    and after[a] * after[a + 1] == before[a]):
                self.split[i] = (node.args[0], a)
                return

    def combine(self, i: int, node: Node, intervals: list) -> None:
        """maximum(bound of some parts, bound of others) bounds both; minimum alike. An
        operand that never wins (a running max started from -inf) leaves the other."""
        if len(node.inputs) != 2:
            return
        kind = "max" if node.op == "maximum" else "min"
        for k, winner in enumerate(node.args):
            won, other = intervals[k], intervals[1 - k]
            never_wins = other[1] <= won[0] if kind == "max" else other[0] >= won[1]
            if never_wins and self.kernel.nodes[winner].type.shape == node.type.shape:
                self.copy(i, winner)
                return
        b1, b2 = (self.bounds.get(a) for a in node.args)
        if b1 and b2 and b1.kind == b2.kind == kind and b1.parts[0].axis == b2.parts[0].axis:
            self.bounds[i] = Bound(kind, union(b1.parts + b2.parts),
                                   max(b1.spread, b2.spread))

    def add_sums(self, i: int, node: Node) -> float | None:
        """Two non-negative sums (tiles' partial sums) added: a sum over the union of
        their parts, holding the peaks of both; returns its least value, or None."""
        if len(node.inputs) != 2 or self.same[node.args[0]] == self.same[node.args[1]]:
            return None
        first, second = (self.bounds.get(a) for a in node.args)
        if first and second and first.kind == second.kind == "sum":
            self.bounds[i] = Bound("sum", union(first.parts + second.parts))
        p1, p2 = (self.peak_sums.get(a) for a in node.args)
        if p1 and p2 and p1.axis == p2.axis and p1.bound == p2.bound:
            self.peak_sums[i] = Peak(p1.axis, p1.bound, p1.pieces + p2.pieces)
            return self.peak_sums[i].least()
        return None

    def shift(self, i: int, node: Node, intervals: list) -> tuple[float, float] | None:
        """x - b, or x + b as x - (-b) (-min(-x) is a max), for b a max (min) bound over
        parts holding x, or over more parts than x's own bound: (lo, hi) limits on the
        result (the offsets' gap where x and the bound's part differ by a constant, plus
        the bound's rounding), else None; and the peak it makes."""
        x, b = node.args
        if node.op == "sub":
            pairs = [(x, self.bounds.get(b), intervals[1])]
        else:
            pairs = [(v, self._negated(w), (-intervals[k][1], -intervals[k][0]))
                     for v, w, k in ((x, b, 1), (b, x, 0))]
        for v, bound, bound_interval in pairs:
            found = self._relate(v, bound, bound_interval)
            if found is None:
                continue
            limits, pieces, tiles = found
            if bound.kind == "max":
                # a tile's bound against the bound over all tiles peaks where this tile
                # holds it (a sum-like fact); x against its bound peaks elementwise
                facts = self.peak_sums if tiles else self.peaks
                facts[i] = Peak(bound.parts[0].axis, bound, pieces)
            return limits
        return None

    def _negated(self, b: int) -> Bound | None:
        bound = self.bounds.get(b)
        return None if bound is None else bound.mapped((-1.0, 0.0))

    def bounded_by(self, x: int, b: int, bound_interval) -> tuple[float, float] | None:
        """Limits on x - b where b is a max (min) bound over parts holding x, or over
        more parts than x's own bound of that kind; None where no relation holds."""
        found = self._relate(x, self.bounds.get(b), bound_interval)
        return None if found is None else found[0]

    def _relate(self, x: int, bound: Bound | None, bound_interval):
        """(limits on x - bound, the peak's pieces, whether x is itself a bound over
        some of its parts), or None where no relation holds."""
        if bound is None or bound.kind == "sum":
            return None
        own = self.bounds.get(x)
        if own is not None and own.kind == bound.kind and bound.holds(own):
            spread = own.spread + bound.spread
            return _limits(bound.kind, 0.0, spread), tuple((p, -spread) for p in own.parts), True
        base, bounds = self.views[x]
        axis = bound.parts[0].axis
        part = bound.part_of(base, bounds, axis, self.images[x])
        if part is None:
            return None
        # x = s v + o_x against a bound of s v + o_b: x - bound is o_x - o_b at most (a
        # max) where the bound is attained, give or take its rounding and the scales'
        gap = self.images[x][1] - part.image[1]
        slack = _slack(part.image, self.images[x], bound_interval) + bound.spread
        piece = replace(self.part(x, axis), image=part.image)
        return _limits(bound.kind, gap, slack), ((piece, gap - slack),), False

    def share(self, x: int, total: int, x_interval) -> bool:
        """x / total is in [0, 1]: total is a sum of non-negative values whose parts hold
        x's columns, or x is itself a sum over some of total's parts."""
        bound = self.bounds.get(total)
        if bound is None or bound.kind != "sum" or x_interval[0] < 0:
            return False
        own = self.bounds.get(x)
        if own is not None and own.kind == "sum" and bound.holds(own):
            return True  # a partial sum by the total
        base, bounds = self.views[x]
        part = bound.part_of(base, bounds, bound.parts[0].axis, self.images[x])
        # x = s v + o_x is at most its term s v + o_t of the sum where o_x <= o_t
        return part is not None and self.images[x][1] <= part.image[1]

    # -- peaks -------------------------------------------------------------------
    def scale_peak(self, i: int, node: Node, intervals: list) -> None:
        """A peak times a positive number, or times a non-negative value (its least
        scales the pieces), is a peak too: exp(s - m) * c, l_t * exp(m_t - m)."""
        consts = [a for a in node.args if isinstance(a, Const)]
        tensors = node.inputs
        if len(consts) == 1 and len(tensors) == 1:
            c = float(consts[0].value)
            for facts in (self.peaks, self.peak_sums):
                if tensors[0] in facts and c > 0:
                    facts[i] = facts[tensors[0]].scaled(lambda v: v * c)
            return
        if len(tensors) != 2 or len(node.args) != 2:
            return
        # of the two factors' peaks, keep the one that says most once scaled by the
        # other's least value (l_t's own peak times exp(m_t - m) >= 0 says nothing)
        found = []
        for p, other_interval in ((node.args[0], intervals[1]), (node.args[1], intervals[0])):
            peak = self.peak_sums.get(p)
            if peak is not None and other_interval[0] >= 0 and all(
                    v >= 0 for _, v in peak.pieces):
                found.append(peak.scaled(partial(float.__mul__, float(other_interval[0]))))
        if found:
            self.peak_sums[i] = max(found, key=lambda peak: min(v for _, v in peak.pieces))

    def monotone_peak(self, i: int, node: Node, f) -> None:
        """exp of a peak: the pieces' values mapped by the (increasing) function."""
        src = node.args[0]
        for facts in (self.peaks, self.peak_sums):
            if src in facts:
                facts[i] = facts[src].scaled(lambda v: float(f(v)))


def affine_step(node: Node) -> Image | None:
    """The image this one op makes of its tensor operand, when it is affine in it."""
    op, args = node.op, node.args
    if op == "neg":
        return (-1.0, 0.0)
    if len(args) != 2 or len(node.inputs) != 1:
        return None
    first_is_tensor = isinstance(args[0], int)
    c = float((args[1] if first_is_tensor else args[0]).value)
    if not np.isfinite(c):
        return None
    if op == "mul":
        return (c, 0.0)
    if op == "div" and first_is_tensor and c != 0:
        return (1.0 / c, 0.0)
    if op == "add":
        return (1.0, c)
    if op == "sub":
        return (1.0, -c) if first_is_tensor else (-1.0, c)
    return None


def compose(outer: Image, inner: Image) -> Image:
    """outer(inner(v)) for two affine images."""
    return (outer[0] * inner[0], outer[0] * inner[1] + outer[1])


def _same_image(a: Image, b: Image) -> bool:
    return a == b or (np.isclose(a[0], b[0], rtol=IMAGE_SLACK, atol=0)
                      and np.isclose(a[1], b[1], rtol=IMAGE_SLACK, atol=IMAGE_SLACK))


def _same_scale(a: Image, b: Image) -> bool:
    return a[0] == b[0] or bool(np.isclose(a[0], b[0], rtol=IMAGE_SLACK, atol=0))


def _slack(a: Image, b: Image, bound_interval) -> float:
    """How far x - b may round past the offsets' gap where x's scale only nearly equals
    the bound's (1/c written as a rounded literal)."""
    if a[0] == b[0]:
        return 0.0
    size = max(abs(bound_interval[0]), abs(bound_interval[1])) + abs(a[1])
    return float(2 * IMAGE_SLACK * size) if np.isfinite(size) else float("inf")


def _limits(kind: str, gap: float, slack: float) -> tuple[float, float]:
    """x - bound: at most gap (a max) or at least gap (a min), give or take slack."""
    return (-np.inf, gap + slack) if kind == "max" else (gap - slack, np.inf)


def _merge(parts: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """Column ranges joined where they touch or overlap."""
    out: list[list[int]] = []
    for lo, hi in sorted(parts):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((lo, hi) for lo, hi in out)


def _inside(part: tuple[int, int], covered: tuple[tuple[int, int], ...]) -> bool:
    return any(lo <= part[0] and part[1] <= hi for lo, hi in _merge(covered))
