"""Cost rules of LEIR ops: the work an op puts on the resources of the machine.

Each rule takes (machine, input types, output type, static arguments) and returns a
Work: one or two stages, each on one resource (dma, tree, vector, matrix), run one after
the other. The formulas are stated in docs/machine.md; keep the two in step. Rules only
read plain data (types, layouts, machine constants), so they cost nothing to import.

Four ideas carry every rule:
- a PE works only on its own local elements, so idle PEs never speed anything up;
- a link moves what must cross it: per PE port one word/cycle, per L1B 64 words/cycle, per
  L2B 16 words/cycle, per DRAM group ~171 bytes/cycle, and each unit's link carries its own
  share in parallel; DMA and tree traffic share the same links (Work.links);
- every op that moves or computes pays its resource's fixed issue latency, so none is free;
- a value's logical meaning never depends on its layout; only the cycles do.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil, prod

from stochopt.leir.layout import LEVELS, Layout
from stochopt.leir.types import TensorType, itemsize

RESOURCES = ("dma", "tree", "vector", "matrix")
# physical link classes, outermost first: DRAM group ports (which also carry traffic between
# L2Bs), the L2B links to their L1Bs, the L1B links to their PEs, and each PE's own port
LINKS = ("dram", "l2b", "l1b", "pe")
UNDER_L1B = ("MAB", "PE")   # levels whose units talk through their L1B's link
UNDER_L2B = ("L2B", "L1B")  # levels whose units talk through the L2B links


@dataclass(frozen=True, slots=True)
class Work:
    stages: tuple[tuple[str, int], ...]  # (resource, cycles), run in order; () moves nothing
    bytes: int = 0   # bytes moved (DRAM or tree links) or written in local memory, per op
    flops: int = 0   # logical operations, counted once however replicated
    units: int = 1   # PEs, MAUs or DRAM groups doing the work
    latency: int = 0  # cycles in flight after the last stage, holding no resource (DMA)
    links: tuple[tuple[str, int], ...] = ()  # cycles each link class carries, moving stage

    @property
    def resource(self) -> str | None:
        """The resources used, joined by '+' ("vector+tree"); None for a relabelling."""
        return "+".join(r for r, _ in self.stages) or None

    @property
    def cycles(self) -> int:
        return sum(c for _, c in self.stages)

    @property
    def span(self) -> int:
        """Cycles from its start to its result, when nothing waits: stages plus flight."""
        return self.cycles + self.latency


FREE = Work(())


def _work(resource: str, cycles: int, **facts) -> Work:
    return Work(((resource, cycles),), **facts)


# ---------------------------------------------------------------------------------
# local work on the PEs' ALUs (vector)
# ---------------------------------------------------------------------------------

def lanes(machine, *types: TensorType) -> int:
    """Elements per ALU word: 2 for f32/i32, 4 for bf16; bool computes in 16-bit lanes."""
    widest = max(max(2, itemsize(t.dtype)) for t in types)
    return max(1, machine.word_bytes // widest)


def _tensors(ins) -> list[TensorType]:
    return [t for t in ins if isinstance(t, TensorType)]


def _local_pass(machine, local: int, lane_count: int, cycles_per_elem: int) -> int:
    return ceil(local / lane_count) * cycles_per_elem + machine.latency["vector"]


@dataclass(frozen=True, slots=True)
class VectorCost:
    """Elementwise: each PE works through its local elements, lanes per word per cycle,
    ``cycles_per_elem`` cycles each (the one place an op's per-element price is held;
    the reachable bound reads it here too)."""
    cycles_per_elem: int

    def __call__(self, machine, ins, out: TensorType, attrs) -> Work:
        local = out.layout.local_elements()
        cycles = _local_pass(machine, local, lanes(machine, out, *_tensors(ins)),
                             self.cycles_per_elem)
        return _work("vector", cycles, bytes=local * itemsize(out.dtype), flops=out.numel,
                     units=out.layout.spread_units())


def run_cycles(machine, run: int, local: int, lane_count: int) -> int:
    """Cycles to move ``local`` elements per PE in contiguous runs of ``run`` elements.
    A run costs its words, whole (a run shorter than a word still writes one), plus one
    instruction to start it (its addresses), or one lane insert per element when that is
    fewer (an element moved on its own carries its addresses in its instruction)."""
    run = max(1, min(run, local))
    return ceil(local / run) * min(run, machine.copy_run_issue + ceil(run / lane_count))


def _move(machine, ins, out: TensorType, runs: list[tuple[int, int]]) -> Work:
    """A local move writing ``out`` as pieces of (run, local elements): their runs, then
    the vector latency once; no FLOPs (copies are not arithmetic)."""
    lane_count = lanes(machine, out, *_tensors(ins))
    cycles = sum(run_cycles(machine, run, local, lane_count) for run, local in runs)
    local = out.layout.local_elements()
    return _work("vector", cycles + machine.latency["vector"],
                 bytes=local * itemsize(out.dtype), units=out.layout.spread_units())


def copy_cost(machine, ins, out: TensorType, attrs) -> Work:
    """A local copy written in one run (full, a local relayout)."""
    local = out.layout.local_elements()
    return _move(machine, ins, out, [(local, local)])


def slice_cost(machine, ins, out: TensorType, attrs) -> Work:
    """A dram slice is an address range (free); a pe slice copies stretches of its input,
    a run ending where the slice cuts an axis (the cut axis' kept extent still runs)."""
    if out.location == "dram":
        return FREE
    src, dst = ins[0].layout.local_shape(), out.layout.local_shape()
    run = 1
    for axis in range(len(dst) - 1, -1, -1):
        run *= dst[axis]
        if dst[axis] != src[axis]:
            break
    return _move(machine, ins, out, [(run, prod(dst))])


def concat_cost(machine, ins, out: TensorType, attrs) -> Work:
    """Stored tiles joined in DRAM are free (each store wrote its region); pe operands are
    copied piece by piece, in runs of a piece's extent along the axis times the axes
    inside it."""
    if out.location == "dram":
        return FREE
    axis = attrs["axis"] % len(out.shape)
    pieces = [x.layout.local_shape() for x in _tensors(ins)]
    return _move(machine, ins, out, [(prod(p[axis:]), prod(p)) for p in pieces])


def broadcast_cost(machine, ins, out: TensorType, attrs) -> Work:
    """Expanding size-1 axes: a run is the innermost stretch that is either copied as it
    is or filled with one element (the next axis out starts a new run either way)."""
    dst = out.layout.local_shape()
    src = (1,) * (len(dst) - len(ins[0].shape)) + ins[0].layout.local_shape()
    run, kind = 1, None
    for axis in range(len(dst) - 1, -1, -1):
        if dst[axis] == 1:
            continue
        filled = src[axis] != dst[axis]
        if kind is not None and filled != kind:
            break
        run, kind = run * dst[axis], filled
    return _move(machine, ins, out, [(run, prod(dst))])


# ---------------------------------------------------------------------------------
# the tree: reductions, relayouts
# ---------------------------------------------------------------------------------

def _link_bytes(machine, level_group: str) -> int:
    words = machine.l1b_link_words if level_group == "L1B" else machine.l2b_link_words
    return words * machine.word_bytes


def _whole_cycles(cycles: dict[str, float]) -> tuple[tuple[str, int], ...]:
    """Link work rounded up to whole cycles, in the order given (LINKS' order); the 1e-9
    absorbs float noise (131072 / (128e9 / 750e6) is 768, not 769)."""
    return tuple((link, ceil(c - 1e-9)) for link, c in cycles.items() if c > 0)


def _link_work(machine, nbytes: dict[str, float]) -> tuple[tuple[str, int], ...]:
    """Cycles each link class needs for these bytes (on its busiest unit)."""
    rate = {"dram": machine.dram_bytes_per_cycle_per_group, "l2b": _link_bytes(machine, "L2B"),
            "l1b": _link_bytes(machine, "L1B"), "pe": machine.pe_port_bytes}
    return _whole_cycles({link: b / rate[link] for link, b in nbytes.items()})


def tree_reduce_cycles(machine, parts: dict[str, int], axis_units: dict[str, int],
                       partial_bytes: int, delivery: str = "broadcast"
                       ) -> tuple[int, tuple[tuple[str, int], ...]]:
    """Combine partials across the levels in axis_units and deliver the result as its
    consumers need it (``delivery``, see DELIVERIES). Returns (cycles, link work).

    ``parts``: distinct partials per level (units used); ``axis_units``: units of the
    reduced axis per level; ``partial_bytes``: one PE's partial. Every partial under an
    L1B crosses its link up (MAB, PE in the axis); then every partial left under an L2B
    crosses its link (L1B, L2B in the axis); partials of different L2Bs meet through the
    DRAM group ports (L2B in the axis). The way back down carries the combined results
    once; a broadcast hands each PE all of them, a scatter each PE its share. The tree
    latency is per level of a round trip; one way (nothing comes back down) pays half.
    """
    r = partial_bytes
    back = delivery != "none"

    def shared(*levels: str) -> int:
        """Of the results coming down through a link at ``levels``, the PEs below it
        take all in a broadcast, and in a scatter only their share: 1 / (the axis'
        units at those levels) of each."""
        return prod(axis_units.get(lv, 1) for lv in levels) if delivery == "scatter" else 1

    l1b_rate, l2b_rate = _link_bytes(machine, "L1B"), _link_bytes(machine, "L2B")
    up = down = 0                                       # cycles of the l1b, l2b, dram levels
    work = dict.fromkeys(LINKS, 0)                      # link cycles, both ways
    left = prod(parts.get(lv, 1) for lv in UNDER_L1B)  # partials under one L1B
    if "MAB" in axis_units or "PE" in axis_units:
        c_up = ceil(left * r / l1b_rate)
        left //= axis_units.get("MAB", 1) * axis_units.get("PE", 1)
        c_down = ceil(left * r / shared("L2B", "L1B") / l1b_rate) if back else 0
        up, down, work["l1b"] = up + c_up, down + c_down, c_up + c_down
    if "L1B" in axis_units or "L2B" in axis_units:
        left *= parts.get("L1B", 1)                     # partials under one L2B
        c_up = ceil(left * r / l2b_rate)
        left //= axis_units.get("L1B", 1)
        c_down = ceil(left * r / shared("L2B") / l2b_rate) if back else 0
        up, down, work["l2b"] = up + c_up, down + c_down, c_up + c_down
    if "L2B" in axis_units:                             # across L2Bs: the group ports
        moved = min(machine.l2b_per_group, parts.get("L2B", 1)) * left * r
        c = ceil(moved / machine.dram_bytes_per_cycle_per_group - 1e-9)
        c_down = ceil(moved / shared("L2B") / machine.dram_bytes_per_cycle_per_group
                      - 1e-9) if back else 0
        up, down, work["dram"] = up + c, down + c_down, c + c_down
    port_up = ceil(r / machine.pe_port_bytes)           # each PE sends its partial
    port_down = ceil(r / shared(*LEVELS) / machine.pe_port_bytes) if back else 0
    work["pe"] = port_up + port_down
    levels = machine.latency["tree"] * len(axis_units)
    latency = levels if back else ceil(levels / 2)
    # a trip crosses its levels one after the other; the PE port works alongside
    cycles = max(up, port_up) + (max(down, port_down) if back else 0)
    return cycles + latency, tuple((k, c) for k, c in work.items() if c)


def _axis_units(layout: Layout, axis: int, skip: tuple[str, ...] = ()) -> dict[str, int]:
    units: dict[str, int] = {}
    for f in layout.axes[axis]:
        if f.level and f.level not in skip:
            units[f.level] = units.get(f.level, 1) * f.size
    return units


def reduce_cost(machine, ins, out: TensorType, attrs) -> Work:
    """A local pass on the vector unit, then (for spread levels of the axis) the tree. An
    axis with nothing local to combine skips the pass: each PE's partial is its own data,
    which its port sends up as it is."""
    x = ins[0]
    local = x.layout.local_elements()
    axis = attrs["axis"] % len(x.shape)
    axis_units = _axis_units(x.layout, axis)
    stages = []
    if not axis_units or x.layout.local_shape()[axis] > 1:
        stages.append(("vector", _local_pass(machine, local, lanes(machine, x), 1)))
    links: tuple[tuple[str, int], ...] = ()
    if axis_units:
        cycles, links = tree_reduce_cycles(machine, x.layout.spread(), axis_units,
                                           out.local_bytes(), _delivery(attrs))
        stages.append(("tree", cycles))
    return Work(tuple(stages), bytes=local * itemsize(x.dtype), flops=x.numel,
                units=x.layout.spread_units(), links=links)


# How a tree result reaches its consumers (context key DELIVERY, set by cost.op_work):
# "none": every consumer is a store (through free views), so the result stays where the
# partials met; "scatter": consumers read it on the PEs but none combines it with data
# spread over the reduced levels, so each PE gets its share (a reduce-scatter);
# "broadcast": some consumer needs all of it on every PE (an all-reduce).
DELIVERIES = ("none", "scatter", "broadcast")
DELIVERY = "_delivery"
DRAM_EXTENT = "_dram_extent"  # context key: per axis, does the transfer span the whole
#                               DRAM tensor it reads or writes (a slice or a tile does not)


def _delivery(attrs) -> str:
    return attrs.get(DELIVERY, "broadcast")


def reduced_levels(op: str, ins, attrs) -> frozenset[str]:
    """The levels a tree result of this op (a reduction or matmul) is combined over."""
    x = ins[0]
    if op == "matmul":
        return frozenset(_axis_units(x.layout, len(x.shape) - 1, skip=("PE",)))
    return frozenset(_axis_units(x.layout, attrs["axis"] % len(x.shape)))


# ---------------------------------------------------------------------------------
# the matrix units
# ---------------------------------------------------------------------------------

def _mau_share(layout: Layout, axis: int, size: int) -> int:
    """Elements of one axis that a single MAU sees: the PE level feeds the same MAU."""
    across = prod(f.size for f in layout.axes[axis] if f.level and f.level != "PE")
    return size // across


def matmul_cost(machine, ins, out: TensorType, attrs) -> Work:
    """MACs per MAU, M and N padded to the MAU tile, then a tree sum for a spread K."""
    a, b = ins
    tile = machine.mau_bf16 if a.dtype == "bf16" else machine.mau_f32
    m = _mau_share(a.layout, -2, a.shape[-2])
    k = _mau_share(a.layout, -1, a.shape[-1])
    n = _mau_share(b.layout, -1, b.shape[-1])
    batch = prod(_mau_share(a.layout, i, a.shape[i]) for i in range(len(a.shape) - 2))
    stages = [("matrix", batch * ceil(m / tile[0]) * ceil(n / tile[1]) * k
               + machine.latency["matrix"])]
    k_units = _axis_units(a.layout, len(a.shape) - 1, skip=("PE",))
    parts = dict(out.layout.spread())
    for lv, u in k_units.items():
        parts[lv] = parts.get(lv, 1) * u
    links: tuple[tuple[str, int], ...] = ()
    if k_units:
        cycles, links = tree_reduce_cycles(machine, parts, k_units, out.local_bytes(),
                                           _delivery(attrs))
        stages.append(("tree", cycles))
    maus = prod(u for lv, u in parts.items() if lv != "PE")
    return Work(tuple(stages), bytes=a.local_bytes() + b.local_bytes(),
                flops=2 * out.numel * a.shape[-1], units=maus, links=links)


# ---------------------------------------------------------------------------------
# DRAM: load and store
# ---------------------------------------------------------------------------------

def _parts(machine, layout: Layout, levels: tuple[str, ...], replicated_share: bool) -> int:
    """Units among which the bytes are split at these levels. A replicated level splits
    them too when any copy will do (a store), not when every unit needs them (a load)."""
    spread = layout.spread()
    return prod(machine.fanout[lv] if replicated_share and lv in layout.replicated
                else spread.get(lv, 1) for lv in levels)


def contiguous_run(layout: Layout, whole_axes: tuple[bool, ...] | None) -> int:
    """Elements of the longest runs that are contiguous both in DRAM (row-major) and in
    one PE's local memory: the trailing local factors, up to the first spread factor;
    a run continues into the next axis out only across an axis that is wholly local and
    spans the whole DRAM tensor (``whole_axes``; None: the transfer spans all of it)."""
    run = 1
    for axis in range(len(layout.axes) - 1, -1, -1):
        for f in reversed(layout.axes[axis]):
            if f.level is not None:
                return run
            run *= f.size
        if whole_axes is not None and not whole_axes[axis]:
            return run
    return run


def dram_transfer(machine, layout: Layout, nbytes: int, item: int,
                  whole_axes: tuple[bool, ...] | None, storing: bool
                  ) -> tuple[int, int, tuple[tuple[str, int], ...]]:
    """DRAM <-> PEs: (queue cycles, DRAM groups used, link work). The busiest DRAM group
    reads or writes its share in whole bursts, one contiguous run per request; each L2B
    link, L1B link and PE port carries its own share; the queue is busy for the slowest
    of them plus its issue cycles. The latency is paid in flight."""
    # units sharing the bytes at each level: spread units; a replicated level's units too
    # when any copy will do (a store), 1 when every unit needs them all (a load)
    spread = layout.spread()
    units = {lv: machine.fanout[lv] if storing and lv in layout.replicated
             else spread.get(lv, 1) for lv in LEVELS}
    per_group = machine.l2b_per_group
    reached = machine.fanout["L2B"] if "L2B" in layout.replicated else units["L2B"]
    groups = ceil(reached / per_group)
    l2bs = units["L2B"]
    share = min(per_group, l2bs) / l2bs                 # of the bytes, via the busiest group
    run_bytes = contiguous_run(layout, whole_axes) * item
    runs = nbytes / run_bytes * share
    burst = machine.dram_burst_bytes
    group = max(runs * ceil(run_bytes / burst) * burst / machine.dram_bytes_per_cycle_per_group,
                runs / machine.dma_runs_per_cycle)
    l1bs = l2bs * units["L1B"]
    links = _whole_cycles({
        "dram": group,
        "l2b": nbytes / l2bs / _link_bytes(machine, "L2B"),
        "l1b": nbytes / l1bs / _link_bytes(machine, "L1B"),
        "pe": nbytes / (l1bs * units["MAB"] * units["PE"]) / machine.pe_port_bytes})
    return max(c for _, c in links) + machine.dma_issue, groups, links


def _transfer(machine, layout: Layout, dram_type: TensorType, attrs, storing: bool) -> Work:
    cycles, groups, links = dram_transfer(machine, layout, dram_type.nbytes,
                                          itemsize(dram_type.dtype), attrs.get(DRAM_EXTENT),
                                          storing)
    return Work((("dma", cycles),), bytes=dram_type.nbytes, units=groups,
                latency=machine.latency["dma"], links=links)


def load_cost(machine, ins, out: TensorType, attrs) -> Work:
    """DRAM -> PEs: every L2B (and below it every PE) receives its own copy."""
    return _transfer(machine, out.layout, out, attrs, storing=False)


def store_cost(machine, ins, out: TensorType, attrs) -> Work:
    """PEs -> DRAM: one copy of every element is written; any copy of a replicated value
    will do, so the copies share the work."""
    return _transfer(machine, ins[0].layout, out, attrs, storing=True)


# ---------------------------------------------------------------------------------
# on-chip movement and shape ops
# ---------------------------------------------------------------------------------

def _placement(layout: Layout, level: str):
    where = tuple((i, j, f.size) for i, axis in enumerate(layout.axes)
                  for j, f in enumerate(axis) if f.level == level)
    return where, level in layout.replicated


def moved_levels(src: Layout, dst: Layout) -> list[str]:
    """Levels across which data must travel: the placement changes there and the source
    is not already replicated there (each unit then holds what it needs)."""
    return [lv for lv in LEVELS
            if _placement(src, lv) != _placement(dst, lv) and lv not in src.replicated]


def relayout_cost(machine, ins, out: TensorType, attrs) -> Work:
    """On-chip move: every link class from the highest level that data must cross down to
    the PE ports carries the busier side's share (sender or receiver); data changing L2B
    crosses the DRAM group ports, as there is no other path between L2Bs."""
    src, dst = ins[0].layout, out.layout
    levels = moved_levels(src, dst)
    if not levels:  # every PE already holds what it needs: a local copy
        return copy_cost(machine, ins, out, attrs)
    top = levels[0]
    nbytes = out.nbytes

    def share(levels_: tuple[str, ...]) -> float:
        parts = min(_parts(machine, src, levels_, False), _parts(machine, dst, levels_, False))
        return nbytes / parts

    moved: dict[str, float] = {}  # in LINKS order
    if top == "L2B":
        per_group = machine.l2b_per_group
        moved["dram"] = max(nbytes * min(per_group, n) / n for n in (
            _parts(machine, src, ("L2B",), True), _parts(machine, dst, ("L2B",), False)))
    if top in UNDER_L2B:
        moved["l2b"] = share(("L2B",))
    moved["l1b"] = share(("L2B", "L1B"))
    moved["pe"] = max(nbytes / _parts(machine, src, LEVELS, True),   # any copy may send
                      nbytes / _parts(machine, dst, LEVELS, False))  # every copy receives
    links = _link_work(machine, moved)
    crossed = len(LEVELS) - LEVELS.index(top)
    cycles = max(c for _, c in links) + machine.latency["tree"] * crossed
    return Work((("tree", cycles),), bytes=nbytes,
                units=max(src.spread_units(), dst.spread_units()), links=links)


def keeps_local_order(layout: Layout, perm: tuple[int, ...] | None) -> bool:
    """Does a transpose by ``perm`` leave every PE's local data in its order (a free
    relabelling)?"""
    perm = perm or tuple(reversed(range(len(layout.shape))))
    local = layout.local_shape()
    moved = [p for p in perm if local[p] > 1]
    return moved == sorted(moved)


def transpose_cost(machine, ins, out: TensorType, attrs) -> Work:
    """Free when only the axis labels change; a local move when local data is reordered,
    in runs of the innermost axes that keep their order."""
    x = ins[0]
    perm = attrs["perm"] or tuple(reversed(range(len(x.shape))))
    if keeps_local_order(x.layout, perm):
        return FREE
    local = x.layout.local_shape()
    moved = [p for p in perm if local[p] > 1]
    run, inner = 1, sorted(moved, reverse=True)  # in's axes, innermost first
    for p, q in zip(reversed(moved), inner, strict=True):
        if p != q:  # out's innermost axes run on only while they are in's, in order
            break
        run *= local[p]
    return _move(machine, ins, out, [(run, prod(local))])
