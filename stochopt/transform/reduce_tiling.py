"""Tiling a reduced axis: flash-decoding as a rewrite.

``tile_reduction(kernel, (node, tiles))`` cuts the axis that ``node`` reduces (a
reduce_* along it, or a matmul's K) into ``tiles`` tiles. The axis is followed through
the whole kernel, both ways: every value laid along it (the loads that bring it in, the
elementwise work on it, other reductions and matmuls over it) gets one copy per tile,
each load reading its DRAM slice. Where a value reduces the axis away, the tiles'
partial results are combined once:

    reduce_sum(x, a)  -> reduce_sum(x_0, a) + reduce_sum(x_1, a) + ...
    reduce_max(x, a)  -> maximum(reduce_max(x_0, a), reduce_max(x_1, a), ...)   (min alike)
    a @ b (K tiled)   -> a_0 @ b_0 + a_1 @ b_1 + ...

so a softmax over the axis becomes: scores per tile, the max combined, exp per tile, the
sum combined, and the output matmul accumulated over tiles; a tensor read by two matmuls
(c_kv in mla_decode) is loaded once per tile and feeds both. Values that do not lie
along the axis are computed once. The list scheduler (schedule.py) then orders the
tiles so that loads run ahead of compute.

Exact: maxima and minima are unchanged; sums only change their order of addition. It
refuses (ConstraintError) an axis that reaches the kernel's output (tile_output's
case), meets itself (two axes of one value), passes a reshape, a pe slice or concat
that cuts it, or whose values do not all split into the tiles.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from stochopt.errors import ConstraintError
from stochopt.leir.ir import Kernel, Node
from stochopt.leir.ops import ELEMENTWISE, OPS
from stochopt.leir.rules import Const
from stochopt.transform.edit import rebuild
from stochopt.transform.tiling import TILE_COUNTS, dram_slice, refuse, strict_remap, tile_attrs

REDUCTIONS = {"reduce_sum": "add", "reduce_max": "maximum", "reduce_min": "minimum"}
WHAT = "the reduced axis"


def where_tile_reduction(k: Kernel) -> list[tuple[int, int]]:
    """(node, tiles) for each reduction and matmul whose reduced axis splits into tiles."""
    sites = []
    for i in range(len(k.nodes)):
        size = _reduced_size(k, i)
        sites += [(i, t) for t in TILE_COUNTS if size and size % t == 0 and size > t]
    return sites


def tile_reduction(k: Kernel, site: tuple[int, int], machine) -> Kernel:
    seed, tiles = site
    start = _reduced_axis(k, seed)
    if start is None:
        raise refuse(k, seed, "it reduces no axis", WHAT)
    axis_of = _follow(k, start)
    for i, ax in axis_of.items():
        if k.nodes[i].type.shape[ax] % tiles:
            raise refuse(k, i, f"its axis {ax} ({k.nodes[i].type.shape[ax]}) does not "
                         f"split into {tiles} tiles", WHAT)
    nodes: list[Node] = []
    whole: dict[int, int] = {}                      # node -> its one copy
    tile: list[dict[int, int]] = [{} for _ in range(tiles)]  # node -> tile t's copy

    def args_of(i: int, t: int) -> dict[int, int]:
        return {**whole, **tile[t]}

    for i, n in enumerate(k.nodes):
        if i in axis_of:
            attrs = tuple(tile_attrs(k, i, axis_of[i], tiles, WHAT).items())
            for t in range(tiles):
                if n.op == "load":
                    nodes.append(dram_slice(k, i, axis_of[i], tiles, t, whole, WHAT))
                    copy = replace(n, args=(len(nodes) - 1,))
                else:
                    copy = strict_remap(n, args_of(i, t))
                tile[t][i] = len(nodes)
                nodes.append(replace(copy, attrs=attrs, name=_named(n, t)))
        elif _combines(k, i, axis_of):
            parts = []
            for t in range(tiles):
                parts.append(len(nodes))
                nodes.append(replace(strict_remap(n, args_of(i, t)), name=_named(n, t)))
            combine = "add" if n.op == "matmul" else REDUCTIONS[n.op]
            total = parts[0]
            for part in parts[1:]:
                nodes.append(Node(combine, (total, part), (), n.type))
                total = len(nodes) - 1
            nodes[total] = replace(nodes[total], name=n.name)
            whole[i] = total
        else:
            if any(j in axis_of for j in n.inputs):
                why = ("the axis reaches the output; tile_output cuts that" if n.op == "store"
                       else f"the tiled axis does not go through {n.op}")
                raise refuse(k, i, why, WHAT)
            whole[i] = len(nodes)
            nodes.append(strict_remap(n, whole))
    try:
        return rebuild(k, nodes, whole[k.output], machine)
    except ConstraintError as e:
        # an op whose attributes tiling does not yet shrink (a layout or shape written
        # for the whole axis) leaves a kernel that does not type: refuse it by name
        raise ConstraintError(f"cannot tile {WHAT}: the tiled kernel does not type: "
                              f"{e.message}", line=e.line) from None


# -- which axis of each value runs along the reduced one -------------------------------

def _reduced_axis(k: Kernel, i: int) -> tuple[int, int] | None:
    """(operand, axis) that node i reduces: a reduction's input axis, a matmul's K in a."""
    n = k.nodes[i]
    if n.op in REDUCTIONS and isinstance(n.args[0], int):
        rank = len(k.nodes[n.args[0]].type.shape)
        return n.args[0], n.attr("axis") % rank
    if n.op == "matmul":
        return n.args[0], len(k.nodes[n.args[0]].type.shape) - 1
    return None


def _reduced_size(k: Kernel, i: int) -> int | None:
    at = _reduced_axis(k, i)
    return k.nodes[at[0]].type.shape[at[1]] if at else None


def _combines(k: Kernel, i: int, axis_of: dict[int, int]) -> bool:
    """Node i reduces the tiled axis away: its tiles' partials are combined."""
    at = _reduced_axis(k, i)
    return at is not None and axis_of.get(at[0]) == at[1]


