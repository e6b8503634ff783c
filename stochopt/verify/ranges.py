"""Static range analysis: intervals from the spec's declared input ranges through a kernel.

Every value gets one interval [lo, hi] (over all its elements), computed op by op in
float64 and rounded to the value's own dtype, so exp(-200) is 0 in f32 as the machine
would make it. An op is a *hazard* where its operands' intervals let it overflow the
dtype, divide by (or take rsqrt/log of) an interval holding 0, or make nan (sqrt of a
negative, inf - inf, 0 * inf). A candidate is refused when it has a hazard of a kind
its baseline does not have: the analysis never needs an input, so a stale max shift or
a missing one is caught on every input at once, before any emulation.

Plain intervals forget that x - max(x) is never positive, so the analysis keeps the
relations that softmax-like kernels rely on (docs/verification.md):

- a row bound: reduce_max(v, axis, keepdims) is the maximum of every element of v along
  the axis; maximum() of such bounds is the maximum of the union of their parts, whether
  the parts are slices of one value or separate values (the tiles of a flash-decoding
  kernel, each a matmul's result);
- a row peak: x - (a bound whose parts include x's columns) is <= 0, and across the
  parts of the bound it is 0 once per row (give or take an offset, x - (max - 16), or a
  bf16 rounding of the max); exp and positive scales keep it (at 1), so
  the sums over parts that together cover the bound's parts add up to at least 1;
- a share: x / (a sum of non-negative values whose parts include x's columns) lies in
  [0, 1] where the sum is positive;
- a square: x * x is never negative.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from stochopt.leir.ir import Kernel, Node
from stochopt.leir.rules import Const
from stochopt.spec import Spec
from stochopt.verify.relations import Relations

Interval = tuple[float, float]
FULL: Interval = (-np.inf, np.inf)
LARGEST = {"f32": float(np.finfo(np.float32).max),
           "bf16": float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)}
NATIVE = {"f32": np.float32, "bf16": ml_dtypes.bfloat16}
# hazard kinds, in the order a refusal reports them
OVERFLOW, ZERO_DIVISION, NAN = "overflow", "division by an interval holding 0", "nan"
# how much range_facts widens a declared range to ask whether the kernel relies on it
WIDEN = 10.0


@dataclass(frozen=True)
class Hazard:
    """One op whose operands' intervals let it overflow, divide by 0 or make nan."""
    kind: str
    op: str
    name: str
    line: int | None
    interval: Interval   # the operand interval that allows it
    detail: str

    def describe(self) -> str:
        where = f"line {self.line}: " if self.line is not None else ""
        return (f"{where}{self.op}({self.name}) can {self.detail}: its operand lies in "
                f"[{self.interval[0]:.4g}, {self.interval[1]:.4g}]")


@dataclass
class RangeFacts:
    """What the analysis proves about a kernel under the spec's declared ranges."""
    output: Interval
    hazards: list[Hazard]
    # input name -> hazards that appear when that input's range is widened WIDEN-fold
    # (same centre): the declared ranges the kernel's safety relies on
    relies_on: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"output": [_number(v) for v in self.output],
                "hazards": [h.describe() for h in self.hazards],
                "relies_on": self.relies_on}


def _number(v: float):
    return v if np.isfinite(v) else str(v)


# ---------------------------------------------------------------------------------
# the analysis
# ---------------------------------------------------------------------------------

