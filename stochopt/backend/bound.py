"""A lower bound that a kernel can reach: the roofline plus what no schedule can hide.

The roofline (cost.roofline_cycles) counts bandwidth and peak arithmetic only. A real
kernel also pays, on the DMA queue, the issue cycles of every transfer; it cannot hide
two DMA flights (the first load must land before anything computes on it, the last store
is issued only once its data is computed), nor, after the last load is issued, that
load's flight, the work that depends on it and the store after it; and every L2B must
receive what it works on through its own link (a matmul replicates an operand, or sums
partials, over the L2Bs whatever its layout). ``bound_cycles`` adds those and stays a
lower bound of every schedule the cost model can produce (property tests check it on
generated kernels, rule outputs and every kernel in the repository); docs/machine.md
section 6 derives it.

The bound reads a kernel's or a spec's dataflow as a list of ``Step``s, so that one
function bounds both: ``bound_of_kernel`` here, ``spec_roofline`` in lower/roofline.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from math import ceil, prod

from stochopt.backend.cost import peak_rates, roofline_cycles, roofline_inputs
from stochopt.backend.node_work import op_work
from stochopt.leir.ir import Kernel
from stochopt.leir.ops import CONTRACTION, ELEMENTWISE, OPS, REDUCTION
from stochopt.leir.types import itemsize
from stochopt.machine import Machine, load_machine


def least_op_cycles(op: str, machine: Machine) -> int:
    """The fewest cycles an op of this name can take on any layout: one vector pass over
    one ALU word (elementwise, reductions kept local) or one MAU step (matmul); ops that
    only move data or relabel it could be written away, so they count 0, and so does a
    cast (the rules drop a widening pair, and a matmul's casts of bf16 operands). A
    division counts as a multiply: x / c becomes x * (1/c), and x / y, y broadcast,
    x * reciprocal(y), where the reciprocal is off x's path."""
    if op == "cast":
        return 0
    if op == "div":
        op = "mul"
    kind = OPS[op].kind if op in OPS else None
    if kind == ELEMENTWISE:
        return OPS[op].cost.cycles_per_elem + machine.latency["vector"]
    if kind == REDUCTION:  # a local pass, or a tree stage alone (nothing local to combine)
        return 1 + min(machine.latency["vector"], ceil(machine.latency["tree"] / 2))
    if kind == CONTRACTION:
        return 1 + machine.latency["matrix"]
    return 0


# ---------------------------------------------------------------------------------
# the dataflow the bound reads
# ---------------------------------------------------------------------------------

READ = "read"  # a Step that brings data from DRAM: a spec's input, a kernel's load


@dataclass(frozen=True, slots=True)
class Step:
    """One op of a kernel or a traced spec, as the bound sees it."""
    op: str                      # LEIR op name, READ, or a name the bound ignores
    args: tuple[int, ...]        # earlier steps it reads (literals left out)
    shape: tuple[int, ...]
    dtype: str
    live: bool = True            # the output depends on it
    arg_shapes: tuple[tuple[int, ...], ...] = ()  # for matmul: a's and b's shapes


def kernel_steps(kernel: Kernel) -> list[Step]:
    """A kernel's nodes as Steps, one per node: a load is a READ (its DRAM operand is not
    a step the bound needs), a store keeps its op."""
    live = _live(kernel)
    steps = []
    for i, n in enumerate(kernel.nodes):
        args = n.inputs if n.op != "load" else ()
        op = READ if n.op == "load" else n.op
        shapes = tuple(kernel.nodes[a].type.shape for a in n.inputs) if n.op == "matmul" else ()
        steps.append(Step(op, args, n.type.shape, n.type.dtype, live[i], shapes))
    return steps


def _live(kernel: Kernel) -> list[bool]:
    live = [False] * len(kernel.nodes)
    live[kernel.output] = True
    for i in range(len(kernel.nodes) - 1, -1, -1):
        if live[i]:
            for a in kernel.nodes[i].inputs:
                live[a] = True
    return live


# ---------------------------------------------------------------------------------
# the bound
# ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Traffic:
    """What a kernel must move through DRAM, for the stream terms of the bound."""
    read_bytes: int      # bytes it reads from DRAM (every input once)
    written_bytes: int   # bytes it writes (its output once)
    reads: int           # transfers that read: at least one per input it reads


def bound_cycles(dram_bytes: int, transfers: int, flops_by_unit: dict[str, int],
                 chain_cycles: int | None, machine: Machine, *,
                 traffic: Traffic | None = None, tail_cycles: int | None = None,
                 link_cycles: int = 0) -> int:
    """The least cycles of a kernel that moves ``dram_bytes`` in at least ``transfers``
    DMA transfers (one load per input, one store) and does this arithmetic after its first
    load lands and before its last store, along a dependent chain of at least
    ``chain_cycles`` (None: nothing it stores depends on a load). The largest of:

    - roofline: bytes over the chip's bandwidth, FLOPs over the peak rates;
    - stream:   the DMA queue runs every byte at the chip's bandwidth plus each transfer's
                issue cycles, and the last transfer then flies ``latency["dma"]``;
    - pipeline: the first load (issue + flight), the compute (its FLOPs at peak, or the
                chain, whichever is longer), then the last store (issue + flight);
    - tail:     every read on the queue, then the last one's flight, the ``tail_cycles``
                of work that must follow it (the least over the reads), and a store
                (issue, a cycle of data, flight), given ``traffic``;
    - links:    ``link_cycles`` of work on the busiest link (link_floor_cycles), the
                last store's flight after it.
    """
    issue, flight = machine.dma_issue, machine.latency["dma"]
    roofline = roofline_cycles(dram_bytes, flops_by_unit, machine)
    stream = ceil(dram_bytes / machine.dram_bytes_per_cycle - 1e-9) + transfers * issue + flight
    terms = [roofline, stream, link_cycles + flight if link_cycles else 0]
    if chain_cycles is not None:
        peak = peak_rates(machine)
        compute = max([chain_cycles] + [ceil(f / peak[u] - 1e-9)
                                        for u, f in flops_by_unit.items()])
        terms.append(2 * (issue + flight) + compute)
    if traffic is not None and tail_cycles is not None:
        reads = ceil(traffic.read_bytes / machine.dram_bytes_per_cycle - 1e-9)
        terms.append(reads + traffic.reads * issue + flight + tail_cycles
                     + issue + 1 + flight)
    return max(terms)


# elementwise ops that combine with a small operand (a constant, or a broadcast of fewer
# elements) and fold into one of their own family: (x * c1) * c2 -> x * (c1 * c2)
# (fold_scales, after divide_by_constant_as_multiply for a division), (x + b1) + b2 ->
# x + (b1 + b2) (reassociate_broadcasts); and a scale of a matmul's result moves onto
# its smaller operand (scale_before_matmul). Ops that only move, relabel or cast a value
# may stand between the two: hoist_movement takes them out of the way.
FOLDS = {"mul": "scale", "div": "scale", "add": "shift", "sub": "shift"}
PASS_THROUGH = ("relayout", "transpose", "reshape", "cast")


def added_cycles(steps: Sequence[Step], u: int, a: int, machine: Machine) -> int:
    """The least cycles step ``u`` adds to a chain that reaches it through its argument
    ``a``: its least op cycles, or none where it folds into that argument."""
    s = steps[u]
    family = FOLDS.get(s.op)
    if family is not None and _scales_or_shifts(steps, u, a):
        while steps[a].op in PASS_THROUGH and len(steps[a].args) == 1:
            a = steps[a].args[0]
        p = steps[a]
        if FOLDS.get(p.op) == family and any(_scales_or_shifts(steps, a, b) for b in p.args):
            return 0
        if family == "scale" and p.op == "matmul":
            return 0
    return least_op_cycles(s.op, machine)


def _scales_or_shifts(steps: Sequence[Step], u: int, a: int) -> bool:
    """Whether step ``u`` combines its argument ``a``, whole, with only smaller operands
    or constants."""
    s = steps[u]
    if steps[a].shape != s.shape:
        return False
    others = list(s.args)
    others.remove(a)
    return all(prod(steps[b].shape) < prod(s.shape) for b in others)


def chain_lengths(steps: Sequence[Step], machine: Machine,
                  counted: Sequence[bool] | None = None) -> list[int]:
    """The longest chain of least cycles (added_cycles) to each step, in program order;
    reads and stores add none (bound_cycles prices them). ``counted``: which steps may
    lengthen a chain (default all)."""
    length: list[int] = []
    for i, s in enumerate(steps):
        if counted is not None and not counted[i] or s.op == READ:
            length.append(max((length[a] for a in s.args), default=0))
            continue
        length.append(max((length[a] + added_cycles(steps, i, a, machine) for a in s.args),
                          default=least_op_cycles(s.op, machine)))
    return length


def tail_cycles(steps: Sequence[Step], machine: Machine) -> int | None:
    """The least, over the live reads, of the longest chain of least cycles from the read
    to a store (or to the output, for a traced spec): what must still run after the last
    read lands. None when no live read feeds the output."""
    after: list[int | None] = [None] * len(steps)  # longest chain from a step onwards
    users: list[list[int]] = [[] for _ in steps]
    for i, s in enumerate(steps):
        for a in s.args:
            users[a].append(i)
    for i in range(len(steps) - 1, -1, -1):
        s = steps[i]
        if not s.live:
            continue
        if s.op == "store":
            after[i] = 0
            continue
        onward = [added_cycles(steps, u, i, machine) + after[u] for u in users[i]
                  if after[u] is not None]
        if onward or not users[i]:  # a spec's output has no users, and no store
            after[i] = max(onward, default=0)
    tails = [after[i] for i, s in enumerate(steps) if s.op == READ and s.live
             and after[i] is not None]
    return min(tails, default=None)


def link_floor_cycles(steps: Sequence[Step], read_bytes: Iterable[int], written_bytes: int,
                      machine: Machine) -> int:
    """The least link work on the busiest L2B link or DRAM group port of any kernel with
    this dataflow (docs/machine.md section 6): every byte read or written crosses one
    L2B's link and one group's port, spread at best evenly; and each matmul lays its work
    over the L2Bs one way or another: M spread (b on every L2B), N spread (a on every
    L2B), K spread (each L2B's f32 partial of the result leaves it), a batch spread
    (nothing more), whichever costs that link least."""
    l2bs, groups = machine.fanout["L2B"], machine.dram_groups
    moved = sum(read_bytes) + written_bytes
    work = {"l2b": moved / l2bs, "dram": moved / groups}
    if l2bs > 1:
        for extra in _matmul_extras(steps, machine):
            for link in work:
                work[link] += min(e[link] for e in extra)
    rate = {"l2b": machine.l2b_link_words * machine.word_bytes,
            "dram": machine.dram_bytes_per_cycle_per_group}
    return max(ceil(work[link] / rate[link] - 1e-9) for link in work)


def _matmul_extras(steps: Sequence[Step], machine: Machine) -> list[list[dict[str, float]]]:
    """For each live matmul, the extra bytes on one L2B link and one group port of each
    way to lay it over the L2Bs. An operand on every L2B costs the copies beyond a spread
    share: (units - 1) / units of its information. One copy of some reads can serve every
    operand drawn from them, so the operands drawing on the same reads share that cost
    (each takes its part: the sum never counts one copy twice)."""
    l2bs, groups = machine.fanout["L2B"], machine.dram_groups
    info, sources = _information(steps)
    matmuls = [i for i, s in enumerate(steps) if s.live and s.op == "matmul"]
    operands = [a for i in matmuls for a in steps[i].args if sources[a]]
    joined = {r: r for a in operands for r in sources[a]}  # reads read by one operand

    def root(r: int) -> int:
        while joined[r] != r:
            r = joined[r]
        return r

    for a in operands:
        first = root(min(sources[a]))
        for r in sources[a]:
            joined[root(r)] = first
    sharing = Counter(root(min(sources[a])) for a in operands)

    def copies(a: int) -> dict[str, float]:
        share = sharing[root(min(sources[a]))] if sources[a] else 1
        return {"l2b": (l2bs - 1) / l2bs * info[a] / share,
                "dram": (groups - 1) / groups * info[a] / share}

    extras = []
    for i in matmuls:
        s = steps[i]
        (*batch, m, k), (*_, n) = s.arg_shapes
        a, b = s.args
        both = {link: copies(a)[link] + copies(b)[link] for link in ("l2b", "dram")}
        ways = [both]                      # the L2B level left unused: both on one L2B
        if m > 1:
            ways.append(copies(b))         # M spread: b on every L2B
        if n > 1:
            ways.append(copies(a))         # N spread: a on every L2B
        if k > 1:  # K spread: each L2B's f32 partial leaves it, up its link and a port
            partial = 4 * prod(s.shape) / max(1, min(prod(batch), l2bs // 2))
            ways.append({"l2b": partial, "dram": partial})
        if prod(batch) > 1:
            ways.append({"l2b": 0.0, "dram": 0.0})  # a batch spread: nothing more
        extras.append(ways)
    return extras


def _information(steps: Sequence[Step]) -> tuple[list[float], list[frozenset[int]]]:
    """Per step, the fewest bytes that can carry its value from the reads it depends on
    (its elements at 2 bytes each for any float or integer type, 1 for bool; or what its
    arguments carry, if less: a constant carries nothing), and the reads it depends on."""
    info: list[float] = []
    sources: list[frozenset[int]] = []
    for i, s in enumerate(steps):
        own = prod(s.shape) * min(2, itemsize(s.dtype))
        if s.op == READ:
            info.append(own)
            sources.append(frozenset({i}))
            continue
        info.append(min(own, sum(info[a] for a in s.args)))
        sources.append(frozenset().union(*(sources[a] for a in s.args)))
    return info, sources


# ---------------------------------------------------------------------------------
# kernels
# ---------------------------------------------------------------------------------

def _after_a_load(kernel: Kernel) -> list[bool]:
    """Nodes the output depends on that themselves depend on a load: they can only run
    once a load has landed and must end before the last store is issued."""
    fed = []
    for n in kernel.nodes:
        fed.append(n.op == "load" or any(fed[a] for a in n.inputs))
    return [a and b for a, b in zip(fed, _live(kernel), strict=True)]


def bound_of_kernel(kernel: Kernel, machine: Machine | str | None = None) -> int:
    """The reachable bound of a kernel's own signature and arithmetic: its inputs read
    once (no more than its loads read), its output written once, one load per input it
    reads and one store, its live arithmetic and dependent chain, what must follow its
    last load, and the L2B and DRAM-port traffic of its matmuls laid out at their best."""
    machine = load_machine(machine)
    works = op_work(kernel, machine)
    nbytes, all_flops = roofline_inputs(kernel, works)
    live = _after_a_load(kernel)
    flops = {"vector": 0, "matrix": 0}
    for w, alive in zip(works, live, strict=True):
        if alive and w.stages and w.stages[0][0] in flops:
            flops[w.stages[0][0]] += w.flops
    read = {_source(kernel, n.inputs[0]) for n in kernel.nodes if n.op == "load"}
    steps = kernel_steps(kernel)
    chain = None
    if any(alive and n.op == "load" for n, alive in zip(kernel.nodes, live, strict=True)):
        chain = max(chain_lengths(steps, machine, live), default=0)
    written = kernel.output_type.nbytes
    live_reads = {_source(kernel, n.inputs[0]) for n, s in zip(kernel.nodes, steps, strict=True)
                  if s.op == READ and s.live}
    traffic = Traffic(_live_read_bytes(kernel, works, steps), written, len(live_reads))
    loads = [w.bytes for w, s in zip(works, steps, strict=True) if s.op == READ and s.live]
    links = link_floor_cycles(steps, loads, written, machine)
    # the roofline term takes every op's FLOPs (dead ones too: they still run)
    bound = bound_cycles(nbytes, len(read) + 1, flops, chain, machine, traffic=traffic,
                         tail_cycles=tail_cycles(steps, machine), link_cycles=links)
    return max(bound, roofline_cycles(nbytes, all_flops, machine))


def _live_read_bytes(kernel: Kernel, works, steps: Sequence[Step]) -> int:
    """Bytes the live loads read, no more than each DRAM tensor holds."""
    loaded: dict[int, int] = {}
    for n, w, s in zip(kernel.nodes, works, steps, strict=True):
        if s.op == READ and s.live:
            src = _source(kernel, n.inputs[0])
            loaded[src] = loaded.get(src, 0) + w.bytes
    return sum(min(kernel.nodes[i].type.nbytes, b) for i, b in loaded.items())


def _source(kernel: Kernel, i: int) -> int:
    while kernel.nodes[i].op == "slice":
        i = kernel.nodes[i].inputs[0]
    return i
