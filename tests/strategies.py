"""Hypothesis strategies for LEIR: layouts and whole well-formed kernels.

``kernels(machine=SMALL, max_ops=12)`` draws kernels through ``Builder``, so every one
is type- and layout-checked: a drawn op that breaks a constraint is dropped and another
is drawn. Every op family of the table appears: loads (spread and replicated layouts,
dram slices), elementwise unary/binary/compare/where with literals and broadcasting,
cast, reductions over local and spread axes, matmul (bf16 and f32) with compatible
layouts, relayout, transpose, reshape, slice, concat, broadcast_to, full; a store ends
every kernel.

Import it as ``from tests.strategies import kernels``: the repository root must be on
sys.path, which tests/backend/conftest.py and tests/leir/conftest.py arrange.
"""

from __future__ import annotations

from hypothesis import assume
from hypothesis import strategies as st

from stochopt.errors import ConstraintError
from stochopt.leir.ir import Builder, Kernel
from stochopt.leir.layout import LEVELS, Factor, Layout
from stochopt.leir.rules import Const
from stochopt.leir.types import TensorType
from stochopt.machine import SMALL

DIMS = (1, 2, 3, 4, 6, 8, 16)
FLOATS = ("f32", "bf16")
UNARY = ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "tanh")
BINARY = ("add", "sub", "mul", "div", "maximum", "minimum")
COMPARE = ("gt", "ge", "lt", "le", "eq")
REDUCE = ("reduce_sum", "reduce_max", "reduce_min")
LITERALS = st.sampled_from([0.0, 1.0, -1.0, 0.5, 2.0, -3.25, 3])


def _divisors(n: int) -> list[int]:
    return [d for d in range(2, n + 1) if n % d == 0]


@st.composite
def layouts(draw, shape: tuple[int, ...], machine=SMALL, replicate: bool = True,
            avoid: frozenset[str] = frozenset()) -> Layout:
    """A valid layout of ``shape``: some axes spread over some levels (never those in
    ``avoid``), local factors anywhere in an axis, and maybe B@ over unused levels."""
    rest = list(shape)
    spread: list[list[Factor]] = [[] for _ in shape]
    used: set[str] = set()
    for level in LEVELS:
        if level in avoid or not draw(st.booleans()):
            continue
        axis = draw(st.integers(0, len(shape) - 1))
        options = [d for d in _divisors(rest[axis]) if d <= machine.fanout[level]]
        if not options:
            continue
        d = draw(st.sampled_from(options))
        spread[axis].append(Factor(d, level))
        rest[axis] //= d
        used.add(level)
    axes = []
    for axis, factors in enumerate(spread):
        factors = list(factors)
        if draw(st.booleans()):
            factors.reverse()  # minor-first spreads are legal too
        if rest[axis] > 1 or not factors:
            factors.insert(draw(st.integers(0, len(factors))), Factor(rest[axis]))
        axes.append(tuple(factors))
    replicated: frozenset[str] = frozenset()
    if replicate:
        free = [lv for lv in LEVELS if lv not in used]
        replicated = frozenset(lv for lv in free if draw(st.integers(0, 3)) == 0)
    return Layout(tuple(shape), tuple(axes), replicated)


def _matmul_layouts(draw, machine, batch: tuple[int, ...], m: int, k: int, n: int,
                    dtype: str):
    """Layouts for a (batch, m, k) @ (batch, k, n) pair that matmul accepts: K laid out
    alike, M and N over different levels, each operand replicated where the other spreads."""
    levels = list(LEVELS)
    roles = {lv: draw(st.sampled_from(("none", "m", "n", "k", "batch"))) for lv in levels}

    def axis(size: int, role: str) -> tuple[Factor, ...]:
        factors, rest = [], size
        for lv in levels:
            if roles[lv] != role:
                continue
            options = [d for d in _divisors(rest) if d <= machine.fanout[lv]]
            if options:
                d = draw(st.sampled_from(options))
                factors.append(Factor(d, lv))
                rest //= d
            else:
                roles[lv] = "none"
        if rest > 1 or not factors:
            factors.append(Factor(rest))
        return tuple(factors)

    batch_axes = tuple(axis(b, "batch") for b in batch)
    m_axis, k_axis, n_axis = axis(m, "m"), axis(k, "k"), axis(n, "n")

    def used(role):
        return {lv for lv in levels if roles[lv] == role}

    a = Layout(batch + (m, k), batch_axes + (m_axis, k_axis), frozenset(used("n")))
    b = Layout(batch + (k, n), batch_axes + (k_axis, n_axis), frozenset(used("m")))
    return TensorType(dtype, a.shape, "pe", a), TensorType(dtype, b.shape, "pe", b)


