"""Tracing a spec: run the numpy reference on tracer arrays and record what it does.

Only DESIGN.md's numpy subset is recorded; anything else stops the trace with an error
that names the function and the spec line, and points to --init kernel.leir.
"""

from __future__ import annotations

import numbers
import sys
import traceback
from dataclasses import dataclass, field
from math import prod
from typing import Any

import numpy as np

from stochopt.errors import StochoptError
from stochopt.leir.rules import broadcast_shape
from stochopt.spec import Spec

INIT_HINT = "write the kernel by hand and start from it with --init kernel.leir"


@dataclass(eq=False)
class TNode:
    """One traced numpy operation: op is a LEIR op name (or 'input'/'mean' helpers)."""
    op: str
    args: tuple[Any, ...]   # TNode or float
    attrs: dict[str, Any]
    shape: tuple[int, ...]
    dtype: str              # "f32" (any float), "bool", or the input's own dtype
    users: int = field(default=0)


class TraceError(StochoptError):
    """The spec uses numpy outside the subset the lowering understands."""


def _spec_line(spec_path: str | None) -> str:
    if not spec_path:
        return ""
    for frame in reversed(traceback.extract_stack()):
        if frame.filename == spec_path:
            return f" (spec line {frame.lineno}: {frame.line})"
    return ""


class Tracer:
    """Stands in for an ndarray while the reference runs."""

    __array_priority__ = 1000
    _spec_path: str | None = None

    def __init__(self, node: TNode) -> None:
        self.node = node

    # -- numpy protocol ------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs.get("out") is not None:
            _unsupported(f"np.{ufunc.__name__}.{method}")
        if kwargs.get("where", True) is not True or kwargs.get("dtype") is not None:
            _unsupported(f"np.{ufunc.__name__} with where=/dtype=")
        name = _UFUNCS.get(ufunc.__name__)
        if name is None:
            _unsupported(f"np.{ufunc.__name__}")
        return name(*inputs)

    def __array_function__(self, func, types, args, kwargs):
        handler = _FUNCTIONS.get(func.__name__)
        if handler is None:
            _unsupported(f"np.{func.__name__}")
        return handler(*args, **kwargs)

    def __array__(self, *a, **k):
        _unsupported("converting a traced array to a concrete numpy array (np.asarray, "
                     "float(), if/while on array values)")

    def __bool__(self):
        _unsupported("using an array value in if/while/and/or")

    def __float__(self):
        _unsupported("float() of an array")

    def __len__(self):
        return self.shape[0]

    def __iter__(self):
        _unsupported("iterating over an array")

    # -- array surface ---------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self.node.shape

    @property
    def ndim(self) -> int:
        return len(self.node.shape)

    @property
    def size(self) -> int:
        return prod(self.node.shape)

    @property
    def T(self) -> Tracer:
        return transpose(self)

    def __add__(self, o): return binary("add", self, o)
    def __radd__(self, o): return binary("add", o, self)
    def __sub__(self, o): return binary("sub", self, o)
    def __rsub__(self, o): return binary("sub", o, self)
    def __mul__(self, o): return binary("mul", self, o)
    def __rmul__(self, o): return binary("mul", o, self)
    def __truediv__(self, o): return binary("div", self, o)
    def __rtruediv__(self, o): return binary("div", o, self)
    def __matmul__(self, o): return matmul(self, o)
    def __rmatmul__(self, o): return matmul(o, self)
    def __neg__(self): return unary("neg", self)
    def __pos__(self): return self
    def __abs__(self): return unary("abs", self)
    def __gt__(self, o): return binary("gt", self, o)
    def __ge__(self, o): return binary("ge", self, o)
    def __lt__(self, o): return binary("lt", self, o)
    def __le__(self, o): return binary("le", self, o)
    def __eq__(self, o): return binary("eq", self, o)  # type: ignore[override]
    __hash__ = object.__hash__

    def __pow__(self, p):
        return power(self, p)

    def __getitem__(self, index):
        return getitem(self, index)

    def sum(self, axis=None, keepdims=False, **kw): return reduce("reduce_sum", self, axis, keepdims, kw)
    def max(self, axis=None, keepdims=False, **kw): return reduce("reduce_max", self, axis, keepdims, kw)
    def min(self, axis=None, keepdims=False, **kw): return reduce("reduce_min", self, axis, keepdims, kw)
    def mean(self, axis=None, keepdims=False, **kw): return mean(self, axis, keepdims, **kw)

    def reshape(self, *shape, **kw):
        if kw:
            _unsupported(f"reshape with {', '.join(kw)}")
        if len(shape) == 1 and isinstance(shape[0], tuple | list):
            shape = tuple(shape[0])
        return reshape(self, shape)

    def transpose(self, *axes):
        if len(axes) == 1 and isinstance(axes[0], tuple | list):
            axes = tuple(axes[0])
        return transpose(self, axes or None)

    def astype(self, dtype, **kw):
        return astype(self, dtype)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        _unsupported(f"the array attribute or method .{name}")


