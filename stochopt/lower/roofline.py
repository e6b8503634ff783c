"""The roofline of a spec, and the reachable bound beside it: the least cycles any kernel
computing it can take, by bandwidth and peak rates alone, and with the DMA issue cycles
and flights no schedule can hide (stochopt/backend/bound.py)."""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from stochopt.backend.bound import (
    READ,
    Step,
    Traffic,
    bound_cycles,
    chain_lengths,
    link_floor_cycles,
    tail_cycles,
)
from stochopt.backend.cost import peak_rates, roofline_cycles
from stochopt.leir.types import itemsize
from stochopt.lower.trace import TNode, trace
from stochopt.machine import load_machine
from stochopt.spec import Spec

FREE_OPS = ("transpose", "reshape", "slice", "input")


@dataclass(frozen=True)
class SpecRoofline:
    cycles: int
    dram_bytes: int          # inputs read once + output written once
    flops: dict[str, int]    # "matrix": 2MNK per matmul; "vector": one per element
    bound: str               # "dram" or "compute"
    bound_cycles: int = 0    # the reachable bound: roofline plus issue, flights and links


def spec_roofline(spec: Spec, machine=None) -> SpecRoofline:
    """Bytes of inputs and output at their dtypes over DRAM bandwidth, and the traced
    graph's FLOPs over the chip's peak rates; the larger wins."""
    machine = load_machine(machine)
    _, out = trace(spec)
    flops = {"vector": 0, "matrix": 0}
    order = _program_order(out)
    for t in order:
        if t.op == "matmul":
            flops["matrix"] += 2 * prod(t.shape) * t.args[0].shape[-1]
        elif t.op.startswith("reduce_"):
            flops["vector"] += prod(t.args[0].shape)
        elif t.op not in FREE_OPS and t.op != "concat":
            flops["vector"] += prod(t.shape)
    read = [prod(t.shape) * itemsize(t.dtype) for t in spec.inputs.values()]
    written = prod(out.shape) * itemsize(spec.output_dtype)
    nbytes = sum(read) + written
    cycles = roofline_cycles(nbytes, flops, machine)
    dram = nbytes / machine.dram_bytes_per_cycle
    rates = peak_rates(machine)
    compute = max(flops[u] / rates[u] for u in flops)
    steps = _steps(order)  # the output last: its chain is the longest to it
    reachable = bound_cycles(
        nbytes, len(spec.inputs) + 1, flops, chain_lengths(steps, machine)[-1], machine,
        traffic=Traffic(sum(read), written, len(spec.inputs)),
        tail_cycles=tail_cycles(steps, machine),
        link_cycles=link_floor_cycles(steps, read, written, machine))
    return SpecRoofline(cycles, nbytes, flops, "dram" if dram >= compute else "compute",
                        reachable)


def _op(t: TNode) -> str:
    """The LEIR op a traced node becomes (a mean is a sum, then a scale)."""
    return "reduce_sum" if t.op == "mean" else t.op


def _steps(order: list[TNode]) -> list[Step]:
    """The traced graph as the bound's Steps: inputs are what kernels read."""
    index = {id(t): i for i, t in enumerate(order)}
    steps = []
    for t in order:
        args = tuple(index[id(a)] for a in t.args if isinstance(a, TNode))
        shapes = tuple(a.shape for a in t.args if isinstance(a, TNode)) \
            if t.op == "matmul" else ()
        steps.append(Step(READ if t.op == "input" else _op(t), args, t.shape, t.dtype,
                          arg_shapes=shapes))
    return steps


def _program_order(out: TNode) -> list[TNode]:
    """Every traced node the output depends on, each after its arguments."""
    order: list[TNode] = []
    seen: set[int] = set()
    stack: list[tuple[TNode, bool]] = [(out, False)]
    while stack:
        t, expanded = stack.pop()
        if expanded:
            order.append(t)
            continue
        if id(t) in seen:
            continue
        seen.add(id(t))
        stack.append((t, True))
        stack.extend((a, False) for a in t.args if isinstance(a, TNode) and id(a) not in seen)
    return order
