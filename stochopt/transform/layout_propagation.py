"""Layout propagation: change connected layouts together.

An elementwise op needs its full-size operands laid out as its result, so the values
joined by elementwise ops form a *layout group* that can only change layout all at once;
a broadcast operand (size 1 on some axes) must then be replicated over the levels the
group spreads those axes over. One layout move alone leaves such a group invalid or
adds a relayout; ``propagate_layout`` moves the whole group:

    site ("relayout", r): drop relayout r and give r's group the layout r's input has
        e.g. where(mask, relayout(s, A), -inf) -> where(mask', s, -inf): the mask is
        loaded directly in the matmul's output layout
    site ("member", m): give m's group the layout of load/full m

Every load, full and relayout that makes a group member (or one of its broadcast
operands) is rewritten to the derived layout; a relayout whose input already has it is
dropped. Values never change; the result is type-checked, and a consumer that cannot
take the new layout (a matmul, say) makes the move refuse with a ConstraintError.
"""

from __future__ import annotations

from collections import Counter

from stochopt.errors import ConstraintError
from stochopt.leir.ir import Kernel, Node
from stochopt.leir.layout import LEVELS, Factor, Layout, divisors_within
from stochopt.leir.ops import ELEMENTWISE, OPS, layout_ops
from stochopt.leir.rules import make_layout
from stochopt.transform.edit import rebuild, remap, replace_uses, substitute, with_layout