class _Analysis:
    def __init__(self, kernel: Kernel, ranges: dict[str, Interval]) -> None:
        self.kernel = kernel
        self.ranges = ranges
        self.intervals: list[Interval] = []
        self.rel = Relations(kernel)
        self.hazards: list[Hazard] = []
        # the hazard whose inf or nan may reach this value, and whether nan may
        self.poison: list[Hazard | None] = []
        self.maybe_nan: list[bool] = []
        self.raised: dict[int, Hazard] = {}
        self.current = 0

    def run(self) -> None:
        for i, node in enumerate(self.kernel.nodes):
            same = self.rel.same[i]
            if same != i:  # the same value as an earlier node: the same facts
                self.intervals.append(self.intervals[same])
                self.poison.append(self.poison[same])
                self.maybe_nan.append(self.maybe_nan[same])
                self.rel.copy(i, same)
                continue
            self.rel.start(i, node)
            self.current = i
            self.intervals.append(self._interval(i, node))
            self._poison(i, node)

    # -- helpers ------------------------------------------------------------------
    def _arg(self, a) -> Interval:
        if isinstance(a, Const):
            v = float(a.value)
            return (v, v)
        return self.intervals[a]

    def _hazard(self, kind: str, node: Node, interval: Interval, detail: str) -> None:
        hazard = Hazard(kind, node.op, node.name or f"v{self.current}", node.line, interval,
                        detail)
        self.hazards.append(hazard)
        self.raised.setdefault(self.current, hazard)

    def _poison(self, i: int, node: Node) -> None:
        """Follow a hazard's inf or nan forward while values can still hold it: an
        overflow that a later op absorbs (x / (1 + exp(big)) is 0) poisons nothing."""
        own = self.raised.get(i)
        before = [self.poison[a] for a in node.inputs if self.poison[a] is not None]
        nan = node.type.dtype != "bool" and (
            any(self.maybe_nan[a] for a in node.inputs)
            or (own is not None and own.kind in (NAN, ZERO_DIVISION)))
        lo, hi = self.intervals[i]
        open_ = nan or not (np.isfinite(lo) and np.isfinite(hi))
        self.maybe_nan.append(nan)
        source = before[0] if before else own  # the root cause, not a later symptom
        self.poison.append(source if open_ and node.type.dtype != "bool" else None)

    def _round(self, node: Node, lo: float, hi: float, operands: list[Interval]) -> Interval:
        """The interval in the node's dtype; an overflow hazard where finite operands
        give a value past the dtype's largest finite number."""
        dtype = node.type.dtype
        if dtype not in NATIVE:
            return (lo, hi)
        if np.isnan(lo) or np.isnan(hi):
            return FULL
        with np.errstate(over="ignore"):
            lo_d = float(NATIVE[dtype](lo))
            hi_d = float(NATIVE[dtype](hi))
        finite_in = all(np.isfinite(v) for iv in operands for v in iv)
        if finite_in and not (np.isfinite(lo_d) and np.isfinite(hi_d)):
            worst = operands[0] if operands else (lo, hi)
            self._hazard(OVERFLOW, node, worst,
                         f"overflow {dtype} (a result up to {max(abs(lo), abs(hi)):.4g}, "
                         f"past {LARGEST[dtype]:.4g})")
        return (lo_d, hi_d)

    # -- one node -------------------------------------------------------------------
    def _interval(self, i: int, node: Node) -> Interval:
        op = node.op
        if node.type.dtype == "bool":
            return (0.0, 1.0)
        if op == "input":
            return self.ranges.get(node.attr("name"), FULL)
        if op == "full":
            v = float(node.attr("value"))
            return (v, v)
        args = [self._arg(a) for a in node.args]
        if op in ("load", "store", "relayout", "slice", "cast", "broadcast_to",
                  "transpose", "reshape"):
            return self._movement(i, node, args)
        if op == "concat":
            return (min(a[0] for a in args), max(a[1] for a in args))
        if op in ("reduce_max", "reduce_min"):
            self.rel.extreme(i, node)
            return args[0]
        if op == "reduce_sum":
            return self._sum(i, node, args[0])
        if op == "matmul":
            k = self.kernel.nodes[node.args[0]].type.shape[-1]
            lo, hi = _mul(args[0], args[1])
            return self._round(node, min(k * lo, lo), max(k * hi, hi), args)
        if op == "where":
            return (min(args[1][0], args[2][0]), max(args[1][1], args[2][1]))
        self.rel.affine(i, node)
        return self._elementwise(i, node, args)

    def _movement(self, i: int, node: Node, args: list[Interval]) -> Interval:
        src = node.args[0]
        op = node.op
        if op == "cast" and node.type.dtype == "i32":
            return (max(np.trunc(args[0][0]), -2.0**31), min(np.trunc(args[0][1]), 2.0**31 - 1))
        source_dtype = self.kernel.nodes[src].type.dtype
        widening = op != "cast" or source_dtype == node.type.dtype or (
            source_dtype == "bf16" and node.type.dtype == "f32")
        self.rel.movement(i, node, widening, args[0])
        if op == "cast":
            return self._round(node, args[0][0], args[0][1], args)
        return args[0]

    def _sum(self, i: int, node: Node, x: Interval) -> Interval:
        axis = node.attr("axis")
        n = self.kernel.nodes[node.args[0]].type.shape[axis]
        lo, hi = n * x[0], n * x[1]  # n terms, each in [x0, x1]
        least = self.rel.summed(i, node, x[0] >= 0)
        if least is not None:  # a sum of non-negative terms holding a peak in every row
            lo = max(lo, least)
        return self._round(node, lo, hi, [x])

    def _elementwise(self, i: int, node: Node, args: list[Interval]) -> Interval:
        op = node.op
        if op in ("gt", "ge", "lt", "le", "eq"):
            return (0.0, 1.0)
        if op in ("maximum", "minimum"):
            self.rel.combine(i, node, args)
            pick = max if op == "maximum" else min
            return (pick(args[0][0], args[1][0]), pick(args[0][1], args[1][1]))
        if op in ("add", "sub"):
            return self._add(i, node, args)
        if op == "mul":
            same = len(node.inputs) == 2 and self.rel.squares(node)
            if len(node.inputs) == 2 and not same:
                for x, r in (node.args, node.args[::-1]):
                    total = self.rel.inverses.get(r)
                    if total is not None and self.rel.share(x, total, self.intervals[x]):
                        if self.intervals[total][0] > 0 and np.isfinite(self.intervals[x][1]):
                            return (0.0, 1.0)  # x * reciprocal(sum holding x)
            lo, hi = _square(args[0]) if same else _mul(args[0], args[1])
            a, b = args
            if (_holds_zero(a) and _holds_inf(b)) or (_holds_zero(b) and _holds_inf(a)):
                self._hazard(NAN, node, args[0], "make nan (0 * inf)")
            self.rel.scale_peak(i, node, args)
            return self._round(node, lo, hi, args)
        if op == "div":
            return self._divide(node, args[0], args[1])
        return self._unary(i, node, args[0])

    def _add(self, i: int, node: Node, args: list[Interval]) -> Interval:
        a, b = args
        if node.op == "sub":
            b = (-b[1], -b[0])
        if (a[1] == np.inf and b[0] == -np.inf) or (a[0] == -np.inf and b[1] == np.inf):
            self._hazard(NAN, node, args[0], "make nan (inf - inf)")
        lo, hi = a[0] + b[0], a[1] + b[1]
        if len(node.inputs) == 2:
            limits = self.rel.shift(i, node, args)
            if limits is not None:
                lo, hi = max(lo, limits[0]), min(hi, limits[1])
        if node.op == "add" and a[0] >= 0 and b[0] >= 0:
            least = self.rel.add_sums(i, node)
            if least is not None:
                lo = max(lo, least)
        return self._round(node, lo, hi, args)

    def _divide(self, node: Node, a: Interval, b: Interval) -> Interval:
        if (node.op == "div" and len(node.inputs) == 2
                and self.rel.share(node.args[0], node.args[1], a)
                and b[0] > 0 and np.isfinite(a[1])):
            return (0.0, 1.0)  # a finite share of a row's positive sum
        if b[0] <= 0 <= b[1]:
            self._hazard(ZERO_DIVISION, node, b, "divide by zero")
            return FULL
        if any(np.isinf(v) for v in a) and any(np.isinf(v) for v in b):
            self._hazard(NAN, node, b, "make nan (inf / inf)")
        lo, hi = _mul(a, (1.0 / b[1], 1.0 / b[0]))
        return self._round(node, lo, hi, [a, b])

    def _unary(self, i: int, node: Node, x: Interval) -> Interval:
        op = node.op
        lo, hi = x
        if op == "neg":
            return (-hi, -lo)
        if op == "abs":
            return (0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi)), max(abs(lo), abs(hi)))
        if op == "exp":
            self.rel.monotone_peak(i, node, np.exp)
            with np.errstate(over="ignore"):
                return self._round(node, float(np.exp(lo)), float(np.exp(hi)), [x])
        if op == "tanh":
            return (float(np.tanh(lo)), float(np.tanh(hi)))
        if op in ("sqrt", "rsqrt", "log"):
            if lo < 0:
                self._hazard(NAN, node, x, "make nan (a negative operand)")
                lo = 0.0
            if op != "sqrt" and lo <= 0:
                self._hazard(ZERO_DIVISION, node, x,
                             "divide by zero" if op == "rsqrt" else "give -inf (log of 0)")
                return FULL if op == "rsqrt" else (-np.inf, float(np.log(hi)) if hi > 0
                                                   else -np.inf)
            with np.errstate(divide="ignore"):
                if op == "sqrt":
                    return self._round(node, float(np.sqrt(lo)), float(np.sqrt(hi)), [x])
                if op == "rsqrt":
                    return self._round(node, 1 / float(np.sqrt(hi)), 1 / float(np.sqrt(lo)),
                                       [x])
                return self._round(node, float(np.log(lo)), float(np.log(hi)), [x])
        if op == "reciprocal":
            self.rel.inverses[i] = node.args[0]
            return self._divide(node, (1.0, 1.0), x)
        return FULL  # an op the analysis does not know: no claim


