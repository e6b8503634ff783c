"""Exact mode that sees casts where they matter: integer quantities held in float types.

Exact mode computes every op in float64 and ignores casts between float dtypes, so the
semantic check judges the math and leaves rounding to the precision check. That is
right for measured quantities, whose rounding is noise. It is wrong for counted ones:
a count of kept mask elements summed in bf16 is 256, not 257, once past 256 (bf16
holds whole numbers exactly only up to 2^8, f32 up to 2^24), and the kernel then
divides by the wrong count: a wrong answer, not a rounding, however loose the output's
tolerance.

So a value is *counted* when it is a whole-number quantity by construction: a bool or
i32 input, a whole-number constant that its dtype holds exactly, a cast of a counted
value, and add, sub, mul, neg,
abs, maximum, minimum, where (of counted branches), sums, maxima, minima, matmuls and
the movement and shape ops of counted values (with whole-number literals). exact_output
runs the kernel in exact mode except that counted values held in f32 or bf16 are
computed as the hardware computes them: exactly while the dtype holds them, rounded
where it cannot. Everything else stays exact. A literal the dtype cannot hold (a -1e30
sentinel, which f32 holds as -1.0000000150e30) is a magnitude, not a count: its own
rounding is the literal's, in the spec's arithmetic as in the kernel's, and judging it
exactly would refuse a select written as an additive bias, x + where(m, 0, -1e30).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from stochopt.backend.emulate import emulate
from stochopt.leir.ir import Kernel
from stochopt.leir.rules import Const
from stochopt.leir.types import native_dtype
from stochopt.verify import traced

# ops whose result is a whole number when every tensor operand (and literal) is one
WHOLE_OPS = frozenset({"add", "sub", "mul", "neg", "abs", "maximum", "minimum", "where",
                       "reduce_sum", "reduce_max", "reduce_min", "matmul", "cast", "load",
                       "store", "relayout", "slice", "concat", "transpose", "reshape",
                       "broadcast_to"})
FLOATS = ("f32", "bf16")
# the ops that can round a whole number held in a float; the rest of WHOLE_OPS, and a
# full whose value its dtype holds, give in float64 exactly what the machine gives
ROUNDING_OPS = frozenset({"add", "sub", "mul", "reduce_sum", "matmul", "cast"})


def counted_nodes(kernel: Kernel) -> frozenset[int]:
    """The nodes holding a counted value (module doc) in a float dtype."""
    whole: list[bool] = []
    for node in kernel.nodes:
        if node.op == "input":
            whole.append(node.type.dtype in ("i32", "bool"))
        elif node.op == "full":
            whole.append(_whole(node.attr("value"), node.type.dtype))
        elif node.op == "cast" and node.attr("dtype") in ("i32", "bool"):
            whole.append(True)
        elif node.op in ("gt", "ge", "lt", "le", "eq"):
            whole.append(True)
        elif node.op in WHOLE_OPS:
            tensors = node.inputs[1:] if node.op == "where" else node.inputs
            literals = [a for a in node.args if isinstance(a, Const)]
            whole.append(all(whole[a] for a in tensors) and all(
                _whole(c.value, node.type.dtype) for c in literals))
        else:
            whole.append(False)
    return frozenset(i for i, node in enumerate(kernel.nodes)
                     if whole[i] and node.type.dtype in FLOATS)


def rounding_counts(kernel: Kernel) -> frozenset[int]:
    """The counted nodes whose value the machine may round: the ones exact_output
    computes as the hardware does. A kernel with none (a zero-filled accumulator is
    counted, and exact everywhere) runs in plain exact mode, whose node values a full
    check shares between kernels (backend/node_values.py)."""
    return frozenset(i for i in counted_nodes(kernel) if kernel.nodes[i].op in ROUNDING_OPS)


def _whole(value, dtype: str) -> bool:
    """A whole number that the node's dtype holds exactly (any, for ints and bools)."""
    if not (isinstance(value, bool | int | np.integer) or float(value).is_integer()):
        return False
    return dtype not in FLOATS or float(np.asarray(value, native_dtype(dtype))) == float(value)


def exact_output(kernel: Kernel, inputs: Mapping[str, np.ndarray],
                 counted: frozenset[int] | None = None) -> np.ndarray:
    """The kernel's exact-mode output, with counted values in float dtypes computed as
    the hardware does (module doc); emulate(exact=True) when it has none."""
    counted = rounding_counts(kernel) if counted is None else counted
    if not counted:
        return emulate(kernel, inputs, exact=True)
    return traced.run(kernel, inputs, [kernel.output], exact=True,
                      native_nodes=counted)[kernel.output]
