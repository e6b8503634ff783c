"""Rewrite rules that keep meaning: the classical compiler inside the search loop.

Every rule is one entry of RULES (at the end), behind one interface (pattern.Rule): a
name, its algebra, ``find(kernel)`` listing the sites where it applies and
``apply(kernel, site, machine, rng)`` returning the rewritten kernel (or raising
ConstraintError when the result would be ill-formed). Local rules are pattern entries
(local_rules.py): their sites are matches that carry what the pattern bound. Rules that
need the whole kernel (merging duplicates, spreading a layout, tiling, scheduling) are
functions here and in their modules. docs/search.md lists them all; tests/transform prove
each keeps meaning through the verifier.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace

from stochopt.errors import StochoptError
from stochopt.leir.ir import Kernel, Node
from stochopt.leir.layout import LEVELS, Factor, Layout, divisors_within
from stochopt.leir.ops import layout_ops
from stochopt.leir.rules import canonical_axes, make_layout
from stochopt.transform import algebraic_forms as forms
from stochopt.transform.edit import common_subexpressions, rebuild, with_layout
from stochopt.transform.layout_propagation import (
    gather_divisors,
    gather_spread_factor,
    group_spread_divisors,
    load_in_longer_runs,
    propagate_layout,
    spread_group_by_relayout,
    where_gather_spread_factor,
    where_load_in_longer_runs,
    where_propagate_layout,
    where_spread_group_by_relayout,
)
from stochopt.transform.load_merging import load_slices_together, where_load_slices_together
from stochopt.transform.local_rules import ARITHMETIC, DTYPES, MOVEMENT
from stochopt.transform.pattern import PatternMatcher, Rule
from stochopt.transform.reduce_tiling import tile_reduction, where_tile_reduction
from stochopt.transform.schedule import schedule
from stochopt.transform.tiling import (
    split_stored_tile,
    tile_output,
    where_split_stored_tile,
    where_tile_output,
)

MATCHER = PatternMatcher(MOVEMENT + DTYPES + ARITHMETIC)
LOCAL = MATCHER.rules()


# -- whole-kernel rules of few nodes (not local patterns: they look at the whole kernel)

def _where_reuse_loaded_tensor(k: Kernel) -> list:
    seen, out = {}, []
    for i, n in enumerate(k.nodes):
        key = (n.op, n.args, n.attrs)
        if n.op != "input" and key in seen:
            out.append(i)
        seen.setdefault(key, i)
    return out


def reuse_loaded_tensor(k: Kernel, site: int, machine, rng=None) -> Kernel:
    """Merge every duplicate, not only the one at ``site``: merging one makes its readers
    duplicates too, and they are merged in the same pass."""
    nodes, out = common_subexpressions(list(k.nodes), k.output)
    return rebuild(k, nodes, out, machine)


def _where_relayout_instead_of_reload(k: Kernel) -> list:
    first: dict[int, int] = {}
    out = []
    for i, n in enumerate(k.nodes):
        if n.op == "load":
            if n.args[0] in first:
                out.append((first[n.args[0]], i))
            else:
                first[n.args[0]] = i
    return out


def relayout_instead_of_reload(k: Kernel, site: tuple[int, int], machine, rng=None) -> Kernel:
    a, b = site
    nodes = list(k.nodes)
    nodes[b] = replace(nodes[b], op="relayout", args=(a,))
    return rebuild(k, nodes, k.output, machine)


def _where_store_parts(k: Kernel) -> list:
    out = k.nodes[k.output]
    if out.op == "store" and k.nodes[out.args[0]].op == "concat":
        return [k.output]
    return []


def store_parts(k: Kernel, i: int, machine, rng=None) -> Kernel:
    nodes = list(k.nodes)
    joined = nodes[nodes[i].args[0]]
    stores = []
    for part in joined.args:
        nodes.append(Node("store", (part,), (), nodes[part].type))
        stores.append(len(nodes) - 1)
    nodes.append(replace(joined, args=tuple(stores), name=nodes[i].name))
    return rebuild(k, nodes, len(nodes) - 1, machine)

# -- layouts ---------------------------------------------------------------------

def _spread_sites(k: Kernel) -> list:
    sites = []
    for i, n in enumerate(k.nodes):
        if n.op not in layout_ops():
            continue
        lay: Layout = n.attr("layout")
        used = set(lay.spread()) | set(lay.replicated)
        for axis, factors in enumerate(lay.axes):
            for j, f in enumerate(factors):
                if f.level is None and f.size > 1:
                    for level in LEVELS:
                        if level not in used:
                            sites.append((i, axis - len(lay.shape), j, level))
    return sites


def _spread_layout(lay: Layout, ref_axis: tuple, neg_axis: int, j: int, level: str,
                   d: int) -> Layout | None:
    """Apply 'split local factor j of this axis by d over level' if lay shares the axis."""
    rank = len(lay.shape)
    axis = neg_axis + rank
    if axis < 0:
        return make_layout(lay.shape, lay.axes, lay.replicated | {level}) \
            if level not in lay.spread() else None
    if lay.shape[axis] == 1:
        return make_layout(lay.shape, lay.axes, lay.replicated | {level}) \
            if level not in lay.spread() else None
    if level in lay.spread() or level in lay.replicated:
        return None
    blocks = _blocks_of(lay.axes[axis], ref_axis)
    if blocks is None:
        return None
    factors = list(ref_axis)
    size = factors[j].size
    factors[j:j + 1] = [Factor(d, level), Factor(size // d)]
    axes = list(lay.axes)
    axes[axis] = (Factor(blocks),) + tuple(factors)  # canonical: merged if both local
    return make_layout(lay.shape, axes, lay.replicated)


def _blocks_of(factors: tuple[Factor, ...], ref_axis: tuple[Factor, ...]) -> int | None:
    """How many blocks laid out as ``ref_axis`` an axis with these factors holds, one
    after another under a local outermost factor (1: the axis is laid out alike), or
    None. A load of several slices (load_slices_together) holds its pieces so; its
    layout spreads with theirs, so its pieces stay whole blocks."""
    if factors == ref_axis:
        return 1
    if not factors or factors[0].level is not None:
        return None
    outer = factors[0].size
    for blocks in range(2, outer + 1):
        if outer % blocks == 0:
            inner = (Factor(outer // blocks),) if outer > blocks else ()
            if canonical_axes([inner + factors[1:]])[0] == ref_axis:
                return blocks
    return None


def _where_spread_over_more_of_the_tree(k: Kernel) -> list:
    return _spread_sites(k)


def spread_divisors(k: Kernel, site, machine) -> list[int]:
    """The ways to cut the local factor at ``site`` over its level: divisors within the
    level's fan-out."""
    i, neg_axis, j, level = site
    lay: Layout = k.nodes[i].attr("layout")
    size = lay.axes[neg_axis + len(lay.shape)][j].size
    return divisors_within(size, machine.fanout[level])