def _links(k: Kernel, i: int) -> list[tuple[int, int, int]]:
    """(axis of node i, operand, axis of the operand) that run along each other."""
    n = k.nodes[i]
    ins = [a for a in n.args if not isinstance(a, Const)]
    rank = len(n.type.shape)
    out: list[tuple[int, int, int]] = []
    if n.op in ("input", "full", "load", "reshape") or n.type.location == "dram":
        return out  # loads are cut through their DRAM slice; reshape is not followed
    kind = OPS[n.op].kind
    if kind == ELEMENTWISE or n.op in ("broadcast_to", "relayout", "slice", "concat"):
        for j in ins:
            shape = k.nodes[j].type.shape
            for ax in range(rank):
                src = ax - (rank - len(shape))
                if src >= 0 and shape[src] == n.type.shape[ax] and shape[src] > 1:
                    out.append((ax, j, src))
    elif n.op in REDUCTIONS:
        r = n.attr("axis") % len(k.nodes[ins[0]].type.shape)
        for ax in range(rank):
            src = ax if n.attr("keepdims") or ax < r else ax + 1
            if src != r:
                out.append((ax, ins[0], src))
    elif n.op == "matmul":
        a, b = ins
        out += [(ax, a, ax) for ax in range(rank - 1)]   # batch axes and M
        out += [(ax, b, ax) for ax in range(rank - 2)]   # batch axes
        out.append((rank - 1, b, rank - 1))              # N
    elif n.op == "transpose":
        perm = n.attr("perm") or tuple(reversed(range(rank)))
        out += [(ax, ins[0], perm[ax]) for ax in range(rank)]
    return out


def _follow(k: Kernel, start: tuple[int, int]) -> dict[int, int]:
    """Every node with an axis that runs along ``start``'s (both ways through the graph,
    and from a matmul's a across K to its b): node -> that axis."""
    edges: dict[tuple[int, int], list[tuple[int, int]]] = {}

    def link(x: tuple[int, int], y: tuple[int, int]) -> None:
        edges.setdefault(x, []).append(y)
        edges.setdefault(y, []).append(x)

    for i, n in enumerate(k.nodes):
        for ax, j, src in _links(k, i):
            link((i, ax), (j, src))
        if n.op == "matmul":  # K of a runs along K of b
            a, b = n.inputs
            rank = len(n.type.shape)
            link((a, rank - 1), (b, rank - 2))
    axis_of: dict[int, int] = {}
    queue = deque([start])
    while queue:
        i, ax = queue.popleft()
        if axis_of.get(i, ax) != ax:
            raise refuse(k, i, "two of its axes run along the tiled axis", WHAT)
        if i in axis_of:
            continue
        if k.nodes[i].op == "reshape":  # reached from a reader: its own rule is not followed
            raise refuse(k, i, "the tiled axis does not go through reshape", WHAT)
        if k.nodes[i].op in ("slice", "concat") and \
                not any(a == ax for a, _, _ in _links(k, i)):
            # its operand's axis is longer than its own: tile t would need the operand's
            # t-th part of the cut, not the t-th part of the whole
            raise refuse(k, i, f"it cuts the tiled axis ({k.nodes[i].op})", WHAT)
        axis_of[i] = ax
        queue.extend(edges.get((i, ax), []))
    return axis_of


def _named(n: Node, t: int) -> str:
    return f"{n.name}_{t}" if n.name else ""

