"""Tracing a spec: run the numpy reference on tracer arrays and record what it does.

Only the numpy subset listed in docs/specs.md is recorded; anything else stops the trace
with an error that names the function and the spec line, and points to --init
kernel.leir.
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

INIT_HINT = ("write the kernel by hand in LEIR (docs/leir.md) and start from it with "
             "stochopt optimize SPEC.py --init kernel.leir; verify and optimize check it "
             "against this spec's numpy all the same")


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


def _spec_frame(spec_path: str | None, frames=None):
    """The innermost frame running the spec file's code, if any."""
    if not spec_path:
        return None
    for frame in reversed(frames if frames is not None else traceback.extract_stack()):
        if frame.filename == spec_path:
            return frame
    return None


def spec_error(message: str, hint: str | None = INIT_HINT, frames=None) -> TraceError:
    """A TraceError that names the spec file and the line of it being traced."""
    path = Tracer._spec_path
    frame = _spec_frame(path, frames)
    if frame is None:
        return TraceError(message, hint=hint, source=path)
    code = (frame.line or "").strip()
    return TraceError(message + (f" (in `{code}`)" if code else ""), hint=hint, source=path,
                      line=frame.lineno)


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
            _unsupported(_numpy_name(func))
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

    def __ne__(self, o): return not_equal(self, o)  # type: ignore[override]
    def __and__(self, o): return logical("mul", self, o)
    def __rand__(self, o): return logical("mul", o, self)
    def __or__(self, o): return logical("add", self, o)
    def __ror__(self, o): return logical("add", o, self)
    def __invert__(self): return logical_not(self)

    def __pow__(self, p):
        return power(self, p)

    def __rpow__(self, base):
        _unsupported(f"{base!r} ** array (use np.exp(x * math.log(base)))")

    def __floordiv__(self, o): _unsupported("the // operator")
    def __rfloordiv__(self, o): _unsupported("the // operator")
    def __mod__(self, o): _unsupported("the % operator")
    def __rmod__(self, o): _unsupported("the % operator")
    def __xor__(self, o): _unsupported("the ^ operator")
    def __rxor__(self, o): _unsupported("the ^ operator")

    def __setitem__(self, index, value):
        _unsupported("assigning into an array (x[...] = v); build the result with "
                     "np.where or np.concatenate")

    def __repr__(self) -> str:
        return f"<traced {self.node.dtype} array of shape {self.node.shape}>"

    def __getitem__(self, index):
        return getitem(self, index)

    def sum(self, axis=None, keepdims=False, **kw):
        return reduce("reduce_sum", self, axis, keepdims, kw)

    def max(self, axis=None, keepdims=False, **kw):
        return reduce("reduce_max", self, axis, keepdims, kw)

    def min(self, axis=None, keepdims=False, **kw):
        return reduce("reduce_min", self, axis, keepdims, kw)

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


def _numpy_name(func) -> str:
    """A numpy function as the spec wrote it: np.linalg.inv, not np.inv."""
    module = getattr(func, "__module__", None) or "numpy"
    if module == "numpy" or not module.startswith("numpy."):
        return f"np.{func.__name__}"
    return f"np.{module.removeprefix('numpy.')}.{func.__name__}"


def _unsupported(what: str):
    raise spec_error(f"the lowering does not support {what}")


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
        raise spec_error(e.message, hint=e.hint) from None
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
    shape, dtype = _shape_dtype(args)
    if op in ("gt", "ge", "lt", "le", "eq"):
        return _make(op, args, {}, shape, "bool")
    if dtype == "bool" and op != "div" and all(isinstance(a, TNode) for a in args):
        if op not in _LOGICAL:
            _unsupported(f"{op} of two boolean arrays (numpy has no such operation)")
        # numpy keeps bool: + and maximum are `or`, * and minimum are `and`
        out = _make(op, args, {}, shape, "f32")
        return _make("cast", (out.node,), {"dtype": "bool"}, shape, "bool")
    return _make(op, args, {}, shape, "f32")


_LOGICAL = ("add", "mul", "maximum", "minimum")


def not_equal(x, y) -> Tracer:
    return logical_not(binary("eq", x, y))


