"""Emulation that keeps chosen values: the verifier's view inside a kernel.

emulate() returns the output alone and frees each value after its last use. The
verifier sometimes needs more: the values at a kernel's decision points (coverage.py),
or some nodes computed in native numerics within an exact run (counts.py). `run`
computes only the nodes the wanted ones depend on, keeps the wanted ones, and frees
the rest as emulate does; each op's value is emulate's own (backend.emulate.evaluate_node).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from stochopt.backend.casts import cast
from stochopt.backend.emulate import convert_input, evaluate_node
from stochopt.leir.ir import Kernel
from stochopt.leir.rules import Const
from stochopt.leir.types import native_dtype


def needed(kernel: Kernel, wanted: Iterable[int]) -> list[bool]:
    """Which nodes the wanted ones depend on (themselves included)."""
    need = [False] * len(kernel.nodes)
    stack = list(wanted)
    while stack:
        i = stack.pop()
        if not need[i]:
            need[i] = True
            stack.extend(kernel.nodes[i].inputs)
    return need


def run(kernel: Kernel, inputs: Mapping[str, np.ndarray], wanted: Iterable[int], *,
        exact: bool, native_nodes: frozenset[int] = frozenset()) -> dict[int, np.ndarray]:
    """The values of the wanted nodes on these inputs, in exact mode (float64) or the
    machine's dtypes; nodes in native_nodes are computed in the machine's dtypes even
    in an exact run (their values then widened to float64)."""
    wanted = set(wanted)
    need = needed(kernel, wanted)
    nodes = kernel.nodes
    last = list(range(len(nodes)))
    for i, node in enumerate(nodes):
        if need[i]:
            for a in node.inputs:
                last[a] = i
    values: list = [None] * len(nodes)
    with np.errstate(all="ignore"):
        for i, node in enumerate(nodes):
            if not need[i]:
                continue
            if node.op == "input":
                values[i] = convert_input(node.attr("name"), node.type, inputs, exact)
                continue
            native = not exact or i in native_nodes
            args = [a.value if isinstance(a, Const) else
                    (cast(values[a], native_dtype(nodes[a].type.dtype))
                     if exact and native else values[a]) for a in node.args]
            types = [a if isinstance(a, Const) else nodes[a].type for a in node.args]
            out = evaluate_node(node.op, node.type, types, args, dict(node.attrs),
                                exact=not native)
            values[i] = cast(out, np.float64) if exact and native else out
            for a in node.inputs:
                if last[a] == i and a not in wanted:
                    values[a] = None
    return {i: values[i] for i in wanted}
