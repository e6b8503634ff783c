"""A lower bound that a kernel can reach: the roofline plus what no schedule can hide.

The roofline (cost.roofline_cycles) counts bandwidth and peak arithmetic only. A real
kernel also pays, on the single DMA queue, the issue cycles of every transfer, and it
cannot hide two DMA flights: the first load must land before anything computes on it,
and the last store is issued only once its data is computed. ``bound_cycles`` adds those
and stays a lower bound of every schedule the cost model can produce (a property test
checks it on generated kernels); docs/machine.md section 6 derives it.
"""

from __future__ import annotations

from collections.abc import Iterable
from math import ceil

from stochopt.backend.cost import op_work, peak_rates, roofline_cycles, roofline_inputs
from stochopt.leir.ir import Kernel
from stochopt.leir.ops import CONTRACTION, ELEMENTWISE, OPS, REDUCTION
from stochopt.machine import Machine, load_machine


def least_op_cycles(op: str, machine: Machine) -> int:
    """The fewest cycles an op of this name can take on any layout: one vector pass over
    one ALU word (elementwise, reductions kept local) or one MAU step (matmul); ops that
    only move data or relabel it could be written away, so they count 0."""
    kind = OPS[op].kind if op in OPS else None
    if kind == ELEMENTWISE:
        return OPS[op].cost.cycles_per_elem + machine.latency["vector"]
    if kind == REDUCTION:
        return 1 + machine.latency["vector"]
    if kind == CONTRACTION:
        return 1 + machine.latency["matrix"]
    return 0


def bound_cycles(dram_bytes: int, transfers: int, flops_by_unit: dict[str, int],
                 chain_cycles: int | None, machine: Machine) -> int:
    """The least cycles of a kernel that moves ``dram_bytes`` in at least ``transfers``
    DMA transfers (one load per input, one store) and does this arithmetic after its first
    load lands and before its last store, along a dependent chain of at least
    ``chain_cycles`` (None: nothing it stores depends on a load). The largest of:

    - roofline: bytes over the chip's bandwidth, FLOPs over the peak rates;
    - stream:   the DMA queue runs every byte at the chip's bandwidth plus each transfer's
                issue cycles, and the last transfer then flies ``latency["dma"]``;
    - pipeline: the first load (issue + flight), the compute (its FLOPs at peak, or the
                chain, whichever is longer), then the last store (issue + flight).
    """
    issue, flight = machine.dma_issue, machine.latency["dma"]
    roofline = roofline_cycles(dram_bytes, flops_by_unit, machine)
    stream = ceil(dram_bytes / machine.dram_bytes_per_cycle - 1e-9) + transfers * issue + flight
    if chain_cycles is None:
        return max(roofline, stream)
    peak = peak_rates(machine)
    compute = max([chain_cycles] + [ceil(f / peak[u] - 1e-9) for u, f in flops_by_unit.items()])
    return max(roofline, stream, 2 * (issue + flight) + compute)


def _after_a_load(kernel: Kernel) -> list[bool]:
    """Nodes the output depends on that themselves depend on a load: they can only run
    once a load has landed and must end before the last store is issued."""
    fed = []
    for n in kernel.nodes:
        fed.append(n.op == "load" or any(fed[a] for a in n.inputs))
    live = [False] * len(kernel.nodes)
    live[kernel.output] = True
    for i in range(len(kernel.nodes) - 1, -1, -1):
        if live[i]:
            for a in kernel.nodes[i].inputs:
                live[a] = True
    return [a and b for a, b in zip(fed, live, strict=True)]


def chain_cycles(nodes: Iterable[tuple[str, tuple[int, ...]]], machine: Machine,
                 counted: list[bool] | None = None) -> int:
    """Longest chain of least op cycles through (op, inputs) nodes in program order;
    loads and stores count 0 (bound_cycles prices them). ``counted``: which nodes may
    lengthen a chain (default all)."""
    length: list[int] = []
    for i, (op, inputs) in enumerate(nodes):
        before = max((length[a] for a in inputs), default=0)
        own = least_op_cycles(op, machine) if counted is None or counted[i] else 0
        length.append(before + own)
    return max(length, default=0)


def bound_of_kernel(kernel: Kernel, machine: Machine | str | None = None) -> int:
    """The reachable bound of a kernel's own signature and arithmetic: its inputs read
    once (no more than its loads read), its output written once, one load per input it
    reads and one store, and its live arithmetic and dependent chain."""
    machine = load_machine(machine)
    works = op_work(kernel, machine)
    nbytes, all_flops = roofline_inputs(kernel, works)
    live = _after_a_load(kernel)
    flops = {"vector": 0, "matrix": 0}
    for w, alive in zip(works, live, strict=True):
        if alive and w.stages and w.stages[0][0] in flops:
            flops[w.stages[0][0]] += w.flops
    read = {_source(kernel, n.inputs[0]) for n in kernel.nodes if n.op == "load"}
    chain = None
    if any(alive and n.op == "load" for n, alive in zip(kernel.nodes, live, strict=True)):
        chain = chain_cycles(((n.op, n.inputs) for n in kernel.nodes), machine, live)
    # the roofline term takes every op's FLOPs (dead ones too: they still run)
    bound = bound_cycles(nbytes, len(read) + 1, flops, chain, machine)
    return max(bound, roofline_cycles(nbytes, all_flops, machine))


def _source(kernel: Kernel, i: int) -> int:
    while kernel.nodes[i].op == "slice":
        i = kernel.nodes[i].inputs[0]
    return i
