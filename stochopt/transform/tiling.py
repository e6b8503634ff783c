"""Tiling into row blocks: the rewrite that lets loads, compute and stores overlap.

``tile_output(kernel, (axis, tiles))`` cuts the kernel's output along one axis into
``tiles`` blocks and gives each block its own copy of the work that produces it: its
loads read a DRAM slice, its ops run on the smaller values, and its store writes its
region of the output; the kernel returns the stored tiles joined by ``concat``. What does
not vary along the axis (a weight, a broadcast row, a constant) is computed once, before
the tiles. The loads of block t+1 are issued before block t's compute and store, so the
in-order DMA queue streams while the PEs work (docs/machine.md, section 2).

The rewrite is exact: every block computes the same elements with the same operations.
It refuses (ConstraintError) a kernel whose work mixes the rows of the axis: a reduction
or a pe concat or slice along it, a reshape, a value needed both whole and in blocks.
"""

from __future__ import annotations

from dataclasses import replace

from stochopt.errors import ConstraintError
from stochopt.leir.ir import Kernel, Node, op_of
from stochopt.leir.layout import Factor, Layout
from stochopt.leir.rules import Const, make_layout
from stochopt.leir.tiling_rules import WHOLE, NotTiled
from stochopt.transform.edit import rebuild, remap

TILE_COUNTS = (2, 4, 8)


def where_tile_output(k: Kernel) -> list[tuple[int, int]]:
    """(axis, tiles) for each axis of a kernel that returns a single store. Cheap on
    purpose: whether the work can be cut is found out by ``tile_output`` itself."""
    out = k.nodes[k.output]
    if out.op != "store":
        return []
    return [(axis, t) for axis, size in enumerate(out.type.shape) for t in TILE_COUNTS
            if size % t == 0]


def tile_output(k: Kernel, site: tuple[int, int], machine, rng=None) -> Kernel:
    axis, tiles = site
    tax = _tiled_axes(k, axis)
    nodes: list[Node] = []
    whole: dict[int, int] = {}
    for i, n in enumerate(k.nodes):  # inputs first, then what every tile shares
        if n.op == "input" or (i in tax and tax[i] is WHOLE):
            whole[i] = len(nodes)
            nodes.append(strict_remap(n, whole))
    loads, work, placed, emit = _tile_copier(k, tax, tiles, nodes, whole)
    for i in loads:
        emit(0, i)
    for t in range(tiles):
        if t + 1 < tiles:  # the next block's loads go ahead of this block's work
            for i in loads:
                emit(t + 1, i)
        for i in work:
            emit(t, i)
    stores = tuple(placed[t][k.output] for t in range(tiles))
    nodes.append(Node("concat", stores, (("axis", axis),), k.output_type, "out"))
    return rebuild(k, nodes, len(nodes) - 1, machine)


def _tile_copier(k: Kernel, tax: dict[int, int | None], tiles: int, nodes: list[Node],
                 whole: dict[int, int], what: str = "the output"):
    """The loads and the other work that vary along the tiled axis (in node order), the
    index of each tile's copies, and ``emit(t, i)``, which appends tile t's copy of node
    i to ``nodes`` (a load reads its DRAM slice, appended before it). ``whole`` places
    the inputs and what every tile shares. Refuses an axis that does not split evenly."""
    for i, ax in tax.items():
        if ax is not WHOLE and k.nodes[i].type.shape[ax] % tiles:
            raise refuse(k, i, f"its axis {ax} ({k.nodes[i].type.shape[ax]}) does not split "
                          f"into {tiles} tiles", what)
    loads = [i for i in sorted(tax) if tax[i] is not WHOLE and k.nodes[i].op == "load"]
    work = [i for i in sorted(tax) if tax[i] is not WHOLE and k.nodes[i].op != "load"]
    placed: list[dict[int, int]] = [dict(whole) for _ in range(tiles)]
    attrs = {i: tuple(tile_attrs(k, i, tax[i], tiles, what).items()) for i in loads + work}

    def emit(t: int, i: int) -> None:
        n = k.nodes[i]
        if n.op == "load":
            nodes.append(dram_slice(k, i, tax[i], tiles, t, whole, what))
            n = replace(n, args=(len(nodes) - 1,))
        else:
            n = strict_remap(n, placed[t])
        placed[t][i] = len(nodes)
        nodes.append(replace(n, attrs=attrs[i], name=f"{n.name}_{t}" if n.name else ""))

    return loads, work, placed, emit


def where_split_stored_tile(k: Kernel) -> list[int]:
    """The stored tiles of a tiled output (a concat of stores) that cut in two along
    the concat's axis: their places in the concat."""
    out = k.nodes[k.output]
    if out.op != "concat" or out.type.location != "dram":
        return []
    axis = out.attr("axis") % len(out.type.shape)
    return [t for t, s in enumerate(out.args)
            if k.nodes[s].op == "store" and k.nodes[s].type.shape[axis] % 2 == 0]