def _unsupported(what: str):
    raise TraceError(f"the lowering does not support {what}{_spec_line(Tracer._spec_path)}",
                     hint=INIT_HINT)


# ---------------------------------------------------------------------------------
# recording
# ---------------------------------------------------------------------------------

def _operand(x) -> TNode | float:
    if isinstance(x, Tracer):
        return x.node
    if isinstance(x, bool | np.bool_):
        return float(x)
    if isinstance(x, numbers.Real) or (isinstance(x, np.ndarray) and x.ndim == 0):
        v = float(x)
        return v
    if isinstance(x, np.ndarray):
        _unsupported("constant numpy arrays in a spec (only Python numbers may appear)")
    _unsupported(f"operands of type {type(x).__name__}")


def _make(op: str, args, attrs, shape, dtype) -> Tracer:
    for a in args:
        if isinstance(a, TNode):
            a.users += 1
    return Tracer(TNode(op, tuple(args), attrs, tuple(shape), dtype))


def _shape_dtype(args) -> tuple[tuple[int, ...], str]:
    nodes = [a for a in args if isinstance(a, TNode)]
    try:
        shape = broadcast_shape([n.shape for n in nodes])
    except StochoptError as e:
        raise TraceError(e.message + _spec_line(Tracer._spec_path)) from None
    return shape, ("bool" if all(n.dtype == "bool" for n in nodes) else "f32")


def unary(op: str, x) -> Tracer:
    a = _operand(x)
    if not isinstance(a, TNode):
        _unsupported(f"{op} of a number only")
    return _make(op, (a,), {}, a.shape, "f32")


def binary(op: str, x, y) -> Tracer:
    args = (_operand(x), _operand(y))
    if not any(isinstance(a, TNode) for a in args):
        _unsupported(f"{op} of two numbers")
    shape, _ = _shape_dtype(args)
    dtype = "bool" if op in ("gt", "ge", "lt", "le", "eq") else "f32"
    return _make(op, args, {}, shape, dtype)


def where(c, x, y) -> Tracer:
    args = (_operand(c), _operand(x), _operand(y))
    if not isinstance(args[0], TNode) or args[0].dtype != "bool":
        _unsupported("np.where with a condition that is not a boolean array")
    shape, _ = _shape_dtype(args)
    return _make("where", args, {}, shape, "f32")


def matmul(a, b) -> Tracer:
    x, y = _operand(a), _operand(b)
    if not (isinstance(x, TNode) and isinstance(y, TNode)):
        _unsupported("matmul with a number")
    if len(x.shape) < 2 or len(x.shape) != len(y.shape) or x.shape[:-2] != y.shape[:-2] \
            or x.shape[-1] != y.shape[-2]:
        _unsupported(f"matmul of shapes {x.shape} and {y.shape} (equal rank >= 2 and "
                     "matching inner sizes are supported)")
    return _make("matmul", (x, y), {}, x.shape[:-1] + (y.shape[-1],), "f32")


def _axes(axis, rank: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(rank))
    items = axis if isinstance(axis, tuple | list) else (axis,)
    out = []
    for a in items:
        if not isinstance(a, int) or not -rank <= a < rank:
            _unsupported(f"axis={axis!r}")
        out.append(a % rank)
    return tuple(sorted(set(out)))


