"""Type and layout rules of LEIR ops: given the input types and static arguments, the
output type, or a ConstraintError that says what to write instead.

The op table (ops.py) names one of these per op. Layout rules follow one idea: a value
is available where it is stored (its spread levels) and everywhere it is replicated
(B@ levels); an op may combine values only where all of them are available.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Any

from stochopt.errors import ConstraintError
from stochopt.leir.layout import LEVELS, Factor, Layout, check_layout
from stochopt.leir.types import TensorType, check_dtype, is_float


@dataclass(frozen=True, slots=True, eq=False)
class Const:
    """A scalar literal operand (Python number) of an elementwise op."""
    value: float | int | bool

    # nan == nan here, or no kernel with a nan literal would equal its own re-parse
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Const):
            return NotImplemented
        a, b = self.value, other.value
        return a == b or (a != a and b != b)

    def __hash__(self) -> int:
        return hash("nan") if self.value != self.value else hash(self.value)

    def __str__(self) -> str:
        v = self.value
        if type(v) not in (int, float, bool) and hasattr(v, "item"):
            v = v.item()  # a numpy scalar reprs as np.float32(0.5), which is not LEIR
        if isinstance(v, float):
            if v != v:
                return "nan"
            if v in (float("inf"), float("-inf")):
                return "inf" if v > 0 else "-inf"
        return repr(v)


Operand = TensorType | Const


def _name(t: Operand, names: list[str] | None = None, i: int = 0) -> str:
    if names and i < len(names):
        return names[i]
    return str(t) if isinstance(t, Const) else t.describe()


# ---------------------------------------------------------------------------------
# layouts
# ---------------------------------------------------------------------------------

def canonical_axes(axes: list[list[Factor]] | tuple) -> tuple[tuple[Factor, ...], ...]:
    """Merge neighbouring local factors and drop size-1 factors (an axis keeps one)."""
    out = []
    for axis in axes:
        merged: list[Factor] = []
        for f in axis:
            if f.size == 1:
                continue
            if f.level is None and merged and merged[-1].level is None:
                merged[-1] = Factor(merged[-1].size * f.size)
            else:
                merged.append(f)
        out.append(tuple(merged) or (Factor(1),))
    return tuple(out)


def make_layout(shape, axes, replicated) -> Layout:
    return Layout(tuple(shape), canonical_axes(axes), frozenset(replicated))


def checked_layout(layout: Any, shape: tuple[int, ...], machine, what: str) -> Layout:
    if not isinstance(layout, Layout):
        raise ConstraintError(f"{what} needs a layout string")
    if layout.shape != tuple(shape):
        raise ConstraintError(
            f"layout {layout} is for shape {layout.shape}, but the tensor has shape {shape}",
            hint=f"write a layout for {tuple(shape)}")
    check_layout(layout, machine.fanout)
    # (8,1) and (2,4) lay an axis out as (8) does: compare layouts in canonical form
    return make_layout(layout.shape, layout.axes, layout.replicated)


def _padded(layout: Layout, rank: int) -> tuple[tuple[Factor, ...], ...]:
    return ((Factor(1),),) * (rank - len(layout.axes)) + layout.axes


def broadcast_shape(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        dims = {s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0} - {1}
        if len(dims) > 1:
            raise ConstraintError(f"shapes {' and '.join(str(s) for s in shapes)} "
                                  "do not broadcast", hint="sizes must match or be 1")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def elementwise_layout(tensors: list[TensorType], names: list[str]) -> Layout:
    """Layout of an elementwise result: operands must be available on the same PEs."""
    shape = broadcast_shape([t.shape for t in tensors])
    rank = len(shape)
    padded = [_padded(t.layout, rank) for t in tensors]
    full_shapes = [(1,) * (rank - len(t.shape)) + t.shape for t in tensors]
    axes = []
    for i in range(rank):
        owners = [j for j, s in enumerate(full_shapes) if s[i] == shape[i]]
        ref = padded[owners[0]][i]
        for j in owners[1:]:
            if padded[j][i] != ref:
                raise ConstraintError(
                    f"layouts differ on axis {i}: {names[owners[0]]} has "
                    f"({','.join(map(str, ref))}), {names[j]} has "
                    f"({','.join(map(str, padded[j][i]))})",
                    hint=f"add relayout({names[j]}, \"{tensors[owners[0]].layout}\")"
                    if tensors[j].shape == tensors[owners[0]].shape else
                    "relayout one operand so both lay the axis out the same way")
        axes.append(ref)
    out_levels = {f.level for axis in axes for f in axis if f.level}
    for j, t in enumerate(tensors):
        for i in range(rank):
            if full_shapes[j][i] == 1 and shape[i] > 1:
                need = {f.level for f in axes[i] if f.level} - t.layout.replicated
                if need:
                    lv = ",".join(x for x in LEVELS if x in need | t.layout.replicated)
                    raise ConstraintError(
                        f"{names[j]} is broadcast along axis {i}, which is spread over "
                        f"{', '.join(sorted(need))}, but {names[j]} is not replicated there",
                        hint=f"replicate it: relayout({names[j]}, \"...; B@[{lv}]\")")
    replicated = frozenset.intersection(*(t.layout.replicated for t in tensors))
    return make_layout(shape, axes, replicated - out_levels)


# ---------------------------------------------------------------------------------
# rules
# ---------------------------------------------------------------------------------

def _need_pe(t: Operand, op: str, name: str) -> TensorType:
    if isinstance(t, Const):
        raise ConstraintError(f"{op}() needs a tensor here, got the literal {t}")
    if t.location != "pe":
        raise ConstraintError(f"{op}() takes a pe tensor, got {name} @ dram",
                              hint=f'load it first: load({name}, "...")')
    return t


def elementwise(op: str, ins: list[Operand], attrs: dict, machine, names: list[str],
                *, float_only: bool = False, result: str | None = None,
                condition: bool = False) -> TensorType:
    """Rule of every elementwise op; ``result='bool'`` for comparisons, ``condition`` for where."""
    tensors = [_need_pe(t, op, _name(t, names, i)) for i, t in enumerate(ins)
               if not isinstance(t, Const)]
    tnames = [_name(t, names, i) for i, t in enumerate(ins) if not isinstance(t, Const)]
    if not tensors:
        raise ConstraintError(f"{op}() needs at least one tensor operand, got only literals")
    values = ins[1:] if condition else ins
    if condition:
        c = ins[0]
        if isinstance(c, Const) or c.dtype != "bool":
            raise ConstraintError(f"where() takes a bool condition first, got {_name(c, names)}",
                                  hint="compare first, e.g. gt(x, 0.0)")
    dtypes = {t.dtype for t in values if not isinstance(t, Const)}
    if len(dtypes) > 1:
        a, b = sorted(dtypes)
        raise ConstraintError(f"{op}() operands have different dtypes {a} and {b}",
                              hint=f'cast one: cast(x, "{a}")')
    if not dtypes:  # where(c, 1.0, 0.0): the value dtype is f32
        dtypes = {"f32"}
    dtype = dtypes.pop()
    if float_only and not is_float(dtype):
        raise ConstraintError(f"{op}() takes a float tensor, got {dtype}",
                              hint='cast it first: cast(x, "f32")')
    if dtype == "bool" and result != "bool" and op not in ("where", "eq"):
        raise ConstraintError(f"{op}() does not take bool tensors",
                              hint='cast it first: cast(x, "f32")')
    if result is None:
        for c in values:
            if isinstance(c, Const):
                check_literal(c.value, dtype, op)
    layout = elementwise_layout(tensors, tnames)
    return TensorType(result or dtype, layout.shape, "pe", layout)


I32_RANGE = (-(2**31), 2**31 - 1)


def check_literal(value: Any, dtype: str, op: str) -> None:
    """An i32 result holds whole numbers in range; a literal outside them has no i32 value
    (numpy would silently wrap or overflow)."""
    if dtype != "i32":
        return
    lo, hi = I32_RANGE
    whole = value == value and value not in (float("inf"), float("-inf")) and value == int(value)
    if not whole or not lo <= value <= hi:
        raise ConstraintError(f"{op}(): the literal {Const(value)} is not an i32 value",
                              hint=f"use a whole number in {lo}..{hi}, or cast to f32 first")


def cast_rule(op, ins, attrs, machine, names) -> TensorType:
    t = _need_pe(ins[0], op, _name(ins[0], names))
    return TensorType(check_dtype(attrs["dtype"]), t.shape, "pe", t.layout)


def _axis(axis: Any, rank: int, op: str) -> int:
    if not isinstance(axis, int) or isinstance(axis, bool) or not -rank <= axis < rank:
        raise ConstraintError(f"{op}(): axis {axis!r} is out of range for rank {rank}",
                              hint=f"use an axis in 0..{rank - 1}")
    return axis % rank


def reduce_rule(op, ins, attrs, machine, names) -> TensorType:
    t = _need_pe(ins[0], op, _name(ins[0], names))
    if t.dtype == "bool":
        raise ConstraintError(f"{op}() does not take bool tensors", hint='cast(x, "f32") first')
    axis = _axis(attrs["axis"], len(t.shape), op)
    lay = t.layout
    gone = lay.axis_levels(axis)
    axes = list(lay.axes)
    shape = list(t.shape)
    if attrs["keepdims"]:
        axes[axis], shape[axis] = (Factor(1),), 1
    else:
        del axes[axis], shape[axis]
        if not shape:
            raise ConstraintError(f"{op}() would leave a rank-0 tensor",
                                  hint="pass keepdims=True")
    # a level that also spreads another axis stays spread: only partly replicated, so not B@
    still = {f.level for ax in axes for f in ax if f.level}
    layout = make_layout(shape, axes, (lay.replicated | gone) - still)
    return TensorType(t.dtype, tuple(shape), "pe", layout)


def matmul_rule(op, ins, attrs, machine, names) -> TensorType:
    a = _need_pe(ins[0], op, _name(ins[0], names))
    b = _need_pe(ins[1], op, _name(ins[1], names, 1))
    an, bn = _name(a, names), _name(b, names, 1)
    if a.dtype != b.dtype or a.dtype not in ("f32", "bf16"):
        raise ConstraintError(f"matmul() takes two f32 or two bf16 operands, "
                              f"got {a.dtype} and {b.dtype}", hint='cast(x, "bf16") both')
    if len(a.shape) < 2 or len(a.shape) != len(b.shape):
        raise ConstraintError(f"matmul() takes operands of equal rank >= 2, got shapes "
                              f"{a.shape} and {b.shape}", hint="reshape them")
    if a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
        raise ConstraintError(f"matmul() shapes {a.shape} and {b.shape} do not match",
                              hint="a is (..., M, K), b is (..., K, N)")
    la, lb = a.layout, b.layout
    if la.axes[:-2] != lb.axes[:-2]:
        raise ConstraintError("matmul(): batch axes are laid out differently",
                              hint=f"relayout {bn} so its batch axes match {an}")
    ka, kb = la.axes[-1], lb.axes[-2]
    if ka != kb:
        raise ConstraintError(
            f"matmul(): the contraction axis is laid out differently: {an} has "
            f"({','.join(map(str, ka))}), {bn} has ({','.join(map(str, kb))})",
            hint="relayout one so the K axis has the same factors in both")
    m_levels, n_levels = la.axis_levels(-2), lb.axis_levels(-1)
    if m_levels & n_levels:
        raise ConstraintError(f"matmul(): M and N are both spread over "
                              f"{', '.join(sorted(m_levels & n_levels))}",
                              hint="spread M and N over different levels")
    for x, xn, need in ((a, an, n_levels), (b, bn, m_levels)):
        missing = need - x.layout.replicated
        if missing:
            lv = ",".join(v for v in LEVELS if v in missing | x.layout.replicated)
            raise ConstraintError(
                f"matmul(): {xn} must be replicated over {', '.join(sorted(missing))}, "
                "where the other operand is spread", hint=f'relayout({xn}, "...; B@[{lv}]")')
    axes = la.axes[:-1] + (lb.axes[-1],)
    shape = a.shape[:-1] + (b.shape[-1],)
    spread = {f.level for ax in axes for f in ax if f.level}
    replicated = ((la.replicated & lb.replicated) | la.axis_levels(-1)) - spread
    return TensorType("f32", shape, "pe", make_layout(shape, axes, replicated))


def load_rule(op, ins, attrs, machine, names) -> TensorType:
    x = ins[0]
    if isinstance(x, Const) or x.location != "dram":
        raise ConstraintError(f"load() takes a dram tensor (a kernel input or a slice of one), "
                              f"got {_name(x, names)}", hint="it is already loaded")
    layout = checked_layout(attrs["layout"], x.shape, machine, "load()")
    return TensorType(x.dtype, x.shape, "pe", layout)


def relayout_rule(op, ins, attrs, machine, names) -> TensorType:
    x = _need_pe(ins[0], op, _name(ins[0], names))
    layout = checked_layout(attrs["layout"], x.shape, machine, "relayout()")
    return TensorType(x.dtype, x.shape, "pe", layout)


def store_rule(op, ins, attrs, machine, names) -> TensorType:
    x = _need_pe(ins[0], op, _name(ins[0], names))
    return TensorType(x.dtype, x.shape, "dram")


def full_rule(op, ins, attrs, machine, names) -> TensorType:
    shape = attrs["shape"]
    dtype = check_dtype(attrs["dtype"])
    check_literal(attrs["value"], dtype, op)
    layout = checked_layout(attrs["layout"], shape, machine, "full()")
    return TensorType(dtype, tuple(shape), "pe", layout)


def transpose_rule(op, ins, attrs, machine, names) -> TensorType:
    x = _need_pe(ins[0], op, _name(ins[0], names))
    perm = attrs["perm"] if attrs["perm"] is not None else tuple(reversed(range(len(x.shape))))
    if sorted(perm) != list(range(len(x.shape))):
        raise ConstraintError(f"transpose(): {perm} is not a permutation of the "
                              f"{len(x.shape)} axes", hint="e.g. transpose(x, (1, 0))")
    lay = x.layout
    shape = tuple(x.shape[p] for p in perm)
    return TensorType(x.dtype, shape, "pe",
                      make_layout(shape, [lay.axes[p] for p in perm], lay.replicated))


def reshape_rule(op, ins, attrs, machine, names) -> TensorType:
    x = _need_pe(ins[0], op, _name(ins[0], names))
    shape = tuple(attrs["shape"])
    if prod(shape) != x.numel:
        raise ConstraintError(f"reshape(): cannot reshape {x.shape} to {shape}",
                              hint="the sizes must multiply to the same total")
    factors: list[Factor] = []
    for f in (f for axis in x.layout.axes for f in axis if f.size > 1):
        if f.level is None and factors and factors[-1].level is None:
            factors[-1] = Factor(factors[-1].size * f.size)  # (2),(6) is 12 local elements
        else:
            factors.append(f)
    axes: list[list[Factor]] = []
    k = 0
    for size in shape:
        axis: list[Factor] = []
        need = size
        while need > 1:
            if k >= len(factors):
                break
            f = factors[k]
            if f.size <= need and need % f.size == 0:
                axis.append(f)
                need //= f.size
                k += 1
            elif f.level is None and f.size % need == 0:
                axis.append(Factor(need))
                factors[k] = Factor(f.size // need)
                need = 1
            else:
                spread = next((g for g in factors[k:] if g.level), f)
                raise ConstraintError(
                    f"reshape(): {x.shape} -> {shape} would split or merge across the spread "
                    f"factor {spread} of layout {x.layout}",
                    hint="relayout first so the reshaped axes are local")
        axes.append(axis)
    return TensorType(x.dtype, shape, "pe", make_layout(shape, axes, x.layout.replicated))


def slice_rule(op, ins, attrs, machine, names) -> TensorType:
    x = ins[0]
    if isinstance(x, Const):
        raise ConstraintError("only tensors can be sliced")
    bounds = attrs["bounds"]
    if len(bounds) != len(x.shape):
        raise ConstraintError(f"slice has {len(bounds)} bounds for rank {len(x.shape)}")
    shape = []
    for axis, ((lo, hi), size) in enumerate(zip(bounds, x.shape, strict=True)):
        if not 0 <= lo < hi <= size:
            raise ConstraintError(f"slice {lo}:{hi} of axis {axis} is out of range 0..{size}",
                                  hint="slices are static and non-empty")
        shape.append(hi - lo)
    shape = tuple(shape)
    if x.location == "dram":
        return TensorType(x.dtype, shape, "dram")
    lay = x.layout
    axes = list(lay.axes)
    for axis, (lo, hi) in enumerate(bounds):
        if (lo, hi) != (0, x.shape[axis]):
            axes[axis] = _sliced_factors(lay.axes[axis], x.shape[axis], lo, hi, axis)
    return TensorType(x.dtype, shape, "pe", make_layout(shape, axes, lay.replicated))


def _sliced_factors(factors: tuple[Factor, ...], size: int, lo: int, hi: int,
                   axis: int) -> tuple[Factor, ...]:
    """The factors of axis ``axis`` cut to lo:hi. A local axis keeps its kept extent. A
    spread axis may be cut only in whole blocks of its outermost factor, when that
    factor is local: every PE then holds the same blocks of the kept rows, so the slice
    is a local copy and the spread factors inside stay as they were."""
    levels = sorted({f.level for f in factors if f.level})
    if not levels:
        return (Factor(hi - lo),)
    outer = factors[0]
    block = size // outer.size
    if outer.level is None and lo % block == 0 and hi % block == 0:
        kept = (hi - lo) // block
        return ((Factor(kept),) if kept > 1 else ()) + factors[1:]
    raise ConstraintError(
        f"slice of axis {axis}, which is spread over {', '.join(levels)}"
        + (f": {lo}:{hi} does not keep whole blocks of {block} (its outermost local "
           f"factor is {outer.size})" if outer.level is None else ""),
        hint="slice the dram tensor before load(), relayout so the axis is local, or "
             "give the axis an outermost local factor whose blocks the slice keeps whole")


def concat_rule(op, ins, attrs, machine, names) -> TensorType:
    if not ins:
        raise ConstraintError("concat() takes a list of at least one tensor")
    if all(isinstance(t, TensorType) and t.location == "dram" for t in ins):
        return _dram_concat(ins, attrs, op)
    ts = [_need_pe(t, op, _name(t, names, i)) for i, t in enumerate(ins)]
    rank = len(ts[0].shape)
    axis = _axis(attrs["axis"], rank, op)
    first, first_name = ts[0], _name(ts[0], names)
    for i, t in enumerate(ts[1:], 1):
        name = _name(t, names, i)
        if t.dtype != first.dtype:
            raise ConstraintError(
                f"concat() operands must share dtype and rank: operand {i} ({name}) is "
                f"{t.dtype}, the first ({first_name}) {first.dtype}",
                hint=f'cast it: cast({name}, "{first.dtype}")')
        if len(t.shape) != rank:
            raise ConstraintError(
                f"concat() operands must share dtype and rank: operand {i} ({name}) has "
                f"shape {t.shape}, the first ({first_name}) {first.shape}",
                hint=f"reshape it to rank {rank}")
        for a in range(rank):
            if a != axis and (t.shape[a] != first.shape[a]
                              or t.layout.axes[a] != first.layout.axes[a]):
                raise ConstraintError(f"concat(): operand {i} differs from the first on axis {a}",
                                      hint="relayout it to match")
        if t.layout.replicated != first.layout.replicated:
            raise ConstraintError(
                f"concat(): operand {i} ({name}) is replicated over "
                f"{_replication(t.layout)}, the first ({first_name}) over "
                f"{_replication(first.layout)}",
                hint=f"relayout {name} without B@" if not first.layout.replicated
                else f'relayout {name} so it is replicated there too: "...; B@'
                     f'{_replication(first.layout)}"')
    for i, t in enumerate(ts):
        if t.layout.axis_levels(axis):
            raise ConstraintError(f"concat() along axis {axis}, which operand {i} spreads "
                                  "over the tree", hint="relayout so that axis is local")
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in ts)
    axes = list(first.layout.axes)
    axes[axis] = (Factor(shape[axis]),)
    return TensorType(first.dtype, tuple(shape), "pe",
                      make_layout(shape, axes, first.layout.replicated))


def _replication(layout: Layout) -> str:
    """The levels a layout replicates over, as B@ writes them, or "no level"."""
    levels = [lv for lv in LEVELS if lv in layout.replicated]
    return f"[{','.join(levels)}]" if levels else "no level"


def _dram_concat(ins: list[TensorType], attrs, op: str) -> TensorType:
    """Stored tiles side by side in DRAM: each store writes its region of the result."""
    first = ins[0]
    axis = _axis(attrs["axis"], len(first.shape), op)
    for i, t in enumerate(ins[1:], 1):
        if t.dtype != first.dtype or len(t.shape) != len(first.shape) or any(
                a != axis and t.shape[a] != first.shape[a] for a in range(len(t.shape))):
            raise ConstraintError(f"concat(): stored tile {i} is {t.signature()}, which does "
                                  f"not sit beside {first.signature()} along axis {axis}")
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in ins)
    return TensorType(first.dtype, tuple(shape), "dram")


def broadcast_to_rule(op, ins, attrs, machine, names) -> TensorType:
    x = _need_pe(ins[0], op, _name(ins[0], names))
    shape = tuple(attrs["shape"])
    if len(shape) < len(x.shape) or broadcast_shape([x.shape, shape]) != shape:
        raise ConstraintError(f"broadcast_to(): cannot broadcast {x.shape} to {shape}")
    axes = list(_padded(x.layout, len(shape)))
    full = (1,) * (len(shape) - len(x.shape)) + x.shape
    for i, size in enumerate(shape):
        if full[i] == 1 and size > 1:
            axes[i] = (Factor(size),)
    return TensorType(x.dtype, shape, "pe", make_layout(shape, axes, x.layout.replicated))


def check_local_memory(t: TensorType, machine, op: str) -> None:
    """A single pe value larger than a PE's memory can never exist."""
    if t.location == "pe" and t.local_bytes() > machine.pe_local_bytes:
        raise ConstraintError(
            f"{op}() makes a value of {t.local_bytes()} bytes per PE, more than the "
            f"{machine.pe_local_bytes} bytes of PE local memory",
            hint="spread it over more of the tree")
