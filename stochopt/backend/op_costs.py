"""Cost rules of LEIR ops: the work an op puts on the resources of the machine.

Each rule takes (machine, input types, output type, static arguments) and returns a
Work: one or two stages, each on one resource (dma, tree, vector, matrix), run one after
the other. The formulas are stated in docs/machine.md; keep the two in step. Rules only
read plain data (types, layouts, machine constants), so they cost nothing to import.

Four ideas carry every rule:
- a PE works only on its own local elements, so idle PEs never speed anything up;
- a link moves what must cross it: per L1B 64 words/cycle, per L2B 16 words/cycle, per
  DRAM group ~171 bytes/cycle, and each unit's link carries its own share in parallel;
- every op that moves or computes pays its resource's fixed issue latency, so none is free;
- a value's logical meaning never depends on its layout; only the cycles do.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil, prod

from stochopt.leir.layout import LEVELS, Layout
from stochopt.leir.types import TensorType, itemsize

RESOURCES = ("dma", "tree", "vector", "matrix")
UNDER_L1B = ("MAB", "PE")   # levels whose units talk through their L1B's link
UNDER_L2B = ("L2B", "L1B")  # levels whose units talk through the L2B links


@dataclass(frozen=True, slots=True)
class Work:
    stages: tuple[tuple[str, int], ...]  # (resource, cycles), run in order; () moves nothing
    bytes: int = 0   # bytes moved (DRAM or tree links) or written in local memory, per op
    flops: int = 0   # logical operations, counted once however replicated
    units: int = 1   # PEs, MAUs or DRAM groups doing the work
    latency: int = 0  # cycles in flight after the last stage, holding no resource (DMA)

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


def vector_cost(cycles_per_elem: int):
    """Elementwise: each PE works through its local elements, lanes per word per cycle."""
    def rule(machine, ins, out: TensorType, attrs) -> Work:
        local = out.layout.local_elements()
        cycles = _local_pass(machine, local, lanes(machine, out, *_tensors(ins)),
                             cycles_per_elem)
        return _work("vector", cycles, bytes=local * itemsize(out.dtype), flops=out.numel,
                     units=out.layout.spread_units())
    return rule


def copy_cost(machine, ins, out: TensorType, attrs) -> Work:
    """Local copies (slice, concat, broadcast_to, full, local reorder): one pass, no FLOPs."""
    local = out.layout.local_elements()
    cycles = _local_pass(machine, local, lanes(machine, out, *_tensors(ins)), 1)
    return _work("vector", cycles, bytes=local * itemsize(out.dtype),
                 units=out.layout.spread_units())


# ---------------------------------------------------------------------------------
# the tree: reductions, relayouts
# ---------------------------------------------------------------------------------

def _link_bytes(machine, level_group: str) -> int:
    words = machine.l1b_link_words if level_group == "L1B" else machine.l2b_link_words
    return words * machine.word_bytes


def tree_reduce_cycles(machine, parts: dict[str, int], axis_units: dict[str, int],
                       partial_bytes: int) -> int:
    """Combine partials across the levels in axis_units and send the result back down.

    ``parts``: distinct partials per level (units used); ``axis_units``: units of the
    reduced axis per level; ``partial_bytes``: one PE's partial. Levels under an L1B
    (MAB, PE) combine through each L1B's link, carrying every partial under it up and
    back down; L1B and L2B levels then combine the same way through each L2B's link.
    Every level crossed adds the tree latency.
    """
    cycles = 0
    under_l1b = prod(parts.get(lv, 1) for lv in UNDER_L1B)
    if any(lv in axis_units for lv in UNDER_L1B):
        moved = under_l1b * partial_bytes
        cycles += 2 * ceil(moved / _link_bytes(machine, "L1B"))
        under_l1b //= prod(axis_units.get(lv, 1) for lv in UNDER_L1B)
    if any(lv in axis_units for lv in UNDER_L2B):
        moved = parts.get("L1B", 1) * under_l1b * partial_bytes
        cycles += 2 * ceil(moved / _link_bytes(machine, "L2B"))
    return cycles + machine.latency["tree"] * len(axis_units)


def _axis_units(layout: Layout, axis: int, skip: tuple[str, ...] = ()) -> dict[str, int]:
    units: dict[str, int] = {}
    for f in layout.axes[axis]:
        if f.level and f.level not in skip:
            units[f.level] = units.get(f.level, 1) * f.size
    return units


def reduce_cost(machine, ins, out: TensorType, attrs) -> Work:
    """A local pass on the vector unit, then (for spread levels of the axis) the tree."""
    x = ins[0]
    local = x.layout.local_elements()
    stages = [("vector", _local_pass(machine, local, lanes(machine, x), 1))]
    axis_units = _axis_units(x.layout, attrs["axis"] % len(x.shape))
    if axis_units:
        stages.append(("tree", tree_reduce_cycles(machine, x.layout.spread(), axis_units,
                                                  out.local_bytes())))
    return Work(tuple(stages), bytes=local * itemsize(x.dtype), flops=x.numel,
                units=x.layout.spread_units())


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
    if k_units:
        stages.append(("tree", tree_reduce_cycles(machine, parts, k_units,
                                                  out.local_bytes())))
    maus = prod(u for lv, u in parts.items() if lv != "PE")
    return Work(tuple(stages), bytes=a.local_bytes() + b.local_bytes(),
                flops=2 * out.numel * a.shape[-1], units=maus)


# ---------------------------------------------------------------------------------
# DRAM: load and store
# ---------------------------------------------------------------------------------

def _parts(machine, layout: Layout, levels: tuple[str, ...], replicated_share: bool) -> int:
    """Units among which the bytes are split at these levels. A replicated level splits
    them too when any copy will do (a store), not when every unit needs them (a load)."""
    spread = layout.spread()
    return prod(machine.fanout[lv] if replicated_share and lv in layout.replicated
                else spread.get(lv, 1) for lv in levels)


def dram_cycles(machine, layout: Layout, nbytes: int, storing: bool) -> tuple[int, int]:
    """DRAM <-> PEs: the busiest DRAM group, L2B link and L1B link set the time the DMA
    queue is busy, plus the queue's issue cycles; the latency is paid in flight."""
    l2bs = _parts(machine, layout, ("L2B",), replicated_share=True)
    groups = ceil(l2bs / machine.l2b_per_group)
    busiest_group = nbytes * min(machine.l2b_per_group, l2bs) / l2bs
    terms = [busiest_group / machine.dram_bytes_per_cycle_per_group,
             nbytes / _parts(machine, layout, ("L2B",), storing) / _link_bytes(machine, "L2B"),
             nbytes / _parts(machine, layout, ("L2B", "L1B"), storing)
             / _link_bytes(machine, "L1B")]
    return ceil(max(terms)) + machine.dma_issue, groups