def reduce(op: str, x, axis, keepdims, kw) -> Tracer:
    if kw:
        _unsupported(f"{op[7:]} with {', '.join(kw)}")
    t = x if isinstance(x, Tracer) else _unsupported(f"{op[7:]} of a number")
    rank = t.ndim
    axes = _axes(axis, rank)
    for a in sorted(axes, reverse=True):  # highest first, so lower axis numbers stay put
        shape = list(t.shape)
        if keepdims:
            shape[a] = 1
        else:
            del shape[a]
        if not shape:
            shape = [1]
            t = _make(op, (t.node,), {"axis": a, "keepdims": True}, shape, t.node.dtype)
            continue
        t = _make(op, (t.node,), {"axis": a, "keepdims": bool(keepdims)}, shape, t.node.dtype)
    return t


def mean(x, axis=None, keepdims=False, **kw) -> Tracer:
    if not isinstance(x, Tracer):
        _unsupported("mean of a number")
    count = prod(x.shape[a] for a in _axes(axis, x.ndim))
    return binary("mul", reduce("reduce_sum", x, axis, keepdims, kw), 1.0 / count)


def transpose(x, axes=None) -> Tracer:
    t = _operand(x)
    if not isinstance(t, TNode):
        _unsupported("transpose of a number")
    perm = tuple(reversed(range(len(t.shape)))) if axes is None else tuple(
        a % len(t.shape) for a in axes)
    if sorted(perm) != list(range(len(t.shape))):
        _unsupported(f"transpose axes {axes}")
    return _make("transpose", (t,), {"perm": perm}, tuple(t.shape[p] for p in perm), t.dtype)


