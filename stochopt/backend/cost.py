"""Time and memory: list-schedule the graph of every op's work (node_work.py), track
bytes live per PE.

The scheduler takes ops in program order. An op starts when its inputs are ready, its
resource (dma, tree, vector, matrix) is free, and its result fits in PE memory next to
every value still live; so loads overlap compute only as far as memory allows. A value
holds its bytes from the start of its op to the end of its last reader. The makespan is
the kernel's cycle count. See docs/machine.md for every formula.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import OrderedDict
from dataclasses import asdict, dataclass
from heapq import heappop, heappush
from itertools import accumulate
from math import ceil

from stochopt.backend.node_work import local_bytes, machine_key, op_work
from stochopt.errors import ConstraintError
from stochopt.leir.cost_rules import LINKS, RESOURCES, Work
from stochopt.leir.ir import Kernel
from stochopt.machine import Machine, load_machine


@dataclass(frozen=True, slots=True)
class OpProfile:
    index: int
    op: str
    name: str
    resource: str | None  # "vector+tree" for an op with two stages; None when free
    start: int
    end: int
    cycles: int           # work cycles, summed over stages (end - start when nothing waits)
    bytes: int
    flops: int
    units: int
    stages: tuple[tuple[str, int, int], ...] = ()  # (resource, start, end) of each stage
    links: tuple[tuple[str, int, int, int], ...] = ()  # (link class, start, end, cycles of
    #                                                    work spread evenly over start..end)


@dataclass(frozen=True)
class Profile:
    cycles: int
    ops: tuple[OpProfile, ...]
    busy: dict[str, int]            # cycles each resource works
    critical_path: tuple[int, ...]  # longest chain of dependent ops, first to last
    critical_path_cycles: int       # its length: no schedule can be shorter
    peak_local_bytes: int           # most bytes live on one PE at any time
    peak_at: int                    # node index whose result reaches the peak
    dram_bytes: int                 # bytes read and written from DRAM
    flops: int
    link_busy: dict[str, int] | None = None  # cycles each link class carried traffic

    def busy_fraction(self) -> dict[str, float]:
        return {r: (b / self.cycles if self.cycles else 0.0) for r, b in self.busy.items()}

    def bottleneck(self) -> str:
        return max(self.busy, key=lambda r: self.busy[r])

    def to_json(self) -> dict:
        return {"cycles": self.cycles, "ops": [asdict(o) for o in self.ops],
                "resources": {r: {"busy_cycles": self.busy[r],
                                  "busy_fraction": round(self.busy_fraction()[r], 4)}
                              for r in self.busy},
                "bottleneck": self.bottleneck(),
                "critical_path": list(self.critical_path),
                "critical_path_cycles": self.critical_path_cycles,
                "peak_local_bytes": self.peak_local_bytes, "peak_at": self.peak_at,
                "dram_bytes": self.dram_bytes, "flops": self.flops,
                "links": dict(self.link_busy or {})}


# ---------------------------------------------------------------------------------
# memory over time
# ---------------------------------------------------------------------------------

class _Memory:
    """Bytes live per PE over time: values allocated so far, each [start, release).

    A release of None means a later op still reads the value. Every spread places its
    parts on the first units of each level, so PE 0 holds a part of every pe value and
    the sum of local bytes is the most any one PE holds.

    Near the capacity (a tiled kernel asks where each of its ~200 values fits) the
    allocations and releases are kept as events in time order as they come, from the
    first question that needs them on: sorting every value's events again for each
    question was most of such a kernel's costing, and keeping them from the start cost
    a kernel whose questions the released values answer a tenth of its costing.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.held: dict[int, list] = {}  # root node -> [start, release, bytes]
        self.total = 0                    # bytes of everything held: an upper bound
        self.released: list[tuple[int, int]] = []  # heap of (release, node)
        # once indexed: the events in time order, keyed 2 * time (+ 1 for an
        # allocation: at equal times releases come first), and the bytes each adds (or
        # frees, negative)
        self.keys: list[int] | None = None
        self.deltas: list[int] = []

    def hold(self, node: int, start: int, nbytes: int) -> None:
        self.held[node] = [start, None, nbytes]
        self.total += nbytes
        if self.keys is not None:
            self._event(2 * start + 1, nbytes)

    def release(self, node: int, at: int) -> None:
        h = self.held.get(node)
        if h is None:
            return
        if self.keys is not None:
            if h[1] is not None:
                self._forget(2 * h[1], -h[2])
            self._event(2 * at, -h[2])
        h[1] = at
        heappush(self.released, (at, node))

    def _index(self) -> None:
        """The events of what is held now, kept in order from now on."""
        events = sorted([(2 * start + 1, nbytes) for start, _, nbytes in self.held.values()]
                        + [(2 * release, -nbytes) for _, release, nbytes in
                           self.held.values() if release is not None])
        self.keys, self.deltas = [e[0] for e in events], [e[1] for e in events]

    def _event(self, key: int, delta: int) -> None:
        at = bisect_right(self.keys, key)
        self.keys.insert(at, key)
        self.deltas.insert(at, delta)

    def _forget(self, key: int, delta: int) -> None:
        at = bisect_left(self.keys, key)
        while self.deltas[at] != delta:  # an event of the same key and bytes: any one
            at += 1
        del self.keys[at], self.deltas[at]

    def _drop_released_by(self, floor: int) -> None:
        """Forget values released by ``floor``: no op starts before it any more."""
        while self.released and self.released[0][0] <= floor:
            at, node = heappop(self.released)
            h = self.held.get(node)
            if h is not None and h[1] == at:
                del self.held[node]
                self.total -= h[2]
                if self.keys is not None:
                    self._forget(2 * h[0] + 1, h[2])
                    self._forget(2 * at, -h[2])

    def earliest_fit(self, t: int, nbytes: int, floor: int) -> int | None:
        """The earliest time >= t from which nbytes more fit for good; None if never.
        No op starts before ``floor`` any more, so what is released by then is dropped."""
        if self.total + nbytes <= self.capacity:
            return t
        self._drop_released_by(floor)
        if self.total + nbytes <= self.capacity:
            return t
        if self.keys is None:
            self._index()
        keys, deltas = self.keys, self.deltas

        def fits(at: int) -> bool:
            """Whether the most bytes live at `at` or later leave room for nbytes.
            (Within one time the bytes live only fall then rise to what that time
            leaves live, so no event shows more than the times around it do.)"""
            i = bisect_right(keys, 2 * at + 1)  # the events at or before `at`
            if i == 0:
                peak = max(accumulate(deltas)) if deltas else 0
            else:
                peak = max(accumulate(deltas[i:], initial=sum(deltas[:i])))
            return peak + nbytes <= self.capacity

        if fits(t):
            return t
        tried = None
        for key in keys[bisect_right(keys, 2 * t + 1):]:  # the releases after t, in order
            if key % 2 == 0 and key != tried:
                tried = key
                if fits(key // 2):
                    return key // 2
        return None

    def live_at_end(self) -> int:
        return sum(h[2] for h in self.held.values() if h[1] is None)


def _peak(intervals: list[tuple[int, int, int, int]]) -> tuple[int, int]:
    """Most bytes live at once over (start, release, bytes, node) and the node reaching it."""
    events = []
    for start, release, nbytes, node in intervals:
        events.append((release, 0, -nbytes, node))  # at equal times, free before allocating
        events.append((start, 1, nbytes, node))
    live, peak, at = 0, 0, 0
    for _, _, delta, node in sorted(events):
        live += delta
        if live > peak:
            peak, at = live, node
    return peak, at


def _out_of_memory(kernel: Kernel, i: int, nbytes: int, memory: _Memory,
                   machine: Machine) -> ConstraintError:
    n = kernel.nodes[i]
    live = [k for k, h in memory.held.items() if h[1] is None]
    live.sort(key=lambda k: -memory.held[k][2])
    names = ", ".join(f"{kernel.nodes[k].name or k} {memory.held[k][2]} B" for k in live[:4])
    return ConstraintError(
        f"out of PE local memory at {n.op} ({n.name or i}): its result needs {nbytes} bytes "
        f"per PE while {memory.live_at_end()} bytes per PE stay live for later ops "
        f"({names}); a PE has {machine.pe_local_bytes} bytes (LM0 + LM1), and values "
        "never wait in L1BM/L2BM in this model", line=n.line,
        hint="spread values over more of the tree, use bf16, or end their use sooner")


class _Links:
    """What each link class carries over time: reservations (start, end, rate), rate the
    fraction of the link's bandwidth in use. A transfer of w cycles of link work over a
    stage of c cycles uses w / c of it throughout, so DMA and tree traffic share one
    budget per link and the rates on a link never add up to more than 1."""

    def __init__(self) -> None:
        self.held: dict[str, list[tuple[int, int, float]]] = {}
        self.spans = 0  # reservations held, all links together

    def forget(self, before: int) -> None:
        """No moving stage starts before ``before`` any more: drop what ended by then.
        (Only to keep the lists short: a span that ended by then never overlaps a stage
        that starts at or after it, so checks read the same with or without it.)"""
        if self.spans <= FORGET_ABOVE:
            return
        for link, spans in self.held.items():
            self.held[link] = [r for r in spans if r[1] > before]
        self.spans = sum(len(spans) for spans in self.held.values())

    def _fits(self, at: int, cycles: int, uses: tuple[tuple[str, int], ...]) -> bool:
        end = at + cycles
        held = self.held
        for link, work in uses:
            spans = [r for r in held.get(link, ()) if r[0] < end and r[1] > at]
            if not spans:
                continue
            rate = work / cycles
            # the most in use at once over [at, at + cycles): checked where a span starts
            for p in [at] + [r[0] for r in spans if r[0] > at]:
                if sum(r[2] for r in spans if r[0] <= p < r[1]) + rate > 1 + 1e-9:
                    return False
        return True

    def earliest(self, t: int, cycles: int, uses: tuple[tuple[str, int], ...]) -> int:
        """The earliest start >= t at which every link has room for the whole stage."""
        if self._fits(t, cycles, uses):
            return t
        ends = sorted({r[1] for link, _ in uses for r in self.held.get(link, ()) if r[1] > t})
        return next(e for e in ends if self._fits(e, cycles, uses))

    def reserve(self, at: int, cycles: int, uses: tuple[tuple[str, int], ...]) -> None:
        for link, work in uses:
            self.held.setdefault(link, []).append((at, at + cycles, work / cycles))
        self.spans += len(uses)


FORGET_ABOVE = 32  # reservations held before the ended ones are dropped


# ---------------------------------------------------------------------------------
# the scheduler
# ---------------------------------------------------------------------------------

def cost(kernel: Kernel, machine: Machine | str | None = None) -> Profile:
    """Schedule the kernel on the machine: cycles, per-op profile, memory peak."""
    machine = load_machine(machine)
    nodes = kernel.nodes
    works = op_work(kernel, machine)
    inputs = [n.inputs for n in nodes]
    timing = _schedule(kernel, works, inputs, machine)
    start, end, stages, carried, busy, link_busy, peak, peak_at = timing
    path, path_cycles = _critical_path(works, inputs)
    ops = tuple(OpProfile(i, n.op, n.name or n.op, w.resource, start[i], end[i], w.cycles,
                          w.bytes, w.flops, w.units, stages[i], carried[i])
                for i, (n, w) in enumerate(zip(nodes, works, strict=True)))
    dram = sum(w.bytes for n, w in zip(nodes, works, strict=True) if n.op in ("load", "store"))
    return Profile(max(end, default=0), ops, busy, path, path_cycles, peak, peak_at, dram,
                   sum(w.flops for w in works), link_busy)


CYCLES_KEPT = 100_000  # kernels whose cycle count cycles() remembers, per process
_CYCLES: OrderedDict[tuple, int | ConstraintError] = OrderedDict()


def cycles(kernel: Kernel, machine: Machine) -> int:
    """The kernel's cycle count alone, as cost() gives it (ConstraintError when it does
    not fit in memory). The search asks for it on every candidate and meets the same
    kernels again and again, so it is remembered per kernel: its terms (ops, types,
    layouts, attributes) and its program order, which is all the schedule reads. (The
    key is made once per kernel object, the machine in it as its one key object.)"""
    memo = kernel.memo
    held = memo.get(cycles)
    if held is None or held[0] is not machine:
        held = memo[cycles] = (machine, (machine_key(machine), kernel.terms,
                                         kernel.arguments))
    key = held[1]
    known = _CYCLES.get(key)
    if known is None:
        try:
            works = op_work(kernel, machine)
            known = max(_schedule(kernel, works, [n.inputs for n in kernel.nodes],
                                  machine, profile=False)[1], default=0)
        except ConstraintError as e:
            known = e
        _CYCLES[key] = known
        if len(_CYCLES) > CYCLES_KEPT:
            _CYCLES.popitem(last=False)
    else:
        _CYCLES.move_to_end(key)
    if isinstance(known, ConstraintError):
        raise known.with_traceback(None)
    return known


# the resources among RESOURCES whose bits are set, for every set of them
_RESOURCE_SETS = {bits: tuple(r for j, r in enumerate(RESOURCES) if bits >> j & 1)
                  for bits in range(1 << len(RESOURCES))}
_BIT = {r: 1 << j for j, r in enumerate(RESOURCES)}


def _schedule(kernel: Kernel, works: list[Work], inputs: list[tuple[int, ...]],
              machine: Machine, profile: bool = True):
    """Start and end of every op, busy cycles per resource, and the memory peak (without
    ``profile``, the starts and ends alone: cycles() reads the ends)."""
    nodes = kernel.nodes
    terms = kernel.terms
    count = len(nodes)
    # memory roots: a free relabelling of a pe value (reshape, free transpose) is a view
    root = list(range(count))
    size = [0] * count
    for i, w in enumerate(works):
        ins = inputs[i]
        if not w.stages and ins and nodes[ins[0]].type.location == "pe":
            root[i] = root[ins[0]]
        else:
            size[i] = local_bytes(terms[i])
    last_reader = list(range(count))
    for i, ins in enumerate(inputs):
        for a in ins:
            r = root[a]
            if i > last_reader[r]:
                last_reader[r] = i
    # resources that ops from i on start on: no op from i on starts before the earliest
    # of them is free, so memory released before then can be forgotten
    later = [0] * (count + 1)
    for i in range(count - 1, -1, -1):
        w = works[i]
        later[i] = later[i + 1] | (_BIT[w.stages[0][0]] if w.stages else 0)

    free = dict.fromkeys(RESOURCES, 0)
    links = _Links()
    busy = dict.fromkeys(RESOURCES, 0)
    link_busy = dict.fromkeys(LINKS, 0)
    start, end, release = [0] * count, [0] * count, [0] * count
    stages: list[tuple] = [()] * count
    carried: list[tuple] = [()] * count
    memory = _Memory(machine.pe_local_bytes)
    descriptors = machine.dma_descriptors
    landed: list[int] = []  # when each transfer issued so far lands, in queue order
    for i, w in enumerate(works):
        t = 0
        for a in inputs[i]:
            if end[a] > t:
                t = end[a]
        if w.stages:
            t = max(t, free[w.stages[0][0]])
        if w.latency and len(landed) >= descriptors:
            # every descriptor is in flight: the transfer waits for the oldest to land
            t = max(t, landed[-descriptors])
        nbytes = size[i]
        if nbytes and memory.total + nbytes > memory.capacity:  # else it fits at once
            floor = min([free[r] for r in _RESOURCE_SETS[later[i]]])
            fit = memory.earliest_fit(t, nbytes, floor)
            if fit is None:
                raise _out_of_memory(kernel, i, nbytes, memory, machine)
            t = fit
        start[i] = t
        ran = []
        for resource, stage_cycles in w.stages:
            t = max(t, free[resource])
            if w.links and resource in ("dma", "tree"):
                # the moving stage: it starts once every link it uses has room for its
                # share of that link next to what other transfers already carry there
                links.forget(min(free["dma"], free["tree"]))
                t = links.earliest(t, stage_cycles, w.links)
                links.reserve(t, stage_cycles, w.links)
                if profile:
                    carried[i] = tuple((link, t, t + stage_cycles, work)
                                       for link, work in w.links)
                    for link, work in w.links:
                        link_busy[link] += work
            if profile:
                ran.append((resource, t, t + stage_cycles))
                busy[resource] += stage_cycles
            free[resource] = t + stage_cycles
            t += stage_cycles
        if profile:
            stages[i] = tuple(ran)
        t += w.latency  # a DMA transfer in flight: its queue is already free
        end[i] = release[i] = t
        if w.latency:
            landed.append(t)
        if nbytes:
            memory.hold(i, start[i], nbytes)
        for a in inputs[i]:
            r = root[a]
            if t > release[r]:
                release[r] = t
            if last_reader[r] == i:
                memory.release(r, release[r])
        if last_reader[i] == i:
            memory.release(i, release[i])
    if not profile:
        return start, end, stages, carried, busy, link_busy, None, None
    peak, peak_at = _peak([(start[i], release[i], size[i], i) for i in range(count) if size[i]])
    return start, end, stages, carried, busy, link_busy, peak, peak_at


def _critical_path(works: list[Work], inputs: list[tuple[int, ...]]
                   ) -> tuple[tuple[int, ...], int]:
    """The longest chain of dependent ops by their cycles (in flight included), and its
    length."""
    length = [0] * len(works)
    before = [-1] * len(works)
    for i, ins in enumerate(inputs):
        longest = 0
        for a in ins:
            if before[i] < 0 or length[a] > longest:
                before[i], longest = a, length[a]
        length[i] = works[i].span + longest
    if not length:
        return (), 0
    j = max(range(len(length)), key=lambda k: length[k])
    total, path = length[j], []
    while j >= 0:
        path.append(j)
        j = before[j]
    return tuple(reversed(path)), total


def peak_memory(kernel: Kernel, machine: Machine | str | None = None) -> tuple[int, int]:
    """Most bytes live on one PE over the schedule and the node reaching it; raises
    ConstraintError when the kernel cannot fit in PE memory."""
    profile = cost(kernel, machine)
    return profile.peak_local_bytes, profile.peak_at


# ---------------------------------------------------------------------------------
# roofline
# ---------------------------------------------------------------------------------

def peak_rates(machine: Machine) -> dict[str, float]:
    """Operations per cycle of the whole chip: every PE's ALU at its widest lanes (16-bit),
    every MAU at its largest tile, a MAC counting as two operations."""
    tile = max(machine.mau_bf16[0] * machine.mau_bf16[1],
               machine.mau_f32[0] * machine.mau_f32[1])
    return {"vector": machine.pes * max(1, machine.word_bytes // 2),
            "matrix": 2 * machine.mabs * tile}


def roofline_cycles(dram_bytes: int, flops_by_unit: dict[str, int], machine: Machine) -> int:
    """The least cycles any kernel moving these DRAM bytes and doing this work can take:
    the larger of bytes over the chip's DRAM bandwidth and each unit's FLOPs over its peak."""
    bound = dram_bytes / machine.dram_bytes_per_cycle
    peak = peak_rates(machine)
    for unit, flops in flops_by_unit.items():
        bound = max(bound, flops / peak[unit])
    return ceil(bound)


def roofline_inputs(kernel: Kernel, works: list[Work]) -> tuple[int, dict[str, int]]:
    """DRAM bytes of a kernel's signature (inputs read once, but no more than its loads
    read; the output written once) and the FLOPs of its vector and matrix stages."""
    loaded: dict[int, int] = {}
    for n, w in zip(kernel.nodes, works, strict=True):
        if n.op == "load":
            src = n.inputs[0]
            while kernel.nodes[src].op == "slice":
                src = kernel.nodes[src].inputs[0]
            loaded[src] = loaded.get(src, 0) + w.bytes
    read = sum(min(kernel.nodes[i].type.nbytes, b) for i, b in loaded.items())
    flops = {"vector": 0, "matrix": 0}
    for w in works:
        if w.stages and w.stages[0][0] in flops:
            flops[w.stages[0][0]] += w.flops
    return read + kernel.output_type.nbytes, flops


def roofline_of_kernel(kernel: Kernel, machine: Machine | str | None = None) -> int:
    """Roofline of a kernel's own signature: its inputs read once (no more than its loads
    read), its output written once, and its own arithmetic at the chip's peak rates."""
    machine = load_machine(machine)
    return roofline_cycles(*roofline_inputs(kernel, op_work(kernel, machine)), machine)