def spread_over_more_of_the_tree(k: Kernel, site, machine, rng=None,
                                 option: int | None = None) -> Kernel | None:
    i, neg_axis, j, level = site
    lay: Layout = k.nodes[i].attr("layout")
    divisors = spread_divisors(k, site, machine)
    if not divisors:
        return None
    d = option if option is not None else \
        rng.choice(divisors) if rng is not None else divisors[-1]  # None: the widest
    ref_axis = lay.axes[neg_axis + len(lay.shape)]
    nodes = list(k.nodes)
    for t, n in enumerate(nodes):
        if n.op in layout_ops():
            new = _spread_layout(n.attr("layout"), ref_axis, neg_axis, j, level, d)
            if new is not None:
                nodes[t] = n.replaced(attrs=with_layout(n.attrs, new))
    return rebuild(k, nodes, k.output, machine)


# -- whole-kernel rules -------------------------------------------------------------

def tile_reduction_scheduled(k: Kernel, site, machine, rng=None) -> Kernel:
    """Tiles are worth something only once loads run ahead of compute: schedule them."""
    return schedule(tile_reduction(k, site, machine), machine)


def _where_list_schedule(k: Kernel) -> list:
    return [k.output]


def list_schedule(k: Kernel, site, machine, rng=None) -> Kernel | None:
    """None when no candidate order is faster (the proposer then draws again)."""
    out = schedule(k, machine)
    return None if out is k else out


# list scheduling makes and costs a kernel per candidate order, and the given one
SCHEDULE_UNITS = 6.0