def reshape(x, shape) -> Tracer:
    t = _operand(x)
    shape = tuple(int(s) for s in shape)
    if shape.count(-1) == 1:
        known = prod(s for s in shape if s != -1)
        shape = tuple(prod(t.shape) // known if s == -1 else s for s in shape)
    if prod(shape) != prod(t.shape) or any(s < 1 for s in shape):
        _unsupported(f"reshape of {t.shape} to {shape}")
    return _make("reshape", (t,), {"shape": shape}, shape, t.dtype)


def getitem(x: Tracer, index) -> Tracer:
    items = index if isinstance(index, tuple) else (index,)
    if any(i is Ellipsis or i is None for i in items) or len(items) > x.ndim:
        _unsupported(f"indexing with {index!r} (static slices a:b only)")
    bounds = []
    for axis, size in enumerate(x.shape):
        it = items[axis] if axis < len(items) else slice(None)
        if not isinstance(it, slice) or it.step not in (None, 1):
            _unsupported(f"indexing with {it!r} (static slices a:b only)")
        lo, hi, _ = it.indices(size)
        if hi <= lo:
            _unsupported(f"an empty slice {it!r}")
        bounds.append((lo, hi))
    shape = tuple(hi - lo for lo, hi in bounds)
    if shape == x.shape:
        return x
    return _make("slice", (x.node,), {"bounds": tuple(bounds)}, shape, x.node.dtype)


def concatenate(arrays, axis=0, **kw) -> Tracer:
    if kw or not isinstance(arrays, list | tuple) or not arrays:
        _unsupported("np.concatenate with these arguments")
    nodes = [_operand(a) for a in arrays]
    if not all(isinstance(n, TNode) for n in nodes):
        _unsupported("np.concatenate of numbers")
    rank = len(nodes[0].shape)
    axis = _axes(axis, rank)[0]
    shape = list(nodes[0].shape)
    for n in nodes[1:]:
        if len(n.shape) != rank or any(n.shape[i] != shape[i] for i in range(rank) if i != axis):
            _unsupported("np.concatenate of arrays whose other axes differ")
    shape[axis] = sum(n.shape[axis] for n in nodes)
    dtype = "bool" if all(n.dtype == "bool" for n in nodes) else "f32"
    return _make("concat", tuple(nodes), {"axis": axis}, shape, dtype)


def power(x, p) -> Tracer:
    if isinstance(p, int | float) and float(p).is_integer() and 1 <= p <= 8:
        out = x
        for _ in range(int(p) - 1):
            out = binary("mul", out, x)
        return out
    if p == 0.5:
        return unary("sqrt", x)
    if p == -1:
        return binary("div", 1.0, x)
    return _unsupported(f"x ** {p!r} (integer powers 1..8, 0.5 and -1 are supported)")


def astype(x, dtype) -> Tracer:
    t = _operand(x)
    name = np.dtype(dtype).name if not isinstance(dtype, str) or dtype not in (
        "f32", "bf16", "i32", "bool") else dtype
    if name in ("bool",):
        return _make("cast", (t,), {"dtype": "bool"}, t.shape, "bool")
    if name in ("float32", "float64", "float16", "f32", "bf16", "bfloat16"):
        return _make("cast", (t,), {"dtype": "f32"}, t.shape, "f32") if t.dtype == "bool" \
            else Tracer(t)
    _unsupported(f"astype({dtype!r})")


def _reduce_fn(op):
    def handler(a, axis=None, keepdims=False, **kw):
        return reduce(op, a, axis, keepdims, kw)
    return handler


_UFUNCS = {
    "add": lambda a, b: binary("add", a, b), "subtract": lambda a, b: binary("sub", a, b),
    "multiply": lambda a, b: binary("mul", a, b), "true_divide": lambda a, b: binary("div", a, b),
    "divide": lambda a, b: binary("div", a, b), "negative": lambda a: unary("neg", a),
    "positive": lambda a: a, "exp": lambda a: unary("exp", a), "log": lambda a: unary("log", a),
    "sqrt": lambda a: unary("sqrt", a), "tanh": lambda a: unary("tanh", a),
    "absolute": lambda a: unary("abs", a), "maximum": lambda a, b: binary("maximum", a, b),
    "minimum": lambda a, b: binary("minimum", a, b), "greater": lambda a, b: binary("gt", a, b),
    "greater_equal": lambda a, b: binary("ge", a, b), "less": lambda a, b: binary("lt", a, b),
    "less_equal": lambda a, b: binary("le", a, b), "equal": lambda a, b: binary("eq", a, b),
    "matmul": matmul, "square": lambda a: binary("mul", a, a),
    "reciprocal": lambda a: unary("reciprocal", a), "power": power,
}
_FUNCTIONS = {
    "where": where, "matmul": matmul, "transpose": transpose, "reshape": reshape,
    "concatenate": concatenate, "sum": _reduce_fn("reduce_sum"),
    "max": _reduce_fn("reduce_max"), "amax": _reduce_fn("reduce_max"),
    "min": _reduce_fn("reduce_min"), "amin": _reduce_fn("reduce_min"),
    "mean": mean, "exp": lambda a: unary("exp", a), "sqrt": lambda a: unary("sqrt", a),
    "tanh": lambda a: unary("tanh", a), "log": lambda a: unary("log", a),
    "abs": lambda a: unary("abs", a), "maximum": lambda a, b: binary("maximum", a, b),
    "minimum": lambda a, b: binary("minimum", a, b), "dot": matmul,
}


def trace(spec: Spec) -> tuple[list[TNode], TNode]:
    """Run the reference on tracers; return the input nodes and the output node."""
    inputs = [TNode("input", (), {"name": n, "dtype": t.dtype}, t.shape,
                    "bool" if t.dtype == "bool" else t.dtype)
              for n, t in spec.inputs.items()]
    Tracer._spec_path = spec.path
    limit = sys.getrecursionlimit()
    try:
        result = spec.reference(**{n.attrs["name"]: Tracer(n) for n in inputs})
    except StochoptError:
        raise
    except RecursionError:
        raise TraceError(f"spec {spec.name}: the reference recursed too deeply") from None
    except Exception as e:
        raise TraceError(f"spec {spec.name}: the reference failed while tracing: "
                         f"{type(e).__name__}: {e}", hint=INIT_HINT) from None
    finally:
        Tracer._spec_path = None
        sys.setrecursionlimit(limit)
    if isinstance(result, tuple | list):
        raise TraceError(f"spec {spec.name} returns {len(result)} values; a spec returns one "
                         "array", hint="return a single array (concatenate if needed)")
    if not isinstance(result, Tracer):
        raise TraceError(f"spec {spec.name} returns {type(result).__name__}, not an array that "
                         "depends on its inputs")
    if result.node.op == "input":
        raise TraceError(f"spec {spec.name} returns an input unchanged; nothing to compute")
    return inputs, result.node

