"""The magnitude behind each output element: the local scale its tolerance follows.

A kernel's rounding error at an element follows the size of the terms that produce it,
not the size of the whole output: a sum of large terms that cancel to a small result
rounds at the size of its terms, and a huge value elsewhere (a masked row's -1e30)
says nothing about how this element rounds. So the check scales each element's
tolerance by its *magnitude*, computed from the baseline kernel (never from the
candidate, which could inflate its own) in float64 on the same input:

    input x            -> |x|
    a + b, a - b       -> M(a) + M(b)          (the terms before they cancel)
    a * b              -> M(a) * M(b)
    a / b              -> M(a) / |b|
    matmul(a, b)       -> matmul(M(a), M(b))    (the sum of |products|)
    reduce_sum         -> sum of M             (the terms of the reduction)
    reduce_max/min     -> M of the element chosen
    where, maximum     -> M of the operand chosen
    sqrt(a)            -> sqrt(M(a))
    other functions    -> |f(a)|               (exp, tanh, log, rsqrt, reciprocal)
    movement, shape    -> the same op on M

and the element's magnitude is the larger of that and |reference| (docs/verification.md).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from stochopt.backend.casts import cast
from stochopt.leir.ir import Kernel
from stochopt.leir.ops import OPS
from stochopt.leir.rules import Const

_SAME_OP = ("load", "store", "relayout", "slice", "transpose", "reshape", "broadcast_to",
            "concat")
_ADDITIVE = ("add", "sub")


def magnitudes(kernel: Kernel, inputs: Mapping[str, np.ndarray],
               reference: np.ndarray | None = None) -> np.ndarray:
    """Per output element, the magnitude of the terms the kernel combines into it (see the
    module doc), at least |reference| where the reference is given and finite. Where
    the propagation is not finite but the reference is (0 * inf in a masked branch),
    the largest finite magnitude of the element's row (last axis) stands in."""
    values: list = [None] * len(kernel.nodes)
    sizes: list = [None] * len(kernel.nodes)
    with np.errstate(all="ignore"):
        for i, node in enumerate(kernel.nodes):
            if node.op == "input":
                x = np.asarray(inputs[node.attr("name")])
                values[i] = cast(x, np.float64) if x.dtype != np.bool_ else x
                sizes[i] = np.abs(cast(values[i], np.float64))
                continue
            args = [a.value if isinstance(a, Const) else values[a] for a in node.args]
            mags = [abs(float(a.value)) if isinstance(a, Const) else sizes[a]
                    for a in node.args]
            attrs = dict(node.attrs)
            value = np.asarray(OPS[node.op].evaluate(args, attrs))
            if node.type.dtype in ("f32", "bf16"):
                value = cast(value, np.float64)
            values[i] = value
            sizes[i] = _magnitude(node.op, args, mags, attrs, value)
    out = np.asarray(sizes[kernel.output], np.float64)
    if reference is None:
        return out
    ref = np.abs(np.asarray(reference, np.float64))
    row_finite = np.where(np.isfinite(out), out, 0.0).max(axis=-1, keepdims=True) \
        if out.ndim else out
    out = np.where(np.isfinite(out), out, row_finite)
    return np.where(np.isfinite(ref), np.maximum(out, ref), out)


def _magnitude(op: str, args: list, mags: list, attrs: dict, value: np.ndarray):
    if op in _SAME_OP:
        return np.asarray(OPS[op].evaluate(mags, attrs), np.float64)
    if op in _ADDITIVE:
        return np.add(mags[0], mags[1])
    if op == "mul":
        return np.multiply(mags[0], mags[1])
    if op == "div":
        return np.divide(mags[0], np.abs(args[1]))
    if op == "matmul":
        return np.matmul(mags[0], mags[1])
    if op == "reduce_sum":
        return np.sum(mags[0], axis=attrs["axis"], keepdims=attrs["keepdims"])
    if op in ("reduce_max", "reduce_min"):
        pick = np.argmax if op == "reduce_max" else np.argmin
        where = np.expand_dims(pick(args[0], axis=attrs["axis"]), attrs["axis"])
        chosen = np.take_along_axis(mags[0], where, attrs["axis"])
        return chosen if attrs["keepdims"] else np.squeeze(chosen, attrs["axis"])
    if op == "where":
        return np.where(args[0], mags[1], mags[2])
    if op in ("maximum", "minimum"):
        first = np.greater_equal(args[0], args[1]) if op == "maximum" else np.less_equal(
            args[0], args[1])
        return np.where(first, mags[0], mags[1])
    if op == "sqrt":
        return np.sqrt(mags[0])
    if op == "cast":
        return mags[0] if value.dtype == np.float64 else np.abs(cast(value, np.float64))
    if op in ("neg", "abs"):
        return mags[0]
    return np.abs(cast(value, np.float64))  # functions, comparisons, full


def reduction_terms(kernel: Kernel) -> int:
    """How many terms the kernel's sums add up on the way to its output, all of them
    together (a matmul's contraction counts as a sum of its K terms, each sum node once):
    rounding the same additions in another order differs by about sqrt(terms / 6) units
    in the last place of the terms' size (compare.REORDER_SIGMAS). Taken from the
    baseline, never from the candidate, which could add sums to widen its own floor."""
    from stochopt.verify.traced import needed

    terms = 0
    for node, need in zip(kernel.nodes, needed(kernel, [kernel.output]), strict=True):
        if not need:
            continue
        if node.op == "matmul":
            terms += kernel.nodes[node.inputs[0]].type.shape[-1]
        elif node.op == "reduce_sum":
            shape = kernel.nodes[node.inputs[0]].type.shape
            axes = node.attr("axis")
            for axis in (axes if isinstance(axes, tuple | list) else (axes,)):
                terms += shape[axis] if axis is not None else int(np.prod(shape))
    return terms
