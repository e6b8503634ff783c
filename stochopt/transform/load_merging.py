"""Loads of neighbouring DRAM slices merged into one load, the pieces sliced on chip.

Every DMA transfer pays its issue cycles beside its bytes (``dma_issue``, docs/machine.md
section 2), so two loads of the halves of one tensor cost more than one load of the
whole. The rewrite
``load_slices_together`` takes loads that read equal, adjacent slices of one DRAM tensor
along one axis, with one layout, and makes them one load of their union whose layout
gives that axis an outermost local factor (one block per piece); each piece is then a
pe slice of whole blocks, a local copy that leaves every piece with its old layout
(docs/leir.md, section 4). Values never change: every piece holds the same elements.
"""

from __future__ import annotations

from collections import defaultdict

from stochopt.errors import ConstraintError
from stochopt.leir.ir import Kernel, Node
from stochopt.leir.layout import Factor, Layout
from stochopt.leir.rules import make_layout
from stochopt.transform.edit import insert, rebuild, with_layout
from stochopt.transform.tiling import input_region


def where_load_slices_together(k: Kernel) -> list[tuple[int, ...]]:
    """Each run of two or more loads (in node order) that read equal, adjacent slices of
    one input along one axis, with one layout: the loads, in the order of their slices."""
    groups: dict[tuple, list[tuple[int, int, int]]] = defaultdict(list)
    for i, n in enumerate(k.nodes):
        if n.op != "load" or (piece := input_region(k, i)) is None:
            continue
        source, bounds = piece
        for axis, (lo, hi) in enumerate(bounds):
            others = bounds[:axis] + bounds[axis + 1:]
            groups[(source, axis, others, hi - lo, n.attr("layout"))].append((lo, hi, i))
    sites = []
    for pieces in groups.values():
        pieces.sort()
        run = [pieces[0]]
        for piece in pieces[1:] + [None]:
            if piece is not None and piece[0] == run[-1][1]:
                run.append(piece)
                continue
            if len(run) >= 2:
                sites.append(tuple(i for _, _, i in run))
            if piece is not None:
                run = [piece]
    return sorted(set(sites))


def _merged_layout(lay: Layout, axis: int, pieces: int, shape: tuple[int, ...]) -> Layout:
    """``lay`` for the union: the axis gains an outermost local factor of one block per
    piece (merged into a local factor already outermost)."""
    factors = lay.axes[axis]
    if factors and factors[0].level is None:
        merged = (Factor(factors[0].size * pieces),) + factors[1:]
    else:
        merged = (Factor(pieces),) + factors
    axes = list(lay.axes)
    axes[axis] = merged
    return make_layout(shape, axes, lay.replicated)


def load_slices_together(k: Kernel, site: tuple[int, ...], machine, rng=None) -> Kernel:
    pieces = [input_region(k, i) for i in site]
    if any(p is None for p in pieces):
        raise ConstraintError("load_slices_together: a load no longer reads an input")
    source = pieces[0][0]
    axis = next(a for a, (b0, b1) in enumerate(zip(pieces[0][1], pieces[1][1], strict=True))
                if b0 != b1)
    lo, hi = pieces[0][1][axis][0], pieces[-1][1][axis][1]
    bounds = tuple((lo, hi) if a == axis else b for a, b in enumerate(pieces[0][1]))
    shape = tuple(b - a for a, b in bounds)
    first = min(site)
    load = k.nodes[first]
    layout = _merged_layout(load.attr("layout"), axis, len(site), shape)
    whole = shape == k.nodes[source].type.shape
    nodes = list(k.nodes)
    at = first
    if not whole:  # the union is a DRAM slice (free) of the input
        nodes = insert(nodes, at, Node("slice", (source,), (("bounds", bounds),),
                                       k.nodes[source].type))
        at += 1
    read = at - 1 if not whole else source
    nodes = insert(nodes, at, Node("load", (read,), with_layout(load.attrs, layout),
                                   load.type, load.name))
    shift = at - first + 1  # the nodes inserted before the old loads
    for i, (_, piece_bounds) in zip(site, pieces, strict=True):
        inner = tuple((a - lo, b - lo) if ax == axis else (0, b - a)
                      for ax, (a, b) in enumerate(piece_bounds))
        old = nodes[i + shift]
        nodes[i + shift] = Node("slice", (at,), (("bounds", inner),), old.type, old.name)
    return rebuild(k, nodes, k.output + shift, machine)