def logical_not(x) -> Tracer:
    a = _operand(x)
    if not isinstance(a, TNode) or a.dtype != "bool":
        _unsupported("~ / np.logical_not of an array that is not boolean")
    return _make("eq", (a, 0.0), {}, a.shape, "bool")


def logical(op: str, x, y) -> Tracer:
    """& and | of boolean arrays (np.logical_and / np.logical_or)."""
    args = (_operand(x), _operand(y))
    if not all(isinstance(a, TNode) and a.dtype == "bool" for a in args):
        _unsupported(f"{'&' if op == 'mul' else '|'} of arrays that are not both boolean")
    return binary(op, x, y)


def where(c, x, y) -> Tracer:
    args = (_operand(c), _operand(x), _operand(y))
    if not isinstance(args[0], TNode):
        _unsupported("np.where with a condition that is not an array")
    if args[0].dtype != "bool":  # numpy reads a number as true where it is not zero
        args = (astype(Tracer(args[0]), "bool").node,) + args[1:]
    shape, _ = _shape_dtype(args)
    return _make("where", args, {}, shape, "f32")


def matmul(a, b) -> Tracer:
    x, y = _operand(a), _operand(b)
    if not (isinstance(x, TNode) and isinstance(y, TNode)):
        _unsupported("matmul with a number")
    if x.shape[-1] != y.shape[-2 if len(y.shape) > 1 else -1]:
        raise spec_error(f"matmul of shapes {x.shape} and {y.shape}: the inner sizes "
                         f"{x.shape[-1]} and {y.shape[-2 if len(y.shape) > 1 else -1]} differ",
                         hint="a is (..., M, K) and b is (..., K, N)")
    # numpy's vector and broadcast forms, as reshapes and transposes of a plain matmul
    if len(x.shape) == 1:  # (K,) @ (..., K, N): a row vector
        out = matmul(reshape(Tracer(x), (1, x.shape[0])), Tracer(y))
        return reshape(out, out.shape[:-2] + out.shape[-1:])
    if len(y.shape) == 1:  # (..., M, K) @ (K,): a column vector
        return reshape(matmul(Tracer(x), reshape(Tracer(y), (y.shape[0], 1))), x.shape[:-1])
    if len(x.shape) > 2 and len(y.shape) == 2:  # batch of a against one b: stack the rows
        out = matmul(reshape(Tracer(x), (prod(x.shape[:-1]), x.shape[-1])), Tracer(y))
        return reshape(out, x.shape[:-1] + (y.shape[-1],))
    if len(x.shape) == 2 and len(y.shape) > 2:  # one a against a batch of b: side by side
        rank = len(y.shape)
        k_first = transpose(Tracer(y), (rank - 2,) + tuple(range(rank - 2)) + (rank - 1,))
        wide = matmul(Tracer(x), reshape(k_first, (y.shape[-2], prod(k_first.shape[1:]))))
        out = reshape(wide, (x.shape[0],) + y.shape[:-2] + (y.shape[-1],))
        return transpose(out, tuple(range(1, rank - 1)) + (0, rank - 1))
    if len(x.shape) != len(y.shape) or x.shape[:-2] != y.shape[:-2]:
        _unsupported(f"matmul of shapes {x.shape} and {y.shape} (batch axes must be equal)")
    return _make("matmul", (x, y), {}, x.shape[:-1] + (y.shape[-1],), "f32")


def _axes(axis, rank: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(rank))
    items = axis if isinstance(axis, tuple | list) else (axis,)
    out = []
    for a in items:
        if not isinstance(a, int | np.integer) or isinstance(a, bool):
            _unsupported(f"axis={axis!r} (an int or a tuple of ints)")
        if not -rank <= a < rank:
            raise spec_error(f"axis {a} is out of range for an array of rank {rank}",
                             hint=f"use an axis in {-rank}..{rank - 1}, or {INIT_HINT}")
        out.append(a % rank)
    return tuple(sorted(set(out)))


def reduce(op: str, x, axis, keepdims, kw) -> Tracer:
    if kw:
        _unsupported(f"{op[7:]} with {', '.join(kw)}")
    t = x if isinstance(x, Tracer) else _unsupported(f"{op[7:]} of a number")
    if t.node.dtype == "bool":  # numpy counts a bool sum; max/min of bools are any/all
        out = reduce(op, astype(t, "f32"), axis, keepdims, kw)
        return out if op == "reduce_sum" else astype(out, "bool")
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