def layout_groups(k: Kernel) -> list[int]:
    """For every node, the smallest index of its layout group (union-find root)."""
    parent = list(range(len(k.nodes)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, n in enumerate(k.nodes):
        if n.type.location != "pe" or n.op == "input" or OPS[n.op].kind != ELEMENTWISE:
            continue
        for j in n.inputs:
            if k.nodes[j].type.shape == n.type.shape:
                a, b = root(i), root(j)
                parent[max(a, b)] = min(a, b)
    return [root(i) for i in range(len(k.nodes))]


def where_propagate_layout(k: Kernel) -> list[tuple[str, int]]:
    groups = layout_groups(k)
    size = Counter(groups)
    sites = [("relayout", i) for i, n in enumerate(k.nodes) if n.op == "relayout"
             and size[groups[i]] > 1]
    sites += [("member", i) for i, n in enumerate(k.nodes) if n.op in ("load", "full")
              and size[groups[i]] > 1]
    return sites


def propagate_layout(k: Kernel, site: tuple[str, int], machine, rng=None) -> Kernel:
    kind, i = site
    nodes = list(k.nodes)
    if kind == "relayout":
        target = k.nodes[k.nodes[i].args[0]].type.layout
        nodes = replace_uses(nodes, i, k.nodes[i].args[0])
    else:
        target = k.nodes[i].attr("layout")
    groups = layout_groups(k)
    members = [j for j, g in enumerate(groups) if g == groups[i] and j != i]
    changed = _take_layout(nodes, k, members, target)
    if kind == "member" and not changed:
        raise ConstraintError("propagate_layout: the group already has that layout")
    for j, n in enumerate(nodes):  # relayouts that now move nothing
        if n.op == "relayout" and j in members and isinstance(n.args[0], int) \
                and _layout_of(nodes, k, n.args[0]) == n.attr("layout"):
            nodes = replace_uses(nodes, j, n.args[0])
    return rebuild(k, nodes, k.output, machine)


def _take_layout(nodes: list[Node], k: Kernel, members, target: Layout) -> bool:
    """Give every load, full and relayout that makes a member, or a broadcast operand of
    an elementwise member, the layout derived from ``target`` (in ``nodes``, in place);
    whether any changed."""
    changed = False
    for j in members:
        operands = k.nodes[j].inputs if OPS[k.nodes[j].op].kind == ELEMENTWISE else ()
        for producer in (j, *operands):
            n = nodes[producer]
            if n.op not in layout_ops():
                continue
            new = derived(target, n.type.shape)
            if new is not None and new != n.attr("layout"):
                nodes[producer] = n.replaced(attrs=with_layout(n.attrs, new))
                changed = True
    return changed


def derived(target: Layout, shape: tuple[int, ...]) -> Layout | None:
    """The layout an operand of ``shape`` must have to meet a result laid out as
    ``target`` under broadcasting: full axes as in the target, size-1 axes local and
    replicated over the levels the target spreads there. None if no such layout."""
    rank = len(target.shape)
    offset = rank - len(shape)
    if offset < 0:
        return None
    axes: list[tuple[Factor, ...]] = []
    replicated = set(target.replicated)
    for ax, size in enumerate(shape):
        full = target.shape[ax + offset]
        if size == full:
            axes.append(target.axes[ax + offset])
        elif size == 1:
            axes.append((Factor(1),))
        else:
            return None
    for ax in range(rank):
        if ax < offset or shape[ax - offset] != target.shape[ax]:
            replicated |= target.axis_levels(ax)
    spread = {f.level for axis in axes for f in axis if f.level}
    return make_layout(shape, axes, replicated - spread)


def _layout_of(nodes, k: Kernel, j: int) -> Layout | None:
    """A node's layout after the edit: its new attribute if it is a layout op."""
    n = nodes[j]
    return n.attr("layout") if n.op in layout_ops() else k.nodes[j].type.layout


# -- gathering a spread factor back into local memory ---------------------------------

def where_gather_spread_factor(k: Kernel) -> list[tuple[int, int, int]]:
    """(layout op, axis, factor index) of every spread factor a load, relayout or full
    lays out."""
    return [(i, axis, j) for i, n in enumerate(k.nodes) if n.op in layout_ops()
            for axis, factors in enumerate(n.attr("layout").axes)
            for j, f in enumerate(factors) if f.level is not None]


def gather_divisors(k: Kernel, site: tuple[int, int, int], machine=None) -> list[int]:
    """How much of the spread factor at ``site`` may be made local: its divisors."""
    i, axis, j = site
    d = k.nodes[i].attr("layout").axes[axis][j].size
    return divisors_within(d, d)


def _gathered_axis(k: Kernel, site: tuple[int, int, int], rng, option: int | None
                   ) -> tuple[Factor, ...]:
    """The axis at ``site`` with g of its spread factor d_L made local, d_L -> (d/g)_L, g:
    g is ``option``, else drawn from gather_divisors, else (no rng) all of d."""
    i, axis, j = site
    ref = k.nodes[i].attr("layout").axes[axis]
    d = ref[j].size
    g = option if option is not None else \
        rng.choice(gather_divisors(k, site)) if rng is not None else d
    return ref[:j] + (Factor(d // g, ref[j].level), Factor(g)) + ref[j + 1:]


def gather_spread_factor(k: Kernel, site: tuple[int, int, int], machine,
                         rng=None, option: int | None = None) -> Kernel:
    """Make part of a spread factor local, d_L -> (d/g)_L, g, in every layout op that
    lays out an axis of the same size with the same factors (the axis as the values
    joined by elementwise ops, matmuls and transposes see it), so the change stays
    consistent through the kernel. The inverse of spread_over_more_of_the_tree: fewer
    units work, but a run that ends in the new local factor is g times longer in DRAM,
    and a tree that no longer crosses the level is cheaper. Values never change."""
    i, axis, _ = site
    lay: Layout = k.nodes[i].attr("layout")
    ref, size = lay.axes[axis], lay.shape[axis]
    new_axis = _gathered_axis(k, site, rng, option)
    nodes = list(k.nodes)
    for t, n in enumerate(nodes):
        if n.op not in layout_ops():
            continue
        old: Layout = n.attr("layout")
        axes = [new_axis if s == size and a == ref else a
                for s, a in zip(old.shape, old.axes, strict=True)]
        if axes != list(old.axes):
            new = make_layout(old.shape, axes, old.replicated)
            nodes[t] = n.replaced(attrs=with_layout(n.attrs, new))
    return rebuild(k, nodes, k.output, machine)


# -- loading in longer runs, the layout restored on chip ------------------------------

def where_load_in_longer_runs(k: Kernel) -> list[tuple[int, int, int]]:
    """(load, axis, factor index) of the spread factor where each load's DRAM run ends:
    the last spread factor in the layout's order (a run is the trailing local factors)."""
    sites = []
    for i, n in enumerate(k.nodes):
        if n.op != "load":
            continue
        spread = [(axis, j) for axis, factors in enumerate(n.attr("layout").axes)
                  for j, f in enumerate(factors) if f.level is not None]
        if spread:
            sites.append((i, *spread[-1]))
    return sites


def load_in_longer_runs(k: Kernel, site: tuple[int, int, int], machine,
                        rng=None, option: int | None = None) -> Kernel:
    """load(x, A) -> relayout(load(x, A'), A): A' makes g of the spread factor where A's
    run ends local, so DRAM is read in g times longer runs, and a relayout (inside the
    level the factor spread over, often on the tree beside other work) restores A for
    the readers. Unlike gather_spread_factor, only this load changes: the values it
    feeds keep their layouts. Values never change. A load that only relayouts read takes
    A' in place: their relayouts already give their readers the layouts they need, and
    a second relayout stacked on each would only cost."""
    i, axis, _ = site
    load = k.nodes[i]
    lay: Layout = load.attr("layout")
    axes = list(lay.axes)
    axes[axis] = _gathered_axis(k, site, rng, option)
    wide = make_layout(lay.shape, axes, lay.replicated)
    nodes = list(k.nodes)
    readers = k.users()[i]
    if readers and all(k.nodes[r].op == "relayout" for r in readers):
        nodes[i] = load.replaced(attrs=with_layout(load.attrs, wide))
        return rebuild(k, nodes, k.output, machine)
    nodes.append(Node("load", load.args, with_layout(load.attrs, wide), load.type))
    nodes.append(Node("relayout", (len(nodes) - 1,), (("layout", lay),), load.type,
                      load.name))
    return substitute(k, nodes, i, len(nodes) - 1, machine)


# -- spreading a group's work by a relayout at its entries ---------------------------

def _entries(k: Kernel, members: set[int]) -> list[int]:
    """The members a group's layout cannot be chosen at: the results of matmuls,
    reductions and movements that the group's elementwise ops read."""
    return sorted(m for m in members if _is_entry(k.nodes[m]))


def _grouped(k: Kernel) -> tuple[list[int], dict[int, list[int]], list[list[int]]]:
    """layout_groups(k), the members of each group, and each node's readers."""
    groups = layout_groups(k)
    by_group: dict[int, list[int]] = {}
    for j, g in enumerate(groups):
        by_group.setdefault(g, []).append(j)
    return groups, by_group, k.users()


def _moved_together(k: Kernel, start: int, grouped) -> set[int] | None:
    """The members of ``start``'s group and of every group that shares a broadcast
    operand with it (a bias read by each row tile's epilogue): one operand has one
    layout, so those groups change layout together. None where they are not laid out
    alike. ``grouped``: _grouped(k)."""
    groups, by_group, readers = grouped
    layout = k.nodes[start].type.layout
    todo, seen = [groups[start]], {groups[start]}
    while todo:
        for m in by_group[todo.pop()]:
            if k.nodes[m].type.layout != layout:
                return None
            if OPS[k.nodes[m].op].kind != ELEMENTWISE:
                continue
            for operand in k.nodes[m].inputs:
                if k.nodes[operand].type.shape == k.nodes[m].type.shape:
                    continue
                for reader in readers[operand]:
                    g = groups[reader]
                    if g not in seen and OPS[k.nodes[reader].op].kind == ELEMENTWISE:
                        seen.add(g)
                        todo.append(g)
    return {m for g in seen for m in by_group[g]}


def _is_entry(node: Node) -> bool:
    """A value on the PEs whose layout its op decides (a matmul's, a reduction's, a
    movement's), not a load's, full's or relayout's, nor an elementwise op's."""
    return node.type.location == "pe" and node.op not in layout_ops() \
        and node.op != "input" and OPS[node.op].kind != ELEMENTWISE


def where_spread_group_by_relayout(k: Kernel) -> list[tuple[int, int, int, str]]:
    """(entry, axis, factor index, level): a local factor of a group entry's layout and a
    level the layout does not spread over (often one it is replicated over); one entry
    for the groups that move together."""
    entries = [i for i, n in enumerate(k.nodes) if _is_entry(n)]
    if not entries:
        return []
    grouped = _grouped(k)
    groups, by_group, _ = grouped
    covered: set[int] = set()
    sites = []
    for i in entries:
        if i in covered or len(by_group[groups[i]]) < 2:
            continue
        members = _moved_together(k, i, grouped)
        if members is None:
            continue
        covered |= members
        lay = k.nodes[i].type.layout
        spread = lay.spread()
        sites += [(i, axis, j, level) for axis, factors in enumerate(lay.axes)
                  for j, f in enumerate(factors) if f.level is None and f.size > 1
                  for level in LEVELS if level not in spread]
    return sites


def group_spread_divisors(k: Kernel, site: tuple[int, int, int, str], machine) -> list[int]:
    i, axis, j, level = site
    size = k.nodes[i].type.layout.axes[axis][j].size
    return divisors_within(size, machine.fanout[level])


def spread_group_by_relayout(k: Kernel, site: tuple[int, int, int, str], machine,
                             rng=None, option: int | None = None) -> Kernel | None:
    """x feeding a group of elementwise ops, laid out A -> relayout(x, A') with A' cutting
    a local factor of A by d over a level A does not spread over: the group's work is
    shared by d times more units. Where A is replicated over that level the relayout
    moves nothing over the tree (each unit copies its part of the copy it holds); the
    group's loads and fulls take A' (derived for broadcast operands), and every group
    that shares a broadcast operand with it moves too. Values never change."""
    i, axis, j, level = site
    divisors = group_spread_divisors(k, site, machine)
    if not divisors:
        return None
    d = option if option is not None else \
        rng.choice(divisors) if rng is not None else divisors[-1]
    lay: Layout = k.nodes[i].type.layout
    factors = lay.axes[axis]
    axes = list(lay.axes)
    axes[axis] = factors[:j] + (Factor(d, level), Factor(factors[j].size // d)) \
        + factors[j + 1:]
    target = make_layout(lay.shape, axes, lay.replicated - {level})
    members = _moved_together(k, i, _grouped(k))
    if members is None:
        raise ConstraintError("spread_group_by_relayout: the groups that share a "
                              "broadcast operand are laid out differently")
    nodes = list(k.nodes)
    _take_layout(nodes, k, sorted(members), target)
    relayout_of: dict[int, int] = {}
    for entry in _entries(k, members):  # each entry relayouted once, read in the group
        relayout_of[entry] = len(nodes)
        nodes.append(Node("relayout", (entry,), (("layout", target),), k.nodes[entry].type))
    readers = [m for m in members if OPS[k.nodes[m].op].kind == ELEMENTWISE]
    for m in readers:
        nodes[m] = remap(nodes[m], relayout_of)
    return rebuild(k, *_in_order(nodes, len(k.nodes), k.output), machine)


def _in_order(nodes: list[Node], count: int, output: int) -> tuple[list[Node], int]:
    """Move the nodes appended after the first ``count`` to just after the node each
    reads, so every argument points to an earlier node: (the nodes, the output's
    index)."""
    after: dict[int, list[int]] = {}
    for t in range(count, len(nodes)):
        after.setdefault(nodes[t].inputs[0], []).append(t)
    order = [t for s in range(count) for t in (s, *after.get(s, ()))]
    index = {was: now for now, was in enumerate(order)}
    return [remap(nodes[was], index) for was in order], index[output]