def _mul(a: Interval, b: Interval) -> Interval:
    with np.errstate(invalid="ignore"):
        products = [a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1]]
    products = [0.0 if np.isnan(p) else p for p in products]
    return (min(products), max(products))


def _holds_zero(a: Interval) -> bool:
    return a[0] <= 0 <= a[1]


def _holds_inf(a: Interval) -> bool:
    return bool(np.isinf(a[0]) or np.isinf(a[1]))


def _square(a: Interval) -> Interval:
    top = max(a[0] * a[0], a[1] * a[1])
    return (0.0 if a[0] <= 0 <= a[1] else min(a[0] * a[0], a[1] * a[1]), top)


# ---------------------------------------------------------------------------------
# public functions
# ---------------------------------------------------------------------------------

def declared_ranges(spec: Spec) -> dict[str, Interval]:
    return {name: t.bounds for name, t in spec.inputs.items()}


@dataclass(frozen=True)
class Analysis:
    output: Interval
    hazards: list[Hazard]
    poison: Hazard | None  # the hazard whose inf or nan can reach the output


def analyze(kernel: Kernel, ranges: dict[str, Interval]) -> Analysis:
    """The output's interval, every hazard, and the one that can reach the output."""
    analysis = _Analysis(kernel, ranges)
    analysis.run()
    return Analysis(analysis.intervals[kernel.output], analysis.hazards,
                    analysis.poison[kernel.output])