def reshape(x, shape=None, order="C", newshape=None) -> Tracer:
    t = _operand(x)
    shape = newshape if shape is None else shape
    if order != "C" or shape is None:
        _unsupported("reshape with order= (row-major reshape only)")
    shape = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
    if not isinstance(t, TNode) or not all(isinstance(s, int | np.integer) for s in shape):
        _unsupported(f"reshape to {shape!r} (a tuple of ints)")
    shape = tuple(int(s) for s in shape)
    if shape.count(-1) == 1:
        known = prod(s for s in shape if s != -1)
        shape = tuple(prod(t.shape) // max(known, 1) if s == -1 else s for s in shape)
    if prod(shape) != prod(t.shape) or any(s < 1 for s in shape):
        raise spec_error(f"cannot reshape an array of shape {t.shape} into {shape}",
                         hint=f"the sizes must multiply to {prod(t.shape)}, or {INIT_HINT}")
    return _make("reshape", (t,), {"shape": shape}, shape, t.dtype)


def getitem(x: Tracer, index) -> Tracer:
    items = index if isinstance(index, tuple) else (index,)
    for it in items:
        if it is None:
            _unsupported("x[..., None] / np.newaxis (add the axis with reshape)")
        if isinstance(it, Tracer) and it.node.dtype == "bool":
            _unsupported("boolean-mask indexing x[mask] (use np.where(mask, x, ...))")
        if isinstance(it, Tracer | list | np.ndarray):
            _unsupported("fancy indexing with a list or array of indices (static slices "
                         "x[a:b] and integer indices only)")
        if not (it is Ellipsis or isinstance(it, slice | int | np.integer)):
            _unsupported(f"indexing with {it!r} (static slices x[a:b] only)")
    if items.count(Ellipsis) == 1:
        at = items.index(Ellipsis)
        items = items[:at] + (slice(None),) * (x.ndim - len(items) + 1) + items[at + 1:]
    if Ellipsis in items or len(items) > x.ndim:
        _unsupported(f"indexing with {index!r}: more indices than the {x.ndim} axes")
    bounds, dropped = [], []
    for axis, size in enumerate(x.shape):
        it = items[axis] if axis < len(items) else slice(None)
        if isinstance(it, int | np.integer) and not isinstance(it, bool | np.bool_):
            if not -size <= it < size:  # x[i]: the slice i:i+1, then the axis dropped
                _unsupported(f"index {it} of axis {axis}, which has size {size}")
            it = slice(int(it) % size, int(it) % size + 1)
            dropped.append(axis)
        if it.step not in (None, 1):
            _unsupported(f"the strided slice {it.start}:{it.stop}:{it.step} (steps of 1 only)")
        if not all(v is None or isinstance(v, int | np.integer) for v in (it.start, it.stop)):
            _unsupported(f"the slice {it!r} (static integer bounds only)")
        lo, hi, _ = it.indices(size)
        if hi <= lo:
            _unsupported(f"an empty slice {it!r}")
        bounds.append((lo, hi))
    shape = tuple(hi - lo for lo, hi in bounds)
    out = x if shape == x.shape else _make("slice", (x.node,), {"bounds": tuple(bounds)},
                                           shape, x.node.dtype)
    if dropped:
        kept = tuple(s for axis, s in enumerate(shape) if axis not in dropped) or (1,)
        out = reshape(out, kept)
    return out


def concatenate(arrays, axis=0, **kw) -> Tracer:
    if kw or not isinstance(arrays, list | tuple) or not arrays:
        _unsupported("np.concatenate with these arguments")
    nodes = [_operand(a) for a in arrays]
    if not all(isinstance(n, TNode) for n in nodes):
        _unsupported("np.concatenate of numbers")
    if axis is None:  # numpy joins the flattened arrays
        return concatenate([reshape(Tracer(n), (prod(n.shape),)) for n in nodes])
    rank = len(nodes[0].shape)
    if isinstance(axis, tuple | list):
        _unsupported(f"np.concatenate along axis={axis!r} (one axis)")
    axis = _axes(axis, rank)[0]
    shape = list(nodes[0].shape)
    for n in nodes[1:]:
        if len(n.shape) != rank or any(n.shape[i] != shape[i] for i in range(rank) if i != axis):
            _unsupported("np.concatenate of arrays whose other axes differ")
    shape[axis] = sum(n.shape[axis] for n in nodes)
    dtype = "bool" if all(n.dtype == "bool" for n in nodes) else "f32"
    return _make("concat", tuple(nodes), {"axis": axis}, shape, dtype)


def power(x, p) -> Tracer:
    if not isinstance(x, Tracer) or isinstance(p, Tracer):
        _unsupported("a number or an array raised to an array power")
    if isinstance(p, numbers.Real) and float(p).is_integer() and 1 <= abs(p) <= 8:
        out = x
        for _ in range(int(abs(p)) - 1):
            out = binary("mul", out, x)
        return out if p > 0 else binary("div", 1.0, out)
    if p in (0.5, -0.5):
        root = unary("sqrt", x)
        return root if p > 0 else binary("div", 1.0, root)
    return _unsupported(f"x ** {p!r} (integer powers -8..8 other than 0, and 0.5 and -0.5, "
                        "are supported)")


def astype(x, dtype) -> Tracer:
    t = _operand(x)
    try:
        name = np.dtype(dtype).name if not isinstance(dtype, str) or dtype not in (
            "f32", "bf16", "i32", "bool") else dtype
    except TypeError:
        name = repr(dtype)
    if name in ("bool",):
        return _make("cast", (t,), {"dtype": "bool"}, t.shape, "bool")
    if name in ("i32", "int32", "int64"):  # truncates toward zero; the value stays a number
        if t.dtype == "i32":
            return Tracer(t)
        return _make("cast", (t,), {"dtype": "f32" if t.dtype == "bool" else "i32"},
                     t.shape, "f32")
    if name in ("float32", "float64", "float16", "f32", "bf16", "bfloat16"):
        return _make("cast", (t,), {"dtype": "f32"}, t.shape, "f32") if t.dtype == "bool" \
            else Tracer(t)
    _unsupported(f"astype({dtype!r})")


def _clip(a, lo=None, hi=None, **kw) -> Tracer:
    if kw:
        _unsupported(f"np.clip with {', '.join(kw)}")
    out = a if lo is None else binary("maximum", a, lo)
    return out if hi is None else binary("minimum", out, hi)


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
    "not_equal": not_equal, "logical_not": logical_not, "invert": logical_not,
    "logical_and": lambda a, b: logical("mul", a, b),
    "logical_or": lambda a, b: logical("add", a, b),
    "bitwise_and": lambda a, b: logical("mul", a, b),
    "bitwise_or": lambda a, b: logical("add", a, b),
}
_FUNCTIONS = {
    "where": where, "matmul": matmul, "transpose": transpose, "reshape": reshape,
    "concatenate": concatenate, "sum": _reduce_fn("reduce_sum"),
    "max": _reduce_fn("reduce_max"), "amax": _reduce_fn("reduce_max"),
    "min": _reduce_fn("reduce_min"), "amin": _reduce_fn("reduce_min"),
    "mean": mean, "clip": _clip, "exp": lambda a: unary("exp", a),
    "sqrt": lambda a: unary("sqrt", a),
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
        raise TraceError(f"spec {spec.name}: the reference recursed too deeply",
                         source=spec.path, line=spec.line) from None
    except Exception as e:
        raise spec_error(f"spec {spec.name}: the reference failed while tracing: "
                         f"{type(e).__name__}: {e}",
                         frames=traceback.extract_tb(e.__traceback__)) from None
    finally:
        Tracer._spec_path = None
        sys.setrecursionlimit(limit)
    where = {"source": spec.path, "line": spec.line}
    if isinstance(result, tuple | list):
        raise TraceError(f"spec {spec.name} returns {len(result)} values; a spec returns one "
                         "array", hint="return a single array (concatenate if needed)", **where)
    if not isinstance(result, Tracer):
        raise TraceError(f"spec {spec.name} returns {type(result).__name__}, not an array "
                         "computed from its inputs",
                         hint="return an expression of the input arrays", **where)
    if result.node.op == "input":
        raise TraceError(f"spec {spec.name} returns an input unchanged; nothing to compute",
                         hint="a kernel must compute something from its inputs", **where)
    return inputs, result.node

