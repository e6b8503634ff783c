"""How each op tiles: which axis of each operand runs along a given axis of its result.

Cutting a kernel's output into blocks along one axis (transform/tiling.py) walks back from
the output asking every op, for the axis of its result being cut, which axis of each
tensor operand is cut with it, or that the operand does not vary along it (WHOLE: it is
computed once and shared by every block). This is JAX's batching rule turned around;
the op table (ops.py) names one of the rule kinds below per op, as JAX's
``defvectorized`` covers every elementwise op at once.

A rule takes (operand types, result type, static arguments, axis of the result) and
returns one axis or WHOLE per tensor operand (or no axes at all: the op makes each
block's value itself, as a load reading its block's DRAM slice), or raises NotTiled
saying why the op mixes the rows of that axis (a reduction along it, a slice of it).
"""

from __future__ import annotations

from collections.abc import Sequence

from stochopt.leir.types import TensorType

WHOLE = None  # an operand that does not vary along the tiled axis: computed once


class NotTiled(Exception):  # noqa: N818 (a refusal, caught by tiling and named there)
    """The op cannot be cut along this axis; the message says why, in the op's terms."""


def broadcasting(ins: Sequence[TensorType], out: TensorType, attrs: dict,
                 axis: int) -> list[int | None]:
    """Elementwise ops and broadcast_to: numpy broadcasting lines operands up from the
    right; an operand broadcast along the axis (size 1, or missing) is WHOLE there."""
    return [broadcast_axis(t.shape, len(out.shape), axis) for t in ins]


def same_axes(ins: Sequence[TensorType], out: TensorType, attrs: dict,
              axis: int) -> list[int | None]:
    """store, relayout: the result is the operand, moved."""
    return [axis]


def reducing(ins: Sequence[TensorType], out: TensorType, attrs: dict,
             axis: int) -> list[int | None]:
    """Reductions: the result's axes are the operand's, less the reduced one."""
    reduced = attrs["axis"] % len(ins[0].shape)
    source = axis if attrs["keepdims"] or axis < reduced else axis + 1
    if source == reduced:
        raise NotTiled("it reduces along the tiled axis")
    return [source]


def contracting(ins: Sequence[TensorType], out: TensorType, attrs: dict,
                axis: int) -> list[int | None]:
    """matmul: M rows come from a (b whole), N columns from b (a whole), batch from both."""
    a, b = ins
    rank = len(out.shape)
    if axis == rank - 2:
        return [len(a.shape) - 2, WHOLE]
    if axis == rank - 1:
        return [WHOLE, len(b.shape) - 1]
    return [broadcast_axis(t.shape, rank, axis) for t in ins]


def permuting(ins: Sequence[TensorType], out: TensorType, attrs: dict,
              axis: int) -> list[int | None]:
    """transpose: the result's axis is the operand's axis perm[axis]."""
    perm = attrs["perm"] or tuple(reversed(range(len(out.shape))))
    return [perm[axis]]


def slicing(ins: Sequence[TensorType], out: TensorType, attrs: dict,
            axis: int) -> list[int | None]:
    """A pe slice goes through an axis it leaves whole; a dram slice is read by a load,
    which tiling cuts itself."""
    if out.location != "pe":
        raise NotTiled("tiling does not go through a slice of a dram tensor")
    if attrs["bounds"][axis] != (0, ins[0].shape[axis]):
        raise NotTiled("it slices the tiled axis")
    return [axis]


def joining(ins: Sequence[TensorType], out: TensorType, attrs: dict,
            axis: int) -> list[int | None]:
    """A pe concat goes through every axis but the one it joins along."""
    if out.location != "pe":
        raise NotTiled("tiling does not go through a concat of stored tiles")
    if attrs["axis"] % len(out.shape) == axis:
        raise NotTiled("it joins along the tiled axis")
    return [axis] * len(ins)


def made_per_tile(ins: Sequence[TensorType], out: TensorType, attrs: dict,
                  axis: int) -> list[int | None]:
    """load, full: each block's copy makes its own value from its static arguments (a
    load reads its block's DRAM slice, a full fills its block's shape); no operand is cut."""
    return []


def not_tiled(ins: Sequence[TensorType], out: TensorType, attrs: dict,
              axis: int) -> list[int | None]:
    """reshape: rows of the result need not be rows of the operand."""
    raise NotTiled("the tiled axis does not go through it")


def broadcast_axis(shape: tuple[int, ...], out_rank: int, axis: int) -> int | None:
    """The operand's axis under the result's axis ``axis``, or WHOLE if broadcast there."""
    j = axis - (out_rank - len(shape))
    return WHOLE if j < 0 or shape[j] == 1 else j