def split_stored_tile(k: Kernel, site: int, machine, rng=None) -> Kernel:
    """concat([.., store(f(x[tile t])), ..]) -> concat([.., store(f(x[first half])),
    store(f(x[second half])), ..]): tile_output applied to one stored tile, so tiles
    become smaller where they pay (the last tile peeled off, 2 tiles made 3 or 4). What
    the tile reads whole stays where it is; the halves go where the tile's store was."""
    out = k.nodes[k.output]
    axis = out.attr("axis") % len(out.type.shape)
    store = out.args[site]
    what = f"stored tile {site}"
    tax = _tiled_axes(k, axis, root=store, what=what)
    nodes = list(k.nodes[:store + 1])  # every node the tile reads whole comes before it
    whole = {i: i for i, n in enumerate(k.nodes)  # they stay where they are
             if n.op == "input" or (i in tax and tax[i] is WHOLE)}
    loads, work, placed, emit = _tile_copier(k, tax, 2, nodes, whole, what)
    for group in (loads, work):  # both halves' loads, then both halves' work
        for t in (0, 1):
            for i in group:
                emit(t, i)
    halves = (placed[0][store], placed[1][store])
    shift = len(nodes) - (store + 1)  # the nodes after the tile's store move past the halves
    after = {j: j + shift for j in range(store + 1, len(k.nodes))}
    nodes += [remap(n, after) for n in k.nodes[store + 1:]]
    output = k.output + shift
    moved = [a if a <= store else a + shift for a in out.args]
    nodes[output] = out.replaced(args=tuple(moved[:site]) + halves + tuple(moved[site + 1:]))
    return rebuild(k, nodes, output, machine)


# -- which axis of each value the output's axis runs along ----------------------------

def _tiled_axes(k: Kernel, axis: int, root: int | None = None,
                what: str = "the output") -> dict[int, int | None]:
    """For every node ``root`` (the output) needs (but the DRAM values its loads read):
    the axis that follows root's tiled axis, or WHOLE when the node does not vary along
    it."""
    root = k.output if root is None else root
    tax: dict[int, int | None] = {root: axis}
    for i in range(root, -1, -1):
        if i not in tax:
            continue
        for j, ax in _input_axes(k, i, tax[i], what):
            if tax.get(j, ax) != ax:
                raise refuse(k, j, "it is needed both whole and in tiles", what)
            tax[j] = ax
    return tax


def _input_axes(k: Kernel, i: int, ax: int | None,
                what: str = "the output") -> list[tuple[int, int | None]]:
    """(operand, its axis or WHOLE) for each tensor operand of node i, by the op's tiling
    rule (leir/tiling_rules.py); what does not vary along the axis needs all of its own."""
    n = k.nodes[i]
    ins = [a for a in n.args if not isinstance(a, Const)]
    if ax is WHOLE:
        return [(j, WHOLE) for j in ins]
    try:
        axes = op_of(n.op).tiling([k.nodes[j].type for j in ins], n.type, dict(n.attrs), ax)
    except NotTiled as e:
        raise refuse(k, i, str(e), what) from None
    if not axes:  # the op makes each block's value itself (load, full): nothing to follow
        return []
    return list(zip(ins, axes, strict=True))


# -- one tile's copy of a node -------------------------------------------------------

def tile_attrs(k: Kernel, i: int, ax: int, tiles: int, what: str = "the output") -> dict:
    """The static arguments of one tile's copy of node i, cut along its axis ``ax``."""
    n = k.nodes[i]
    attrs = dict(n.attrs)
    if "layout" in attrs:
        attrs["layout"] = _shrink(attrs["layout"], ax, tiles, k, i, what)
    if "shape" in attrs:  # full, broadcast_to
        shape = list(attrs["shape"])
        shape[ax] //= tiles
        attrs["shape"] = tuple(shape)
    if n.op == "slice":
        bounds = list(attrs["bounds"])
        bounds[ax] = (0, bounds[ax][1] // tiles)
        attrs["bounds"] = tuple(bounds)
    return attrs


def _shrink(lay: Layout, ax: int, tiles: int, k: Kernel, i: int, what: str) -> Layout:
    """The layout of one tile: divide the axis' innermost local factor that can be
    divided, else its innermost spread factor (the tile then uses fewer units). The
    same factors always shrink the same way, so operands laid out alike stay alike."""
    factors = list(lay.axes[ax])
    for local in (True, False):
        for j in reversed(range(len(factors))):
            f = factors[j]
            if (f.level is None) == local and f.size % tiles == 0:
                factors[j] = Factor(f.size // tiles, f.level)
                shape = list(lay.shape)
                shape[ax] //= tiles
                axes = list(lay.axes)
                axes[ax] = tuple(factors)
                return make_layout(shape, axes, lay.replicated)
    raise refuse(k, i, f"no factor of its layout's axis {ax} divides by {tiles}", what)


def input_region(k: Kernel, i: int) -> tuple[int, tuple[tuple[int, int], ...]] | None:
    """(the kernel input, the bounds) that load i reads: a whole input or a slice of
    one; None for a value the kernel stored."""
    source = k.nodes[i].args[0]
    src = k.nodes[source]
    if src.op == "input":
        return source, tuple((0, s) for s in src.type.shape)
    if src.op == "slice" and k.nodes[src.args[0]].op == "input":
        return src.args[0], src.attr("bounds")
    return None


def dram_slice(k: Kernel, i: int, ax: int, tiles: int, t: int,
               whole: dict[int, int], what: str = "the output") -> Node:
    """The DRAM slice tile t's copy of load i reads: the load's source cut along ``ax``."""
    region = input_region(k, i)
    if region is None:
        raise refuse(k, i, "it loads a value the kernel stored", what)
    base, bounds = region[0], list(region[1])
    lo, hi = bounds[ax]
    step = (hi - lo) // tiles
    bounds[ax] = (lo + t * step, lo + (t + 1) * step)
    return Node("slice", (whole[base],), (("bounds", tuple(bounds)),), k.nodes[base].type)


def strict_remap(n: Node, mapping: dict[int, int]) -> Node:
    """edit.remap, but strict: every argument of a tile's node must already be placed,
    so a hole in the construction fails here rather than wiring an old index."""
    return replace(n, args=tuple(a if isinstance(a, Const) else mapping[a] for a in n.args))


def refuse(k: Kernel, i: int, why: str, what: str = "the output") -> ConstraintError:
    n = k.nodes[i]
    return ConstraintError(f"cannot tile {what}: {n.op} ({n.name or i}): {why}",
                           line=n.line)