class _Draft:
    """A kernel being drawn: the builder, and the pe values made so far."""

    def __init__(self, machine, dims: tuple[int, ...]) -> None:
        self.builder = Builder(machine)
        self.machine = machine
        self.dims = dims
        self.values: list[int] = []   # pe values
        self.inputs: list[int] = []   # dram inputs
        self.count = 0

    def type(self, i: int) -> TensorType:
        return self.builder.nodes[i].type

    def add(self, op: str, args, attrs=None) -> int | None:
        """Append an op if its constraints hold; None (nothing appended) if not."""
        self.count += 1
        try:
            i = self.builder.add(op, list(args), attrs or {}, name=f"v{self.count}")
        except ConstraintError:
            return None
        if self.type(i).location == "pe":
            self.values.append(i)
        return i


@st.composite
def _input_type(draw, dims: tuple[int, ...]) -> TensorType:
    dtype = draw(st.sampled_from(("f32", "f32", "bf16", "bf16", "i32", "bool")))
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.sampled_from(dims)) for _ in range(rank))
    return TensorType(dtype, shape, "dram")


class _Skip(Exception):
    """No value fits the drawn op: draw another."""


def _pick(draw, draft: _Draft, where=lambda t: True) -> int:
    options = [i for i in draft.values if where(draft.type(i))]
    if not options:
        raise _Skip
    return draw(st.sampled_from(options))


def _float(t: TensorType) -> bool:
    return t.dtype in FLOATS


def _step(draw, draft: _Draft) -> None:
    """Draw one op of some family and try to add it."""
    try:
        _draw_op(draw, draft)
    except _Skip:
        pass


