"""Cost rules of LEIR ops: the work an op puts on one resource of the machine.

Each rule takes (machine, input types, output type, static arguments) and returns a
Work. The formulas are stated in docs/machine.md; keep the two in step. Rules only
read plain data (types, layouts, machine constants), so they cost nothing to import.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil, prod

from stochopt.leir.layout import LEVELS, Layout
from stochopt.leir.types import TensorType, itemsize

RESOURCES = ("dma", "tree", "vector", "matrix")


@dataclass(frozen=True, slots=True)
class Work:
    resource: str | None  # None: a relabelling that moves and computes nothing
    cycles: int
    bytes: int = 0        # bytes moved (DRAM or tree) or touched in local memory
    flops: int = 0        # logical operations, counted once however replicated
    units: int = 1        # PEs (or MAUs) doing the work


FREE = Work(None, 0)


def _lanes(machine, *types: TensorType) -> int:
    widest = max(itemsize(t.dtype) for t in types)
    return max(1, machine.word_bytes // widest)


def _tensors(ins) -> list[TensorType]:
    return [t for t in ins if isinstance(t, TensorType)]


def vector_cost(cycles_per_elem: int):
    """Elementwise: each PE works through its local elements, lanes per word per cycle."""
    def rule(machine, ins, out: TensorType, attrs) -> Work:
        lanes = _lanes(machine, out, *_tensors(ins))
        local = out.layout.local_elements()
        cycles = ceil(local / lanes) * cycles_per_elem + machine.latency["vector"]
        return Work("vector", cycles, bytes=local * itemsize(out.dtype), flops=out.numel,
                    units=out.layout.spread_units())
    return rule


def copy_cost(machine, ins, out: TensorType, attrs) -> Work:
    """Local copies (slice, concat, broadcast_to, full): one pass over the output."""
    return vector_cost(1)(machine, ins, out, attrs)


def _tree_cycles(machine, levels, nbytes: float) -> int:
    """Move nbytes per unit up (reduce) and back down (broadcast) through the given levels."""
    cycles = 0
    for level in LEVELS:
        if level not in levels:
            continue
        words = machine.l2b_link_words if level == "L2B" else machine.l1b_link_words
        per_pass = max(1, ceil(nbytes / (words * machine.word_bytes)))
        cycles += 2 * per_pass + machine.latency["tree"]
    return cycles


def reduce_cost(machine, ins, out: TensorType, attrs) -> Work:
    """Local reduction on the vector unit, then the tree for spread levels of the axis."""
    x = ins[0]
    lanes = _lanes(machine, x)
    local = x.layout.local_elements()
    cycles = ceil(local / lanes) + machine.latency["vector"]
    levels = x.layout.axis_levels(attrs["axis"] % len(x.shape))
    out_local = out.layout.local_elements() * itemsize(out.dtype)
    if levels:
        cycles += _tree_cycles(machine, levels, out_local)
        return Work("tree", cycles, bytes=out_local * len(levels), flops=x.numel,
                    units=x.layout.spread_units())
    return Work("vector", cycles, bytes=local * itemsize(x.dtype), flops=x.numel,
                units=x.layout.spread_units())


def _mab_share(layout: Layout, axis: int, size: int) -> int:
    """Elements of one axis that a single MAU sees: the PE level feeds the same MAU."""
    across = prod(f.size for f in layout.axes[axis] if f.level and f.level != "PE")
    return size // across


def matmul_cost(machine, ins, out: TensorType, attrs) -> Work:
    """MACs per MAU, padded to the MAU tile, plus a tree reduction for a spread K."""
    a, b = ins
    tile = machine.mau_bf16 if a.dtype == "bf16" else machine.mau_f32
    m = _mab_share(a.layout, -2, a.shape[-2])
    k = _mab_share(a.layout, -1, a.shape[-1])
    n = _mab_share(b.layout, -1, b.shape[-1])
    batch = prod(_mab_share(a.layout, i, a.shape[i]) for i in range(len(a.shape) - 2))
    cycles = batch * ceil(m / tile[0]) * ceil(n / tile[1]) * k + machine.latency["matrix"]
    k_levels = a.layout.axis_levels(-1) - {"PE"}
    if k_levels:
        cycles += _tree_cycles(machine, k_levels, out.layout.local_elements() * 4)
    mabs = prod(v for lv, v in out.layout.spread().items() if lv != "PE")
    mabs *= prod(v for lv, v in a.layout.spread().items() if lv != "PE"
                 and lv in a.layout.axis_levels(-1))
    flops = 2 * prod(out.shape) * a.shape[-1]
    return Work("matrix", cycles, bytes=(a.local_bytes() + b.local_bytes()), flops=flops,
                units=max(1, mabs))


def _l2b_reached(machine, layout: Layout) -> int:
    if "L2B" in layout.replicated:
        return machine.fanout["L2B"]
    return layout.spread().get("L2B", 1)


def _dram_cycles(machine, layout: Layout, nbytes: int) -> tuple[int, int]:
    """DRAM transfer: served by the groups whose L2Bs it reaches; also through the L1B links."""
    groups = min(machine.dram_groups, ceil(_l2b_reached(machine, layout) / machine.l2b_per_group))
    dram = nbytes / (groups * machine.dram_bytes_per_cycle_per_group)
    spread = layout.spread()
    l1bs = spread.get("L2B", 1) * spread.get("L1B", 1)
    links = nbytes / (l1bs * machine.l1b_link_words * machine.word_bytes)
    return ceil(max(dram, links)) + machine.latency["dma"], groups


def load_cost(machine, ins, out: TensorType, attrs) -> Work:
    """DRAM -> PEs: every byte read once, even for a replicated (B@) layout."""
    cycles, groups = _dram_cycles(machine, out.layout, out.nbytes)
    return Work("dma", cycles, bytes=out.nbytes, units=groups)


def store_cost(machine, ins, out: TensorType, attrs) -> Work:
    """PEs -> DRAM: one copy of every element is written."""
    cycles, groups = _dram_cycles(machine, ins[0].layout, out.nbytes)
    return Work("dma", cycles, bytes=out.nbytes, units=groups)


def relayout_cost(machine, ins, out: TensorType, attrs) -> Work:
    """On-chip move through the highest tree level whose placement changes."""
    src, dst = ins[0].layout, out.layout
    nbytes = out.nbytes
    top = _highest_change(src, dst)
    if top is None:  # same placement; only the order inside each PE changes
        return vector_cost(1)(machine, ins, out, attrs)
    s, d = src.spread(), dst.spread()
    l2bs = max(_l2b_reached(machine, src), _l2b_reached(machine, dst))
    if top == "L2B":
        cycles = ceil(nbytes / (l2bs * machine.l2b_link_words * machine.word_bytes))
    else:
        l1bs = l2bs * max(s.get("L1B", 1), d.get("L1B", 1),
                          machine.fanout["L1B"] if "L1B" in dst.replicated else 1)
        cycles = ceil(nbytes / (l1bs * machine.l1b_link_words * machine.word_bytes))
    cycles = max(1, cycles) + machine.latency["tree"] * (LEVELS.index(top) + 1)
    return Work("tree", cycles, bytes=nbytes, units=max(src.spread_units(), dst.spread_units()))


def _placement(layout: Layout, level: str):
    where = tuple((i, j, f.size) for i, axis in enumerate(layout.axes)
                  for j, f in enumerate(axis) if f.level == level)
    return where, level in layout.replicated


def _highest_change(src: Layout, dst: Layout) -> str | None:
    for level in LEVELS:
        if _placement(src, level) != _placement(dst, level):
            return level
    return None


def transpose_cost(machine, ins, out: TensorType, attrs) -> Work:
    """Free when only the axis labels change; a local pass when local data is reordered."""
    x = ins[0]
    perm = attrs["perm"] or tuple(reversed(range(len(x.shape))))
    local_axes = [p for p in perm if x.layout.local_shape()[p] > 1]
    if local_axes == sorted(local_axes):
        return FREE
    return vector_cost(1)(machine, ins, out, attrs)
