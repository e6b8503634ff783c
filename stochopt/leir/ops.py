"""The LEIR op table: one entry per op, holding everything that knows about that op.

An entry gives the op's parameters (read by the parser and the renderer), its type and
layout rule (rules.py), its numpy meaning, its cost rule (backend/op_costs.py) and the
one-line doc that docs/leir.md and the LLM prompts show. Adding an op is adding an entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, partial
from typing import Any

import numpy as np

from stochopt.backend import op_costs as C
from stochopt.leir import rules as R

REQUIRED = object()

# parameter kinds: how the parser reads an argument and the renderer writes it
TENSOR, TENSORS, LAYOUT, DTYPE, AXIS, BOOL, SHAPE, PERM, BOUNDS = (
    "tensor", "tensors", "layout", "dtype", "axis", "bool", "shape", "perm", "bounds")

# op kinds, as in the language reference
MOVEMENT, ELEMENTWISE, REDUCTION, CONTRACTION, SHAPE_OP, CONSTANT, INPUT = (
    "movement", "elementwise", "reduction", "contraction", "shape", "constant", "input")


@dataclass(frozen=True)
class Param:
    name: str
    kind: str
    default: Any = REQUIRED


@dataclass(frozen=True)
class Op:
    name: str
    kind: str
    params: tuple[Param, ...]
    doc: str
    infer: Callable      # (op, input types, attrs, machine, names) -> TensorType
    evaluate: Callable   # (args, attrs, exact) -> np.ndarray
    cost: Callable       # (machine, input types, output type, attrs) -> Work
    operator: str | None = None   # infix form the renderer writes: "+" for add
    cycles_per_elem: int = 0      # vector cycles per element (elementwise ops)

    @property
    def tensor_params(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.kind in (TENSOR, TENSORS))

    @property
    def static_params(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.kind not in (TENSOR, TENSORS))


OPS: dict[str, Op] = {}


def _register(op: Op) -> Op:
    OPS[op.name] = op
    return op


# ---------------------------------------------------------------------------------
# elementwise
# ---------------------------------------------------------------------------------

def _rsqrt(x):
    return 1.0 / np.sqrt(x)


def _reciprocal(x):
    return 1.0 / x


_X, _Y = Param("x", TENSOR), Param("y", TENSOR)

# name, numpy meaning, cycles per element, infix operator, float only, doc
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
_COMPARE = [
    ("gt", np.greater, ">"), ("ge", np.greater_equal, ">="), ("lt", np.less, "<"),
    ("le", np.less_equal, "<="), ("eq", np.equal, "=="),
]

for _name, _fn, _cpe, _opr, _float, _doc in _UNARY:
    _register(Op(_name, ELEMENTWISE, (_X,),
                 f"{_name}(x): {_doc}, elementwise; pe only; same dtype, shape and layout as x",
                 partial(R.elementwise, float_only=_float),
                 lambda a, attrs, exact, f=_fn: f(a[0]),
                 C.vector_cost(_cpe), operator=_opr, cycles_per_elem=_cpe))

for _name, _fn, _cpe, _opr, _float, _doc in _BINARY:
    _register(Op(_name, ELEMENTWISE, (_X, _Y),
                 f"{_name}(x, y): {_doc}, elementwise with numpy broadcasting; pe only; "
                 "one operand may be a number",
                 partial(R.elementwise, float_only=_float),
                 lambda a, attrs, exact, f=_fn: f(a[0], a[1]),
                 C.vector_cost(_cpe), operator=_opr, cycles_per_elem=_cpe))

for _name, _fn, _opr in _COMPARE:
    _register(Op(_name, ELEMENTWISE, (_X, _Y),
                 f"{_name}(x, y): x {_opr} y elementwise, a bool tensor; broadcasting as add",
                 partial(R.elementwise, result="bool"),
                 lambda a, attrs, exact, f=_fn: f(a[0], a[1]),
                 C.vector_cost(1), cycles_per_elem=1))

_register(Op(
    "where", ELEMENTWISE, (Param("condition", TENSOR), _X, _Y),
    "where(condition, x, y): x where condition (bool) is true, else y; broadcasting as add",
    partial(R.elementwise, condition=True),
    lambda a, attrs, exact: np.where(a[0], a[1], a[2]),
    C.vector_cost(1), cycles_per_elem=1))


def _cast(args, attrs, exact):
    x, dtype = args[0], attrs["dtype"]
    if dtype == "bool":
        return x != 0
    if dtype == "i32":
        with np.errstate(invalid="ignore"):
            return np.trunc(x)
    return x


_register(Op(
    "cast", ELEMENTWISE, (_X, Param("dtype", DTYPE)),
    'cast(x, "bf16"): convert to a dtype (round to nearest even; to i32 truncates); '
    "same layout",
    R.cast_rule, _cast, C.vector_cost(1), cycles_per_elem=1))

# ---------------------------------------------------------------------------------
# reductions
# ---------------------------------------------------------------------------------

_REDUCE_FN = {"reduce_sum": np.sum, "reduce_max": np.max, "reduce_min": np.min}


def _reduce(name):
    def evaluate(args, attrs, exact):
        return _REDUCE_FN[name](args[0], axis=attrs["axis"], keepdims=attrs["keepdims"])
    return evaluate


for _name in _REDUCE_FN:
    _register(Op(
        _name, REDUCTION, (_X, Param("axis", AXIS), Param("keepdims", BOOL, False)),
        f"{_name}(x, axis, keepdims=False): {_name[7:]} over one axis; over an axis spread "
        "across the tree it reduces in the tree and leaves the result replicated there",
        R.reduce_rule, _reduce(_name), C.reduce_cost))

# ---------------------------------------------------------------------------------
# contraction
# ---------------------------------------------------------------------------------

_register(Op(
    "matmul", CONTRACTION, (Param("a", TENSOR), Param("b", TENSOR)),
    "matmul(a, b): (..., M, K) @ (..., K, N) on the matrix units, f32 or bf16 operands, "
    "f32 result; K laid out alike in both; a replicated where N is spread, b where M is; "
    "a spread K is summed in the tree",
    R.matmul_rule, lambda a, attrs, exact: np.matmul(a[0], a[1]), C.matmul_cost,
    operator="@"))

# ---------------------------------------------------------------------------------
# movement
# ---------------------------------------------------------------------------------

_register(Op(
    "load", MOVEMENT, (_X, Param("layout", LAYOUT)),
    'load(x, "layout"): copy a dram tensor (or a slice of one) to the PEs with that '
    "layout; DRAM is read once even for a replicated (B@) layout",
    R.load_rule, lambda a, attrs, exact: a[0], C.load_cost))
_register(Op(
    "store", MOVEMENT, (_X,),
    "store(x): copy a pe tensor to dram; a kernel returns store(...)",
    R.store_rule, lambda a, attrs, exact: a[0], C.store_cost))
_register(Op(
    "relayout", MOVEMENT, (_X, Param("layout", LAYOUT)),
    'relayout(x, "layout"): move a pe tensor to another layout through the tree',
    R.relayout_rule, lambda a, attrs, exact: a[0], C.relayout_cost))

# ---------------------------------------------------------------------------------
# shape
# ---------------------------------------------------------------------------------

_register(Op(
    "transpose", SHAPE_OP, (_X, Param("perm", PERM, None)),
    "transpose(x, perm=None): permute axes (default: reverse); the layout's axes follow; "
    "free unless local data must be reordered",
    R.transpose_rule, lambda a, attrs, exact: np.transpose(a[0], attrs["perm"]),
    C.transpose_cost))
_register(Op(
    "reshape", SHAPE_OP, (_X, Param("shape", SHAPE)),
    "reshape(x, shape): same elements in row-major order, free; spread factors may not be "
    "split or merged",
    R.reshape_rule, lambda a, attrs, exact: np.reshape(a[0], attrs["shape"]),
    lambda machine, ins, out, attrs: C.FREE))


def _slice(args, attrs, exact):
    return args[0][tuple(slice(lo, hi) for lo, hi in attrs["bounds"])]


_register(Op(
    "slice", SHAPE_OP, (_X, Param("bounds", BOUNDS)),
    "x[a:b, c:d]: static slice; of a dram tensor it is free, of a pe tensor the sliced axes "
    "must be local and it is a local copy",
    R.slice_rule, _slice,
    lambda machine, ins, out, attrs: C.FREE if out.location == "dram"
    else C.copy_cost(machine, ins, out, attrs)))
_register(Op(
    "concat", SHAPE_OP, (Param("xs", TENSORS), Param("axis", AXIS)),
    "concat([a, b, ...], axis): join pe tensors along an axis that is local in every "
    "operand, other axes laid out alike (a local copy); or join stored tiles (dram results "
    "of store or concat) into the kernel's output, free: each store writes its region",
    R.concat_rule, lambda a, attrs, exact: np.concatenate(a, axis=attrs["axis"]),
    lambda machine, ins, out, attrs: C.FREE if out.location == "dram"
    else C.copy_cost(machine, ins, out, attrs)))
_register(Op(
    "broadcast_to", SHAPE_OP, (_X, Param("shape", SHAPE)),
    "broadcast_to(x, shape): expand size-1 axes locally (a local copy)",
    R.broadcast_to_rule, lambda a, attrs, exact: np.broadcast_to(a[0], attrs["shape"]),
    C.copy_cost))

# ---------------------------------------------------------------------------------
# constants
# ---------------------------------------------------------------------------------

_register(Op(
    "full", CONSTANT,
    (Param("shape", SHAPE), Param("value", "number"), Param("dtype", DTYPE),
     Param("layout", LAYOUT)),
    'full(shape, value, "f32", "layout"): a pe tensor filled with a number',
    R.full_rule, lambda a, attrs, exact: np.full(attrs["shape"], attrs["value"]),
    C.copy_cost))

# the kernel's parameters: not callable, one node per input
INPUT_OP = Op("input", INPUT, (), "a kernel parameter", None, None,
              lambda machine, ins, out, attrs: C.FREE)



@cache  # asked on every mutation; the table never changes after import
def siblings(name: str) -> tuple[str, ...]:
    """Ops that can stand in for this one: same kind and same parameters."""
    op = OPS[name]
    return tuple(o.name for o in OPS.values()
                 if o.name != name and o.kind == op.kind
                 and [p.kind for p in o.params] == [p.kind for p in op.params])
