"""Time and memory: cost every op, list-schedule the graph, track bytes live per PE.

The scheduler runs ops in program order; each op starts when its inputs are ready and
its resource (dma, tree, vector, matrix) is free, so loads overlap compute. The makespan
is the kernel's cycle count. See docs/machine.md for every formula.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from math import ceil

from stochopt.backend.machine import Machine, load_machine
from stochopt.backend.op_costs import RESOURCES, Work
from stochopt.errors import ConstraintError
from stochopt.leir.ir import Kernel, op_of
from stochopt.leir.rules import Const
from stochopt.leir.types import TensorType

# ops whose result is a view of their input: they share its memory
VIEWS = ("reshape", "transpose", "load_view")


@dataclass(frozen=True, slots=True)
class OpProfile:
    index: int
    op: str
    name: str
    resource: str | None
    start: int
    end: int
    cycles: int
    bytes: int
    flops: int
    units: int


@dataclass(frozen=True)
class Profile:
    cycles: int
    ops: tuple[OpProfile, ...]
    busy: dict[str, int]            # cycles each resource works
    critical_path: tuple[int, ...]  # node indices, first to last
    peak_local_bytes: int           # most bytes live on one PE at any point
    peak_at: int                    # node index where the peak is reached
    dram_bytes: int                 # bytes read and written from DRAM
    flops: int

    def busy_fraction(self) -> dict[str, float]:
        return {r: (b / self.cycles if self.cycles else 0.0) for r, b in self.busy.items()}

    def bottleneck(self) -> str:
        return max(self.busy, key=lambda r: self.busy[r])

    def to_json(self) -> dict:
        return {"cycles": self.cycles, "ops": [asdict(o) for o in self.ops],
                "resources": {r: {"busy_cycles": self.busy[r],
                                  "busy_fraction": round(self.busy_fraction()[r], 4)}
                              for r in self.busy},
                "critical_path": list(self.critical_path),
                "peak_local_bytes": self.peak_local_bytes, "dram_bytes": self.dram_bytes,
                "flops": self.flops}


def op_work(kernel: Kernel, machine: Machine) -> list[Work]:
    out = []
    for n in kernel.nodes:
        ins = [a if isinstance(a, Const) else kernel.nodes[a].type for a in n.args]
        out.append(op_of(n.op).cost(machine, ins, n.type, dict(n.attrs)))
    return out


def cost(kernel: Kernel, machine: Machine | str | None = None) -> Profile:
    """Schedule the kernel on the machine: cycles, per-op profile, memory peak."""
    machine = load_machine(machine)
    works = op_work(kernel, machine)
    free = dict.fromkeys(RESOURCES, 0)
    busy = dict.fromkeys(RESOURCES, 0)
    end = [0] * len(kernel.nodes)
    why = [-1] * len(kernel.nodes)  # the input that made this op wait longest
    ops = []
    for i, (n, w) in enumerate(zip(kernel.nodes, works, strict=True)):
        ready, waited_on = 0, -1
        for a in n.inputs:
            if end[a] > ready:
                ready, waited_on = end[a], a
        if w.resource is None:
            start = ready
        else:
            start = max(ready, free[w.resource])
            if free[w.resource] > ready:
                waited_on = -1  # waited for the resource, not a value
            free[w.resource] = start + w.cycles
            busy[w.resource] += w.cycles
        end[i] = start + w.cycles
        why[i] = waited_on
        ops.append(OpProfile(i, n.op, n.name or n.op, w.resource, start, end[i], w.cycles,
                             w.bytes, w.flops, w.units))
    makespan = max(end) if end else 0
    path = []
    j = max(range(len(end)), key=lambda k: end[k]) if end else -1
    while j >= 0:
        path.append(j)
        j = why[j]
    peak, peak_at = peak_memory(kernel, machine)
    dram = sum(w.bytes for n, w in zip(kernel.nodes, works, strict=True)
               if n.op in ("load", "store"))
    flops = sum(w.flops for w in works)
    return Profile(makespan, tuple(ops), busy, tuple(reversed(path)), peak, peak_at, dram,
                   flops)


def peak_memory(kernel: Kernel, machine: Machine) -> tuple[int, int]:
    """Most bytes live on one PE at any op, in program order; raise if over the PE memory.

    A value lives from its op to its last reader; views (reshape, free transpose) share
    their input's bytes. Every PE's share is the same, so one PE stands for all.
    """
    nodes = kernel.nodes
    root = list(range(len(nodes)))
    for i, n in enumerate(nodes):
        if n.op in VIEWS and n.inputs and nodes[n.inputs[0]].type.location == "pe":
            root[i] = root[n.inputs[0]]
    last = list(range(len(nodes)))
    for i, n in enumerate(nodes):
        for a in n.inputs:
            last[root[a]] = max(last[root[a]], i)
    ends_at: dict[int, list[int]] = {}
    for r in set(root):
        ends_at.setdefault(last[r], []).append(r)
    live, peak, peak_at = 0, 0, 0
    for i, n in enumerate(nodes):
        if root[i] == i:
            live += _bytes(n.type)
        if live > peak:
            peak, peak_at = live, i
        if live > machine.pe_local_bytes:
            raise ConstraintError(
                f"out of PE memory at {n.op} ({n.name or i}): {live} bytes live per PE, "
                f"the PE has {machine.pe_local_bytes}", line=n.line,
                hint="spread values over more of the tree, or end their use sooner")
        for r in ends_at.get(i, ()):
            live -= _bytes(nodes[r].type)
    return peak, peak_at


def _bytes(t: TensorType) -> int:
    return t.local_bytes()


def cycles_to_us(cycles: int, machine: Machine) -> float:
    return cycles / machine.clock_mhz


def roofline_cycles(dram_bytes: int, flops_by_unit: dict[str, int], machine: Machine) -> int:
    """The least cycles any kernel moving these bytes and doing this work can take."""
    bound = dram_bytes / machine.dram_bytes_per_cycle
    peak = peak_rates(machine)
    for unit, flops in flops_by_unit.items():
        bound = max(bound, flops / peak[unit])
    return ceil(bound)


def peak_rates(machine: Machine) -> dict[str, float]:
    """Operations per cycle of the whole chip: vector at the widest lanes, MAUs in bf16."""
    lanes = machine.word_bytes // 2  # bf16 lanes: the fastest any kernel may use
    return {"vector": machine.pes * lanes,
            "matrix": 2 * machine.mabs * machine.mau_bf16[0] * machine.mau_bf16[1]}


def roofline_of_kernel(kernel: Kernel, machine: Machine | str | None = None) -> int:
    """Roofline of a kernel's own signature: its inputs read once (no more than its loads
    read), its output written once, and its own arithmetic at the chip's peak rates."""
    machine = load_machine(machine)
    works = op_work(kernel, machine)
    loaded: dict[int, int] = {}
    for n, w in zip(kernel.nodes, works, strict=True):
        if n.op == "load":
            src = n.inputs[0]
            while kernel.nodes[src].op == "slice":
                src = kernel.nodes[src].inputs[0]
            loaded[src] = loaded.get(src, 0) + w.bytes
    read = sum(min(kernel.nodes[i].type.nbytes, b) for i, b in loaded.items())
    written = kernel.output_type.nbytes
    flops = {"vector": 0, "matrix": 0}
    for w in works:
        if w.resource in ("vector", "tree"):
            flops["vector"] += w.flops
        elif w.resource == "matrix":
            flops["matrix"] += w.flops
    return roofline_cycles(read + written, flops, machine)
