"""List scheduling: reorder a kernel's ops so that transfers and compute overlap.

The cost model runs each resource's ops in program order (docs/machine.md, section 3),
so the order a kernel is written in is its schedule. ``schedule(kernel, machine)`` tries
a few deterministic list orders and keeps the one the cost model finds fastest (the
given order when none is faster):

- the order as written;
- depth first from the output, operands in argument order: one tile's chain of ops
  finishes before the next tile's starts, so its store can go while the next computes;
- the same, with every load issued ``d`` loads ahead of where depth first puts it
  (d = 1, 2, 4 and all): the next tile's data streams in while this tile computes.

Reordering never changes a value: every op still reads the same operands.
"""

from __future__ import annotations

from stochopt.backend.cost import cycles
from stochopt.errors import StochoptError
from stochopt.leir.ir import Kernel
from stochopt.transform.edit import remap

PREFETCH_DISTANCES = (1, 2, 4, None)  # None: every load as early as it can go


def depth_first(kernel: Kernel) -> list[int]:
    """Post-order from the output (operands in argument order); inputs first, as written."""
    nodes = kernel.nodes
    order = [i for i, n in enumerate(nodes) if n.op == "input"]
    seen = set(order)
    stack: list[tuple[int, bool]] = [(kernel.output, False)]
    while stack:
        i, expanded = stack.pop()
        if i in seen:
            continue
        if expanded:
            seen.add(i)
            order.append(i)
            continue
        stack.append((i, True))
        for j in reversed(nodes[i].inputs):
            if j not in seen:
                stack.append((j, False))
    return order


def prefetched(kernel: Kernel, order: list[int], distance: int | None) -> list[int]:
    """``order`` with each load moved ahead to just after the load ``distance`` places
    before it (a load's operands are DRAM values, ready from the start)."""
    loads = [i for i in order if kernel.nodes[i].op == "load"]
    rank = {i: r for r, i in enumerate(loads)}
    out: list[int] = []
    placed: set[int] = set()

    def place(i: int) -> None:
        for j in kernel.nodes[i].inputs:  # a dram slice before its load
            if j not in placed:
                place(j)
        if i not in placed:
            placed.add(i)
            out.append(i)

    for i in order:
        if i in rank:
            last = len(loads) - 1 if distance is None else min(rank[i] + distance,
                                                                 len(loads) - 1)
            for j in loads[rank[i]:last + 1]:
                place(j)
        elif i not in placed:
            place(i)
    return out


def reorder(kernel: Kernel, order: list[int], machine) -> Kernel:
    """The kernel with its live nodes in ``order`` (a topological order of them). A
    reorder changes no node's op, operands, attributes or type, so every node keeps its
    type and its term (no type rule runs again) and the kernel stays legal."""
    index = {old: new for new, old in enumerate(order)}
    nodes = tuple(remap(kernel.nodes[i], index) for i in order)
    out = Kernel(kernel.name, nodes, index[kernel.output], kernel.spec_path)
    terms = kernel.terms
    object.__setattr__(out, "_terms", tuple(terms[i] for i in order))  # as Builder does
    return out


def candidate_orders(kernel: Kernel) -> list[list[int]]:
    first = depth_first(kernel)
    orders = [first] + [prefetched(kernel, first, d) for d in PREFETCH_DISTANCES]
    unique: list[list[int]] = []
    for order in orders:
        if order not in unique:
            unique.append(order)
    return unique


def schedule(kernel: Kernel, machine) -> Kernel:
    """The fastest of the candidate orders by the cost model; the kernel itself if none
    is faster (or none fits in PE memory)."""
    best, best_cycles = kernel, _cycles(kernel, machine)
    for order in candidate_orders(kernel):
        try:
            candidate = reorder(kernel, order, machine)
        except StochoptError:
            continue
        candidate_cycles = _cycles(candidate, machine)
        if candidate_cycles < best_cycles:
            best, best_cycles = candidate, candidate_cycles
    return best


def _cycles(kernel: Kernel, machine) -> float:
    """The kernel's cycles (the cost model's cycle count alone, remembered per kernel:
    the chain asks again for the order it keeps)."""
    try:
        return cycles(kernel, machine)
    except StochoptError:  # out of PE memory in this order
        return float("inf")
