"""Values: run a kernel op by op on numpy arrays, rounding as the machine would.

Native mode keeps every value in its dtype: bf16 through ml_dtypes, f32 math in
float32, matmul accumulating in f32; an op whose machine numerics differ from that (the
bf16 sum's pairwise tree, a matmul of subnormal operands) says so in its op table entry
(``Op.native``). Exact mode runs everything in float64 with no rounding, so the
verifier can tell wrong math from rounding. Nothing is kept between calls
(node_values.py keeps values for callers that emulate many kernels on the same inputs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from stochopt.backend.casts import cast
from stochopt.errors import StochoptError
from stochopt.leir.ir import Kernel
from stochopt.leir.ops import BF16, MOVEMENT, OPS, SHAPE_OP
from stochopt.leir.rules import Const
from stochopt.leir.types import TensorType, native_dtype


def emulate(kernel: Kernel, inputs: Mapping[str, np.ndarray],
            exact: bool = False, order: int | None = None) -> np.ndarray:
    """The kernel's output for these inputs (native dtype, or float64 when exact).
    ``order``: a seed; every sum (SUMMED_AXES) then adds its terms in an order shuffled
    by it, the same math rounded as another valid order of additions rounds it."""
    check_emulation_memory(kernel)
    rng = np.random.default_rng(order) if order is not None else None
    values: list[np.ndarray | None] = [None] * len(kernel.nodes)
    last_use = _last_uses(kernel)
    nodes = kernel.nodes
    with np.errstate(all="ignore"):
        for i, node in enumerate(nodes):
            if node.op == "input":
                values[i] = convert_input(node.attr("name"), node.type, inputs, exact)
                continue
            args = [a.value if isinstance(a, Const) else values[a] for a in node.args]
            if rng is not None and node.op in SUMMED_AXES:
                args = _shuffled_sum(node.op, args, dict(node.attrs), rng)
            arg_types = [a if isinstance(a, Const) else nodes[a].type for a in node.args]
            values[i] = evaluate_node(node.op, node.type, arg_types, args, dict(node.attrs),
                                      exact)
            for a in node.inputs:  # free what no later op reads
                if last_use[a] == i and a != kernel.output:
                    values[a] = None
    return values[kernel.output]


# op -> for each argument that holds the terms of its sum, the axis summed (the same
# terms' axis in every argument, so one permutation of it keeps the math)
SUMMED_AXES = {"reduce_sum": lambda attrs: {0: attrs["axis"]},
               "matmul": lambda attrs: {0: -1, 1: -2}}


def _shuffled_sum(op: str, args: list, attrs: dict, rng) -> list:
    """The arguments with the summed axis permuted at random, alike in each."""
    axes = SUMMED_AXES[op](attrs)
    n = args[0].shape[axes[0]]
    perm = rng.permutation(n)
    return [np.take(a, perm, axis=axes[i]) if i in axes else a for i, a in enumerate(args)]


# the most memory one emulation may need (bytes); STOCHOPT_EMULATION_MEMORY overrides
EMULATION_MEMORY = 4 << 30


def check_emulation_memory(kernel: Kernel, budget: int | None = None) -> int:
    """The bytes an emulation of the kernel may hold at once, or a StochoptError before
    any of it is allocated when that is past the budget. Counted as float64 (exact mode),
    every value live from its op to its last use, plus the largest op's operands and
    result held together twice (numpy's temporaries); summed first, since that bound
    almost always passes at once."""
    import os

    if budget is None:
        budget = int(os.environ.get("STOCHOPT_EMULATION_MEMORY", EMULATION_MEMORY))
    sizes = [8 * n.type.numel for n in kernel.nodes]
    if 3 * sum(sizes) <= budget:
        return 3 * sum(sizes)
    last = _last_uses(kernel)
    live, peak = 0, 0
    for i, node in enumerate(kernel.nodes):
        live += sizes[i]
        operands = sum(sizes[a] for a in node.inputs)
        peak = max(peak, live + 2 * (operands + sizes[i]))
        live -= sum(sizes[a] for a in set(node.inputs) if last[a] == i and a != kernel.output)
    if peak > budget:
        raise StochoptError(
            f"emulating kernel {kernel.name} needs about {peak / 2**30:.1f} GiB, past the "
            f"emulation memory budget of {budget / 2**30:.1f} GiB",
            hint="use smaller tensors, or raise STOCHOPT_EMULATION_MEMORY (bytes)")
    return peak


def _last_uses(kernel: Kernel) -> list[int]:
    last = list(range(len(kernel.nodes)))
    for i, n in enumerate(kernel.nodes):
        for a in n.inputs:
            last[a] = i
    return last


def evaluate_node(op: str, out_type: TensorType, arg_types: Sequence, args: list,
                  attrs: dict, exact: bool) -> np.ndarray:
    """The value of one op on its arguments' values (inside np.errstate(all="ignore")).
    Everything a node's value may depend on is a parameter here, so the per-node value
    cache (search/values.py) and emulate() compute alike. Exact values must never depend
    on a layout, nor on whether a float is f32 or bf16 (exact value keys ignore both:
    leir/terms.py); a native rule that reads a layout fact
    other than the summed axis of reduce_sum or matmul must add it to the native value
    key (terms.REDUCTION_ORDER in leir/terms.py)."""
    if exact:
        return _exact(op, args, attrs, out_type.dtype)
    return _native(op, args, attrs, out_type.dtype)


def convert_input(name: str, t: TensorType, inputs: Mapping[str, np.ndarray],
                  exact: bool) -> np.ndarray:
    """A kernel input's value as the kernel sees it: its dtype, or float64 when exact."""
    if name not in inputs:
        raise StochoptError(f"no value given for kernel input {name!r}")
    x = np.asarray(inputs[name])
    if x.shape != t.shape:
        raise StochoptError(f"input {name!r} has shape {x.shape}, the kernel wants {t.shape}")
    if exact:
        return cast(x, np.float64) if t.dtype in ("f32", "bf16") else x.astype(
            np.bool_ if t.dtype == "bool" else np.int64)
    return cast(x, native_dtype(t.dtype))  # values are never written to


def _exact(op: str, args, attrs, dtype: str) -> np.ndarray:
    out = np.asarray(OPS[op].evaluate(args, attrs))
    if dtype == "bool":
        return out.astype(np.bool_, copy=False)
    if dtype == "i32":
        return out.astype(np.int64, copy=False)
    return cast(out, np.float64)


def _native(op: str, args, attrs, dtype: str) -> np.ndarray:
    out_dtype = native_dtype(dtype)
    entry = OPS[op]
    # an op that only moves or reshapes data never rounds: it runs on bf16 values as
    # they are (widening them to float32 and rounding back was half of a native
    # emulation of mla_decode's tiled kernels)
    if entry.kind in (MOVEMENT, SHAPE_OP) and all(
            not isinstance(a, np.ndarray) or a.dtype == out_dtype for a in args):
        return np.asarray(entry.evaluate(args, attrs))
    # bf16 values are computed in float32 and rounded once per op, as the ALU does,
    # unless the op's entry says how the machine computes it (its native numerics)
    widened = [cast(a, np.float32) if isinstance(a, np.ndarray) and a.dtype == BF16 else a
               for a in args]
    out = entry.native(widened, attrs, dtype) if entry.native else entry.evaluate(widened,
                                                                                  attrs)
    return cast(out, out_dtype)


def random_inputs(kernel: Kernel, seed: int = 0, low: float = -10.0,
                  high: float = 10.0) -> dict[str, np.ndarray]:
    """Uniform random values for each kernel input, in its dtype."""
    rng = np.random.default_rng(seed)
    out = {}
    for node in kernel.params:
        t = node.type
        if t.dtype == "bool":
            x = rng.random(t.shape) < 0.5
        elif t.dtype == "i32":
            x = rng.integers(int(low), int(high) + 1, t.shape, dtype=np.int32)
        else:
            x = rng.uniform(low, high, t.shape).astype(native_dtype(t.dtype))
        out[node.attr("name")] = x
    return out
