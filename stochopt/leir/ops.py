"""The LEIR op table: one entry per op, holding everything that knows about that op.

An entry gives the op's parameters (read by the parser and the renderer), the Python
operator that spells it, its type and layout rule (rules.py), its exact numpy meaning
and, where the machine rounds differently from computing once and rounding the result,
its native numerics; its cost rule (leir/cost_rules.py), its tiling rule
(tiling_rules.py) and the one-line doc that docs/leir.md and the LLM prompts show.
Every stage reads these, and the sets other modules need (the unary elementwise ops, the
ops that take a layout, an op's siblings) are derived from them. Adding an op is adding
an entry: docs/leir.md, "Adding an op", lists what one holds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, cached_property, partial
from typing import Any

import numpy as np

from stochopt.leir import cost_rules as C
from stochopt.leir import rules as R
from stochopt.leir import tiling_rules as T
from stochopt.leir.types import bfloat16

REQUIRED = object()

# parameter kinds: how the parser reads an argument and the renderer writes it
TENSOR, TENSORS, LAYOUT, DTYPE, AXIS, BOOL, SHAPE, PERM, BOUNDS = (
    "tensor", "tensors", "layout", "dtype", "axis", "bool", "shape", "perm", "bounds")

# op kinds, as in the language reference
MOVEMENT, ELEMENTWISE, REDUCTION, CONTRACTION, SHAPE_OP, CONSTANT, INPUT = (
    "movement", "elementwise", "reduction", "contraction", "shape", "constant", "input")

# the operator spelling x[a:b] (a subscript), for the op whose parameter is its bounds
SUBSCRIPT = "[]"


@dataclass(frozen=True)
class Param:
    name: str
    kind: str
    default: Any = REQUIRED


@dataclass(frozen=True)
class Op:
    """One LEIR op: everything any stage knows about it (docs/leir.md, "Adding an op")."""
    name: str
    kind: str
    params: tuple[Param, ...]
    doc: str
    infer: Callable      # type rule: (op, input types, attrs, machine, names) -> TensorType
    evaluate: Callable   # exact meaning: (args, attrs) -> np.ndarray (float64 in, exact)
    cost: Callable       # cost rule: (machine, input types, output type, attrs) -> Work
    tiling: Callable     # tiling rule (tiling_rules.py): (ins, out, attrs, axis) -> axes
    # native numerics, only where the machine does not compute ``evaluate`` in float32
    # and round once to the result's dtype: (args in float32, attrs, dtype) -> np.ndarray
    native: Callable | None = None
    operator: str | None = None   # the Python operator the parser reads as this op
    written_as_operator: bool = False  # the renderer writes the operator, not a call

    # made once per entry: re-typing a node reads them
    @cached_property
    def tensor_params(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.kind in (TENSOR, TENSORS))

    @cached_property
    def static_params(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.kind not in (TENSOR, TENSORS))


OPS: dict[str, Op] = {}


def register(op: Op) -> Op:
    """Add an op to the table (or replace the entry of that name); the derived sets
    below are recomputed on their next use."""
    OPS[op.name] = op
    _forget_derived()
    return op


def unregister(name: str) -> None:
    """Remove an op from the table (a test's made-up op, once the test is done)."""
    del OPS[name]
    _forget_derived()


# ---------------------------------------------------------------------------------
# derived from the table: what other modules would otherwise keep their own lists of
# ---------------------------------------------------------------------------------

@cache  # asked on every mutation; recomputed after register()
def siblings(name: str) -> tuple[str, ...]:
    """Ops that can stand in for this one: same kind and same parameters."""
    op = OPS[name]
    return tuple(o.name for o in OPS.values()
                 if o.name != name and o.kind == op.kind
                 and [p.kind for p in o.params] == [p.kind for p in op.params])


@cache
def unary_elementwise() -> frozenset[str]:
    """Elementwise ops of one tensor operand (neg, exp, ..., cast): each output element
    depends on the same element of the operand only."""
    return frozenset(o.name for o in OPS.values()
                     if o.kind == ELEMENTWISE and len(o.tensor_params) == 1)


@cache
def layout_ops() -> tuple[str, ...]:
    """Ops that take a layout argument (load, relayout, full): where a layout is chosen."""
    return tuple(o.name for o in OPS.values() if any(p.kind == LAYOUT for p in o.params))


@cache
def operator_op(operator: str, operands: int) -> str | None:
    """The op the parser reads for a Python operator with this many operands: "-" with
    one is neg, with two sub; None when no op is spelled that way."""
    return next((o.name for o in OPS.values() if o.operator == operator
                 and len(o.tensor_params) == operands), None)


# what other modules remember of the rules' results (the type, cost and edit caches of
# ir.py, node_work.py and edit.py): forgotten with the rest when the table changes
FORGET_ON_CHANGE: list[Callable[[], None]] = []


def _forget_derived() -> None:
    for derived in (siblings, unary_elementwise, layout_ops, operator_op):
        derived.cache_clear()
    for forget in FORGET_ON_CHANGE:
        forget()


# ---------------------------------------------------------------------------------
# elementwise
# ---------------------------------------------------------------------------------

def _rsqrt(x):
    return 1.0 / np.sqrt(x)


def _reciprocal(x):
    return 1.0 / x


_X, _Y = Param("x", TENSOR), Param("y", TENSOR)

# name, numpy meaning, cycles per element, operator (written as such), float only, doc
_UNARY = [
    ("neg", np.negative, 1, "-", False, "-x"),
    ("abs", np.abs, 1, None, False, "|x|"),
    ("exp", np.exp, 4, None, True, "e**x"),
    ("log", np.log, 4, None, True, "natural logarithm; -inf at 0, nan below"),
    ("sqrt", np.sqrt, 3, None, True, "square root"),
    ("rsqrt", _rsqrt, 3, None, True, "1/sqrt(x)"),
    ("reciprocal", _reciprocal, 2, None, True, "1/x"),
    ("tanh", np.tanh, 6, None, True, "hyperbolic tangent"),
]
_BINARY = [
    ("add", np.add, 1, "+", False, "x + y"),
    ("sub", np.subtract, 1, "-", False, "x - y"),
    ("mul", np.multiply, 1, "*", False, "x * y"),
    ("div", np.divide, 4, "/", True, "x / y (true division)"),
    ("maximum", np.maximum, 1, None, False, "larger of x and y (nan if either is nan)"),
    ("minimum", np.minimum, 1, None, False, "smaller of x and y (nan if either is nan)"),
]
# read from x > y, but written gt(x, y)
_COMPARE = [
    ("gt", np.greater, ">"), ("ge", np.greater_equal, ">="), ("lt", np.less, "<"),
    ("le", np.less_equal, "<="), ("eq", np.equal, "=="),
]

for _name, _fn, _cpe, _opr, _float, _doc in _UNARY:
    register(Op(_name, ELEMENTWISE, (_X,),
                f"{_name}(x): {_doc}, elementwise; pe only; same dtype, shape and layout as x",
                partial(R.elementwise, float_only=_float),
                lambda a, attrs, f=_fn: f(a[0]),
                C.VectorCost(_cpe), T.broadcasting,
                operator=_opr, written_as_operator=_opr is not None))

for _name, _fn, _cpe, _opr, _float, _doc in _BINARY:
    register(Op(_name, ELEMENTWISE, (_X, _Y),
                f"{_name}(x, y): {_doc}, elementwise with numpy broadcasting; pe only; "
                "one operand may be a number",
                partial(R.elementwise, float_only=_float),
                lambda a, attrs, f=_fn: f(a[0], a[1]),
                C.VectorCost(_cpe), T.broadcasting,
                operator=_opr, written_as_operator=_opr is not None))

for _name, _fn, _opr in _COMPARE:
    register(Op(_name, ELEMENTWISE, (_X, _Y),
                f"{_name}(x, y): x {_opr} y elementwise, a bool tensor; broadcasting as add",
                partial(R.elementwise, result="bool"),
                lambda a, attrs, f=_fn: f(a[0], a[1]),
                C.VectorCost(1), T.broadcasting, operator=_opr))

register(Op(
    "where", ELEMENTWISE, (Param("condition", TENSOR), _X, _Y),
    "where(condition, x, y): x where condition (bool) is true, else y; broadcasting as add",
    partial(R.elementwise, condition=True),
    lambda a, attrs: np.where(a[0], a[1], a[2]),
    C.VectorCost(1), T.broadcasting))


def _cast(args, attrs):
    """To i32 saturates at the i32 range and reads nan as 0, then truncates: the
    machine's conversion, and exact mode's too, so the two modes agree. Clipped in
    float64 because float32 rounds 2**31 - 1 up to 2**31, which wraps to -2**31."""
    x, dtype = args[0], attrs["dtype"]
    if dtype == "bool":
        return x != 0
    if dtype == "i32":
        lo, hi = R.I32_RANGE
        x = np.nan_to_num(np.clip(np.asarray(x, dtype=np.float64), lo, hi), nan=0.0)
        return np.trunc(x)
    return x


register(Op(
    "cast", ELEMENTWISE, (_X, Param("dtype", DTYPE)),
    'cast(x, "bf16"): convert to a dtype (round to nearest even; to i32 truncates); '
    "same layout",
    R.cast_rule, _cast, C.VectorCost(1), T.broadcasting))

# ---------------------------------------------------------------------------------
# reductions
# ---------------------------------------------------------------------------------

_REDUCE_FN = {"reduce_sum": np.sum, "reduce_max": np.max, "reduce_min": np.min}


def _reduce(name):
    def evaluate(args, attrs):
        return _REDUCE_FN[name](args[0], axis=attrs["axis"], keepdims=attrs["keepdims"])
    return evaluate


def _native_reduce_sum(args, attrs, dtype: str) -> np.ndarray:
    """A bf16 sum is a pairwise tree rounded to bf16 after every level; f32 and i32 sum
    as numpy does."""
    if dtype != "bf16":
        return _reduce("reduce_sum")(args, attrs)
    bf16 = bfloat16()
    x = np.moveaxis(args[0].astype(np.float32), attrs["axis"], -1)
    while x.shape[-1] > 1:
        if x.shape[-1] % 2:
            x = np.concatenate([x, np.zeros(x.shape[:-1] + (1,), np.float32)], axis=-1)
        x = (x[..., 0::2] + x[..., 1::2]).astype(bf16).astype(np.float32)
    out = np.moveaxis(x, -1, attrs["axis"]).astype(bf16)
    return out if attrs["keepdims"] else np.squeeze(out, axis=attrs["axis"])


for _name in _REDUCE_FN:
    register(Op(
        _name, REDUCTION, (_X, Param("axis", AXIS), Param("keepdims", BOOL, False)),
        f"{_name}(x, axis, keepdims=False): {_name[7:]} over one axis; over an axis spread "
        "across the tree it reduces in the tree and leaves the result replicated there",
        R.reduce_rule, _reduce(_name), C.reduce_cost, T.reducing,
        native=_native_reduce_sum if _name == "reduce_sum" else None))

# ---------------------------------------------------------------------------------
# contraction
# ---------------------------------------------------------------------------------

def _holds_subnormal(x) -> bool:
    """Whether a float32 array holds a subnormal value: its bits less the sign, minus
    one, fall below the smallest normal's (zero wraps round to the largest)."""
    if not isinstance(x, np.ndarray) or x.dtype != np.float32:
        return False
    bits = np.bitwise_and(x.view(np.uint32), 0x7FFFFFFF)
    bits -= 1
    return bool((bits < 0x007FFFFF).any())


def _native_matmul(args, attrs, dtype: str) -> np.ndarray:
    """Float32 operands multiply and accumulate in float32 as numpy's BLAS does, except
    where an operand holds a subnormal value: there in float64, rounded once to the
    result. BLAS's float32 kernels take 50-100x longer on subnormal operands (a
    microcode assist at each), which made the few tiny inputs of a full check of
    mla_decode a third of its time; float64 differs only by the float32 accumulation's
    own rounding, a few spacings of the subnormal grid for sums at that scale."""
    a, b = args
    if _holds_subnormal(a) or _holds_subnormal(b):
        return np.matmul(a.astype(np.float64), b.astype(np.float64))
    return np.matmul(a, b)


register(Op(
    "matmul", CONTRACTION, (Param("a", TENSOR), Param("b", TENSOR)),
    "matmul(a, b): (..., M, K) @ (..., K, N) on the matrix units, f32 or bf16 operands, "
    "f32 result; K laid out alike in both; a replicated where N is spread, b where M is; "
    "a spread K is summed in the tree",
    R.matmul_rule, lambda a, attrs: np.matmul(a[0], a[1]), C.matmul_cost, T.contracting,
    native=_native_matmul, operator="@"))

# ---------------------------------------------------------------------------------
# movement
# ---------------------------------------------------------------------------------

register(Op(
    "load", MOVEMENT, (_X, Param("layout", LAYOUT)),
    'load(x, "layout"): copy a dram tensor (or a slice of one) to the PEs with that '
    "layout; DRAM is read once even for a replicated (B@) layout",
    R.load_rule, lambda a, attrs: a[0], C.load_cost, T.made_per_tile))
register(Op(
    "store", MOVEMENT, (_X,),
    "store(x): copy a pe tensor to dram; a kernel returns store(...)",
    R.store_rule, lambda a, attrs: a[0], C.store_cost, T.same_axes))
register(Op(
    "relayout", MOVEMENT, (_X, Param("layout", LAYOUT)),
    'relayout(x, "layout"): move a pe tensor to another layout through the tree',
    R.relayout_rule, lambda a, attrs: a[0], C.relayout_cost, T.same_axes))

# ---------------------------------------------------------------------------------
# shape
# ---------------------------------------------------------------------------------

register(Op(
    "transpose", SHAPE_OP, (_X, Param("perm", PERM, None)),
    "transpose(x, perm=None): permute axes (default: reverse); the layout's axes follow; "
    "free unless local data must be reordered",
    R.transpose_rule, lambda a, attrs: np.transpose(a[0], attrs["perm"]),
    C.transpose_cost, T.permuting))
register(Op(
    "reshape", SHAPE_OP, (_X, Param("shape", SHAPE)),
    "reshape(x, shape): same elements in row-major order, free; spread factors may not be "
    "split or merged",
    R.reshape_rule, lambda a, attrs: np.reshape(a[0], attrs["shape"]),
    lambda machine, ins, out, attrs: C.FREE, T.not_tiled))


def _slice(args, attrs):
    return args[0][tuple(slice(lo, hi) for lo, hi in attrs["bounds"])]


register(Op(
    "slice", SHAPE_OP, (_X, Param("bounds", BOUNDS)),
    "x[a:b, c:d]: static slice; of a dram tensor it is free, of a pe tensor the sliced axes "
    "must be local and it is a local copy",
    R.slice_rule, _slice, C.slice_cost, T.slicing,
    operator=SUBSCRIPT, written_as_operator=True))
register(Op(
    "concat", SHAPE_OP, (Param("xs", TENSORS), Param("axis", AXIS)),
    "concat([a, b, ...], axis): join pe tensors along an axis that is local in every "
    "operand, other axes laid out alike (a local copy); or join stored tiles (dram results "
    "of store or concat) into the kernel's output, free: each store writes its region",
    R.concat_rule, lambda a, attrs: np.concatenate(a, axis=attrs["axis"]),
    C.concat_cost, T.joining))
register(Op(
    "broadcast_to", SHAPE_OP, (_X, Param("shape", SHAPE)),
    "broadcast_to(x, shape): expand size-1 axes locally (a local copy)",
    R.broadcast_to_rule, lambda a, attrs: np.broadcast_to(a[0], attrs["shape"]),
    C.broadcast_cost, T.broadcasting))

# ---------------------------------------------------------------------------------
# constants
# ---------------------------------------------------------------------------------

register(Op(
    "full", CONSTANT,
    (Param("shape", SHAPE), Param("value", "number"), Param("dtype", DTYPE),
     Param("layout", LAYOUT)),
    'full(shape, value, "f32", "layout"): a pe tensor filled with a number',
    R.full_rule, lambda a, attrs: np.full(attrs["shape"], attrs["value"]),
    C.copy_cost, T.made_per_tile))

# the kernel's parameters: not callable, one node per input
INPUT_OP = Op("input", INPUT, (), "a kernel parameter", None, None,
              lambda machine, ins, out, attrs: C.FREE, T.made_per_tile)


def __getattr__(name: str):
    # BF16, numpy's bf16 dtype, is made on first use: ml_dtypes is slow to import
    if name == "BF16":
        return bfloat16()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