# The rules, in the order docs/search.md lists them (and the proposer draws from), with
# the weight the proposer gives each (STOKE's weighted transforms): data, not code.
# Local rules are pattern entries (local_rules.py); the rest are functions.
RULES: list[Rule] = [
    LOCAL["fold_relayout_into_load"],
    LOCAL["fold_relayout_pair"],
    LOCAL["drop_noop_relayout"],
    LOCAL["hoist_movement"],
    Rule("reuse_loaded_tensor", "two identical ops (a tensor loaded twice) -> one",
         _where_reuse_loaded_tensor, reuse_loaded_tensor),
    Rule("relayout_instead_of_reload", "load(x, B) after load(x, A) -> relayout(load(x, A), B): "
      "DRAM is read once, the second copy moves on chip",
         _where_relayout_instead_of_reload, relayout_instead_of_reload),
    Rule("load_slices_together", "load(x[a:b]), load(x[b:c]), ... -> one load(x[a:c]) "
      "sliced on chip in whole blocks: fewer DMA transfers, each paying its issue cycles once",
         where_load_slices_together, load_slices_together),
    Rule("store_parts", "store(concat([a, b, ...], axis)) -> concat([store(a), store(b), "
      "...], axis): each part is stored in its region of the output; no local copy, and "
      "the parts may then be spread along the axis",
         _where_store_parts, store_parts),
    LOCAL["drop_widening_cast_pair"],
    LOCAL["bf16_matmul_operands"],
    replace(LOCAL["round_matmul_operands_to_bf16"], lossy=True),
    LOCAL["multiply_by_reciprocal"],
    LOCAL["divide_by_constant_as_multiply"],
    LOCAL["fold_scales"],
    LOCAL["scale_before_matmul"],
    LOCAL["reassociate_broadcasts"],
    Rule("spread_over_more_of_the_tree", "split a local factor n of an axis into d_LEVEL x n/d "
      "in every layout that lays the axis out alike (replicate where it is broadcast)",
         _where_spread_over_more_of_the_tree, spread_over_more_of_the_tree,
         options=spread_divisors),
    Rule("gather_spread_factor", "split a spread factor d_LEVEL of an axis into (d/g)_LEVEL x g "
      "local in every layout that lays the axis out alike: longer DRAM runs, shorter trees",
         where_gather_spread_factor, gather_spread_factor, options=gather_divisors),
    Rule("spread_group_by_relayout", "f(x) -> f(relayout(x, A')) for the elementwise ops "
      "f a matmul's or reduction's result x feeds: A' cuts a local factor of x's layout by "
      "d over a level it does not spread over (free where x is replicated there), the "
      "group's loads and fulls re-derived; groups sharing a broadcast operand move together",
         where_spread_group_by_relayout, spread_group_by_relayout,
         options=group_spread_divisors),
    Rule("load_in_longer_runs", "load(x, A) -> relayout(load(x, A'), A): this load alone "
      "reads DRAM in longer runs",
         where_load_in_longer_runs, load_in_longer_runs, options=gather_divisors),
    Rule("tile_output", "store(f(x)) -> concat([store(f(x[tile t])) for t in tiles]): cut the "
      "output along an axis into 2, 4 or 8 blocks, each loaded, computed and stored on its "
      "own, the next block's loads issued ahead; shared values computed once",
         where_tile_output, tile_output),
    Rule("split_stored_tile", "concat([.., store(f(x[tile])), ..]) -> concat([.., "
      "store(f(x[half 1])), store(f(x[half 2])), ..]): one stored tile cut in two, so "
      "tiles may differ in size (the last one peeled off) and 2 tiles become 3 or 4",
         where_split_stored_tile, split_stored_tile),
    Rule("tile_reduction", "reduce(f(x), a) -> combine(reduce(f(x[tile t]), a) for t in "
      "tiles), a @ b -> sum(a[:, tile t] @ b[tile t]): cut a reduced axis into 2, 4 or 8 "
      "tiles through the whole kernel (flash-decoding), partial sums, maxima and matmuls "
      "combined once; then list-scheduled",
         where_tile_reduction, tile_reduction_scheduled, units=SCHEDULE_UNITS),
    Rule("propagate_layout", "relayout(x, B) in a layout group -> x, the group's loads, "
      "fulls and relayouts re-derived from layout_of(x) (or from one load's layout)",
         where_propagate_layout, propagate_layout),
    Rule("swap_matmul_orientation", "a @ b -> (b^T @ a^T)^T",
         forms.where_swap_matmul_orientation, forms.swap_matmul_orientation),
    Rule("cancel_transposes", "transpose(transpose(x, p), q) -> transpose(x, p.q), or x",
         forms.where_cancel_transposes, forms.cancel_transposes),
    Rule("split_k_to_batch", "a @ b -> reduce_sum(a' @ b', axis=0) with K cut into g "
      "batches: a' = (g, M, K/g), b' = (g, K/g, N)",
         forms.where_split_k_to_batch, forms.split_k_to_batch),
    Rule("reduce_by_relayout", "reduce_sum(x, a) over a spread axis -> relayout(reduce_sum("
      "relayout(x, a local), a), layout_of(result)): a relayout and a local sum",
         forms.where_reduce_by_relayout, forms.reduce_by_relayout),
    Rule("split_matmul_operand_hi_lo", "a32 @ cast(b16, f32) -> bf16(a32) @ b16 + "
      "bf16(a32 - bf16(a32)) @ b16: lossy, the precision check decides",
         forms.where_split_matmul_operand_hi_lo, forms.split_matmul_operand_hi_lo,
         lossy=True),
    Rule("list_schedule", "reorder ops (depth first, loads d ahead) when the cost model "
      "finds the order faster",
         _where_list_schedule, list_schedule, weight=0.5, units=SCHEDULE_UNITS),
]


def rewrites(kernel: Kernel, machine, rng: random.Random | None = None
             ) -> Iterator[tuple[Rule, Kernel | None | StochoptError]]:
    """Every rule at every site, in RULES order: (rule, the kernel it makes there, or
    None when it declines, or the StochoptError that refused it)."""
    for r in RULES:
        for site in r.find(kernel):
            try:
                yield r, r.apply(kernel, site, machine, rng)
            except StochoptError as e:
                yield r, e