def load_cost(machine, ins, out: TensorType, attrs) -> Work:
    """DRAM -> PEs: DRAM is read once, even for a replicated (B@) layout."""
    cycles, groups = dram_cycles(machine, out.layout, out.nbytes, storing=False)
    return _work("dma", cycles, bytes=out.nbytes, units=groups,
                 latency=machine.latency["dma"])


def store_cost(machine, ins, out: TensorType, attrs) -> Work:
    """PEs -> DRAM: one copy of every element is written."""
    cycles, groups = dram_cycles(machine, ins[0].layout, out.nbytes, storing=True)
    return _work("dma", cycles, bytes=out.nbytes, units=groups,
                 latency=machine.latency["dma"])


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
    """On-chip move through the links of the highest level that data must cross."""
    src, dst = ins[0].layout, out.layout
    levels = moved_levels(src, dst)
    if not levels:  # every PE already holds what it needs: a local copy
        return copy_cost(machine, ins, out, attrs)
    top = levels[0]
    nbytes = out.nbytes

    def share(levels_: tuple[str, ...]) -> float:
        parts = min(_parts(machine, src, levels_, False), _parts(machine, dst, levels_, False))
        return nbytes / parts

    link = share(("L2B", "L1B")) / _link_bytes(machine, "L1B")
    if top in UNDER_L2B:
        link = max(link, share(("L2B",)) / _link_bytes(machine, "L2B"))
    crossed = len(LEVELS) - LEVELS.index(top)
    cycles = ceil(link) + machine.latency["tree"] * crossed
    return _work("tree", cycles, bytes=nbytes,
                 units=max(src.spread_units(), dst.spread_units()))


def transpose_cost(machine, ins, out: TensorType, attrs) -> Work:
    """Free when only the axis labels change; a local pass when local data is reordered."""
    x = ins[0]
    perm = attrs["perm"] or tuple(reversed(range(len(x.shape))))
    local_axes = [p for p in perm if x.layout.local_shape()[p] > 1]
    if local_axes == sorted(local_axes):
        return FREE
    return copy_cost(machine, ins, out, attrs)