def _draw_op(draw, draft: _Draft) -> None:
    kind = draw(st.sampled_from(("load", "load", "unary", "binary", "binary", "compare",
                                 "cast", "reduce", "reduce", "matmul", "relayout",
                                 "transpose", "reshape", "slice", "concat", "broadcast",
                                 "full")))
    m = draft.machine
    if kind == "load" or not draft.values:
        src = draw(st.sampled_from(draft.inputs))
        shape = draft.type(src).shape
        if draw(st.integers(0, 3)) == 0:  # load a static slice of the dram tensor
            bounds = []
            for size in shape:
                lo = draw(st.integers(0, size - 1))
                bounds.append((lo, draw(st.integers(lo + 1, size))))
            sliced = draft.add("slice", [src], {"bounds": tuple(bounds)})
            if sliced is not None:
                src, shape = sliced, draft.type(sliced).shape
        draft.add("load", [src], {"layout": draw(layouts(shape, m))})
    elif kind == "unary":
        x = _pick(draw, draft, lambda t: t.dtype != "bool")
        op = draw(st.sampled_from(UNARY if _float(draft.type(x)) else ("neg", "abs")))
        draft.add(op, [x])
    elif kind in ("binary", "compare"):
        x = _pick(draw, draft, lambda t: t.dtype != "bool")
        t = draft.type(x)
        other = draw(st.sampled_from(("literal", "value", "reduced", "self")))
        if other == "literal":
            y = Const(draw(LITERALS))
        elif other == "reduced" and len(t.shape) > 0:  # x - reduce(x, keepdims): broadcasting
            y = draft.add(draw(st.sampled_from(REDUCE)), [x],
                          {"axis": draw(st.integers(0, len(t.shape) - 1)), "keepdims": True})
        elif other == "value":
            y = _pick(draw, draft, lambda u: u.dtype == t.dtype)  # x itself at worst
        else:
            y = x
        if y is None:
            y = Const(draw(LITERALS))
        args = [x, y] if draw(st.booleans()) else [y, x]
        ops = BINARY if _float(t) else ("add", "sub", "mul", "maximum", "minimum")
        op = draw(st.sampled_from(COMPARE if kind == "compare" else ops))
        out = draft.add(op, args)
        if kind == "compare" and out is not None and draw(st.booleans()):
            draft.add("where", [out, x, Const(draw(LITERALS))])
    elif kind == "cast":
        x = _pick(draw, draft)
        draft.add("cast", [x], {"dtype": draw(st.sampled_from(("f32", "bf16", "i32",
                                                               "bool")))})
    elif kind == "reduce":
        x = _pick(draw, draft, lambda t: t.dtype != "bool")
        rank = len(draft.type(x).shape)
        draft.add(draw(st.sampled_from(REDUCE)), [x],
                  {"axis": draw(st.integers(-rank, rank - 1)), "keepdims": draw(st.booleans())})
    elif kind == "matmul":
        _matmul(draw, draft)
    elif kind == "relayout":
        x = _pick(draw, draft)
        draft.add("relayout", [x], {"layout": draw(layouts(draft.type(x).shape, m))})
    elif kind == "transpose":
        x = _pick(draw, draft)
        rank = len(draft.type(x).shape)
        perm = draw(st.one_of(st.none(), st.permutations(range(rank)).map(tuple)))
        draft.add("transpose", [x], {"perm": perm})
    elif kind == "reshape":
        x = _pick(draw, draft)
        draft.add("reshape", [x], {"shape": draw(_reshaped(draft.type(x).shape))})
    elif kind == "slice":
        x = _pick(draw, draft)
        t = draft.type(x)
        local = t.layout.local_shape()
        bounds = []
        for axis, size in enumerate(t.shape):
            if local[axis] == size and size > 1 and draw(st.booleans()):
                lo = draw(st.integers(0, size - 1))
                bounds.append((lo, draw(st.integers(lo + 1, size))))
            else:
                bounds.append((0, size))
        draft.add("slice", [x], {"bounds": tuple(bounds)})
    elif kind == "concat":
        x = _pick(draw, draft)
        t = draft.type(x)
        local_axes = [a for a, size in enumerate(t.layout.local_shape()) if size == t.shape[a]]
        if local_axes:
            draft.add("concat", [x] * draw(st.integers(1, 3)),
                      {"axis": draw(st.sampled_from(local_axes))})
    elif kind == "broadcast":
        x = _pick(draw, draft)
        shape = draft.type(x).shape
        grown = tuple(draw(st.sampled_from((2, 3))) if s == 1 else s for s in shape)
        if draw(st.booleans()):
            grown = (draw(st.sampled_from((1, 2, 4))),) + grown
        draft.add("broadcast_to", [x], {"shape": grown})
    else:  # full
        rank = draw(st.integers(1, 3))
        shape = tuple(draw(st.sampled_from(draft.dims)) for _ in range(rank))
        draft.add("full", [], {"shape": shape, "value": draw(LITERALS),
                               "dtype": draw(st.sampled_from(FLOATS)),
                               "layout": draw(layouts(shape, m))})


def _matmul(draw, draft: _Draft) -> None:
    """matmul of an existing float value (relaid out to fit) and a loaded or full operand."""
    x = None
    if draw(st.booleans()):
        try:
            x = _pick(draw, draft, lambda t: _float(t) and len(t.shape) in (2, 3))
        except _Skip:
            pass
    if x is not None:
        t = draft.type(x)
        batch, (m, k) = t.shape[:-2], t.shape[-2:]
        dtype = t.dtype
    else:
        batch = () if draw(st.booleans()) else (draw(st.sampled_from((1, 2))),)
        m, k = draw(st.sampled_from(draft.dims)), draw(st.sampled_from(draft.dims))
        dtype, x = draw(st.sampled_from(FLOATS)), None
    n = draw(st.sampled_from(draft.dims))
    ta, tb = _matmul_layouts(draw, draft.machine, tuple(batch), m, k, n, dtype)
    if x is None:
        a = draft.add("full", [], {"shape": ta.shape, "value": draw(LITERALS),
                                   "dtype": dtype, "layout": ta.layout})
    elif draft.type(x).layout == ta.layout:
        a = x
    else:
        a = draft.add("relayout", [x], {"layout": ta.layout})
    src = [i for i in draft.inputs if draft.type(i).shape == tb.shape
           and draft.type(i).dtype == dtype]
    if src and draw(st.booleans()):
        b = draft.add("load", [draw(st.sampled_from(src))], {"layout": tb.layout})
    else:
        b = draft.add("full", [], {"shape": tb.shape, "value": draw(LITERALS),
                                   "dtype": dtype, "layout": tb.layout})
    if a is not None and b is not None:
        draft.add("matmul", [a, b])