def range_refusal(kernel: Kernel, baseline: Kernel, spec: Spec) -> Hazard | None:
    """The hazard whose inf or nan can reach the kernel's output, where no hazard's can
    reach the baseline's: None when the analysis finds no such difference."""
    ranges = declared_ranges(spec)
    if analyze(baseline, ranges).poison is not None:
        return None
    return analyze(kernel, ranges).poison


def range_facts(kernel: Kernel, spec: Spec) -> RangeFacts:
    """The kernel's output interval, its hazards under the declared ranges, and which
    declared input ranges keep it free of the hazards it would have on wider ones."""
    ranges = declared_ranges(spec)
    found = analyze(kernel, ranges)
    known = {_key(h) for h in found.hazards}
    relies: dict[str, list[str]] = {}
    for name, t in spec.inputs.items():
        if t.dtype == "bool":
            continue
        lo, hi = ranges[name]
        centre, half = (lo + hi) / 2, (hi - lo) / 2
        wider = dict(ranges)
        wider[name] = (centre - WIDEN * half, centre + WIDEN * half)
        new = [h.describe() for h in analyze(kernel, wider).hazards if _key(h) not in known]
        if new:
            relies[name] = new
    return RangeFacts(found.output, found.hazards, relies)


def _key(hazard: Hazard) -> tuple:
    return (hazard.kind, hazard.op, hazard.name, hazard.line)


def slice_views(kernel: Kernel) -> list[tuple[str, tuple]]:
    """(input name, bounds in the input's coordinates) for every slice the kernel takes
    of an input, through loads, relayouts and widening casts: where it cuts its data."""
    analysis = _Analysis(kernel, {})
    analysis.run()
    out = []
    for i, node in enumerate(kernel.nodes):
        base, bounds = analysis.rel.views[i]
        if node.op == "slice" and kernel.nodes[base].op == "input":
            out.append((kernel.nodes[base].attr("name"), bounds))
    return out