@st.composite
def _reshaped(draw, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape of the same size: merge two neighbours, split one, or add/drop a 1."""
    shape = list(shape)
    how = draw(st.sampled_from(("merge", "split", "one")))
    if how == "merge" and len(shape) > 1:
        i = draw(st.integers(0, len(shape) - 2))
        shape[i:i + 2] = [shape[i] * shape[i + 1]]
    elif how == "split" and any(_divisors(s)[:-1] for s in shape):
        i = draw(st.sampled_from([j for j, s in enumerate(shape) if _divisors(s)[:-1]]))
        d = draw(st.sampled_from(_divisors(shape[i])[:-1]))
        shape[i:i + 1] = [d, shape[i] // d]
    elif 1 in shape and len(shape) > 1 and draw(st.booleans()):
        shape.remove(1)
    else:
        shape.insert(draw(st.integers(0, len(shape))), 1)
    return tuple(shape)


@st.composite
def kernels(draw, machine=SMALL, max_ops: int = 12, min_ops: int = 1,
            dims: tuple[int, ...] = DIMS) -> Kernel:
    """A well-formed kernel for ``machine``: 1-3 dram inputs with axes drawn from
    ``dims``, ``min_ops`` to ``max_ops`` op draws from the whole op table (a draw may add
    up to three helper ops: a dram slice, a relayout or full operand for matmul, a
    keepdims reduction to broadcast), and a store of a pe value as the last node."""
    draft = _Draft(machine, tuple(dims))
    for j, t in enumerate(draw(st.lists(_input_type(draft.dims), min_size=1, max_size=3))):
        draft.inputs.append(draft.builder.input(f"x{j}", t))
    wanted = draw(st.integers(min_ops, max_ops))
    attempts = 0
    while len(draft.builder.nodes) - len(draft.inputs) < wanted and attempts < 4 * max_ops:
        attempts += 1
        _step(draw, draft)
    if not draft.values:  # every draw broke a constraint: load the first input plainly
        shape = draft.type(draft.inputs[0]).shape
        plain = Layout(shape, tuple((Factor(s),) for s in shape))
        draft.add("load", [draft.inputs[0]], {"layout": plain})
    assume(draft.values)  # only when even that does not fit in PE memory (big dims)
    last = draft.values[-1] if draw(st.integers(0, 3)) else draw(st.sampled_from(draft.values))
    out = draft.add("store", [last])
    return draft.builder.finish("kernel", out)



def assert_same_exact_values(kernel, out, machine, tolerance: float) -> None:
    """A transformed kernel checks, renders back to itself, and computes the kernel's
    exact-mode values (float64, no rounding) on random inputs in [-2, 2]."""
    import numpy as np

    from stochopt.backend.emulate import emulate, random_inputs
    from stochopt.leir import parse, render, typecheck

    assert typecheck(out, machine) == out and parse(render(out), machine.name) == out
    inputs = random_inputs(kernel, seed=2, low=-2.0, high=2.0)
    with np.errstate(all="ignore"):
        want = emulate(kernel, inputs, exact=True)
        got = emulate(out, inputs, exact=True)
    np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance, equal_nan=True)


def assert_transform_keeps_values_or_refuses(kernel, data, where, transform, refusal: str,
                                             tolerance: float, machine=SMALL) -> None:
    """At a site drawn from where(kernel), transform gives the same exact values, or
    refuses with a ConstraintError that starts with `refusal` (or names a line)."""
    sites = where(kernel)
    assume(sites)
    site = data.draw(st.sampled_from(sites))
    try:
        out = transform(kernel, site, machine)
    except ConstraintError as e:
        assert str(e).startswith((refusal, "line")), str(e)
        return
    assert_same_exact_values(kernel, out, machine, tolerance)
