"""Algebraic forms of matmuls and reductions that the machine runs at different costs.

Each rule is ``where_<name>(kernel) -> sites`` and ``<name>(kernel, site, machine, rng)``,
registered in rewrite.RULES with its algebra:

    swap_matmul_orientation  a @ b -> (b^T @ a^T)^T          (no big operand transposed)
    cancel_transposes        transpose(transpose(x, p), q) -> transpose(x, p.q), or x
    split_k_to_batch         a @ b -> reduce_sum(a' @ b', 0): K cut into g batches of K/g,
                             a' = (g, M, K/g), b' = (g, K/g, N); each batch accumulates
                             locally and one reduction sums the g partials
    reduce_by_relayout       reduce_sum(x, a) over a spread axis -> reduce_sum(relayout(x,
                             a local, its levels moved to another axis), a): the tree
                             reduction becomes one relayout and a local sum
    split_matmul_operand_hi_lo  a32 @ cast(b16, f32) -> hi @ b16 + lo @ b16 with
                             hi = bf16(a32), lo = bf16(a32 - hi): bf16 matrix rate with
                             about 16 bits of a's mantissa (lossy: the precision check
                             decides)

The first four only reorder additions (exact up to the order of a sum); each builds
nodes with placeholder types that ``rebuild`` re-checks, so an ill-formed result is a
ConstraintError.
"""

from __future__ import annotations

from stochopt.errors import ConstraintError
from stochopt.leir.ir import Kernel, Node
from stochopt.leir.layout import Factor
from stochopt.leir.rules import make_layout
from stochopt.transform.edit import append, rebuild, replace_uses, substitute


def _swap_last(rank: int) -> tuple[int, ...]:
    return tuple(range(rank - 2)) + (rank - 1, rank - 2)


# -- orientation ---------------------------------------------------------------------

def where_swap_matmul_orientation(k: Kernel) -> list[int]:
    return [i for i, n in enumerate(k.nodes) if n.op == "matmul"]


def swap_matmul_orientation(k: Kernel, i: int, machine, rng=None) -> Kernel:
    n = k.nodes[i]
    a, b = n.args
    perm = _swap_last(len(n.type.shape))
    nodes = list(k.nodes)
    bt = append(nodes, "transpose", [b], {"perm": perm}, n)
    at = append(nodes, "transpose", [a], {"perm": perm}, n)
    swapped = append(nodes, "matmul", [bt, at], {}, n)
    back = append(nodes, "transpose", [swapped], {"perm": perm}, n, n.name)
    return substitute(k, nodes, i, back, machine)


def where_cancel_transposes(k: Kernel) -> list[int]:
    return [i for i, n in enumerate(k.nodes) if n.op == "transpose"
            and k.nodes[n.args[0]].op == "transpose"]


def _perm(n: Node) -> tuple[int, ...]:
    return n.attr("perm") or tuple(reversed(range(len(n.type.shape))))


def cancel_transposes(k: Kernel, i: int, machine, rng=None) -> Kernel:
    outer = k.nodes[i]
    inner = k.nodes[outer.args[0]]
    p, q = _perm(inner), _perm(outer)
    composed = tuple(p[axis] for axis in q)  # out axis j is x's axis p[q[j]]
    nodes = list(k.nodes)
    if composed == tuple(range(len(composed))):
        return rebuild(k, replace_uses(nodes, i, inner.args[0]), k.output, machine)
    nodes[i] = Node("transpose", (inner.args[0],), (("perm", composed),), outer.type,
                    outer.name, outer.line)
    return rebuild(k, nodes, k.output, machine)


# -- split-K ---------------------------------------------------------------------------

def where_split_k_to_batch(k: Kernel) -> list[int]:
    return [i for i, n in enumerate(k.nodes) if n.op == "matmul"
            and len(n.type.shape) == 2 and _k_groups(k, i) > 1]


def _k_groups(k: Kernel, i: int) -> int:
    """g: the outermost factor of K in a's layout, so the cut falls between factors."""
    a = k.nodes[k.nodes[i].args[0]]
    size = a.type.shape[-1]
    first = a.type.layout.axes[-1][0].size
    if 1 < first < size:
        return first
    return next((g for g in (8, 4, 2) if size % g == 0 and size > g), 1)


def split_k_to_batch(k: Kernel, i: int, machine, rng=None) -> Kernel:
    n = k.nodes[i]
    a, b = n.args
    (m, kk), nn = k.nodes[a].type.shape, k.nodes[b].type.shape[1]
    g = _k_groups(k, i)
    nodes = list(k.nodes)
    a3 = append(nodes, "reshape", [a], {"shape": (m, g, kk // g)}, n)
    a3 = append(nodes, "transpose", [a3], {"perm": (1, 0, 2)}, n)
    b3 = append(nodes, "reshape", [b], {"shape": (g, kk // g, nn)}, n)
    parts = append(nodes, "matmul", [a3, b3], {}, n)
    total = append(nodes, "reduce_sum", [parts], {"axis": 0, "keepdims": False}, n, n.name)
    return substitute(k, nodes, i, total, machine)


# -- cross-level reductions ---------------------------------------------------------------

def where_reduce_by_relayout(k: Kernel) -> list[int]:
    out = []
    for i, n in enumerate(k.nodes):
        if n.op == "reduce_sum" and isinstance(n.args[0], int):
            x = k.nodes[n.args[0]].type
            if x.layout and x.layout.axis_levels(n.attr("axis") % len(x.shape)):
                out.append(i)
    return out


def reduce_by_relayout(k: Kernel, i: int, machine, rng=None) -> Kernel:
    n = k.nodes[i]
    x = k.nodes[n.args[0]].type
    lay = x.layout
    axis = n.attr("axis") % len(x.shape)
    axes = [list(a) for a in lay.axes]
    axes[axis] = [Factor(x.shape[axis])]
    for f in lay.axes[axis]:
        if f.level is None:
            continue
        for other, factors in enumerate(axes):  # give the level to another local factor
            spot = next((j for j in reversed(range(len(factors))) if factors[j].level is None
                         and factors[j].size % f.size == 0 and other != axis), None)
            if spot is not None:
                size = factors[spot].size
                factors[spot:spot + 1] = [Factor(f.size, f.level), Factor(size // f.size)]
                break
    gathered = make_layout(x.shape, axes, lay.replicated)
    if gathered == lay:
        raise ConstraintError("reduce_by_relayout: the reduced axis cannot be gathered")
    nodes = list(k.nodes)
    moved = append(nodes, "relayout", [n.args[0]], {"layout": gathered}, n)
    local = append(nodes, "reduce_sum", [moved], dict(n.attrs), n)
    back = append(nodes, "relayout", [local], {"layout": n.type.layout}, n, n.name)
    return substitute(k, nodes, i, back, machine)


# -- precision ------------------------------------------------------------------------

def _bf16_source(k: Kernel, j: int) -> int | None:
    n = k.nodes[j]
    if n.op == "cast" and n.attr("dtype") == "f32" and k.nodes[n.args[0]].type.dtype == "bf16":
        return n.args[0]
    return None


def where_split_matmul_operand_hi_lo(k: Kernel) -> list[tuple[int, int]]:
    """(matmul, side split): an f32 matmul one of whose operands is an exact bf16."""
    sites = []
    for i, n in enumerate(k.nodes):
        if n.op == "matmul" and n.type.dtype == "f32" and k.nodes[n.args[0]].type.dtype == "f32":
            for side in (0, 1):
                if _bf16_source(k, n.args[1 - side]) is not None \
                        and _bf16_source(k, n.args[side]) is None:
                    sites.append((i, side))
    return sites


def split_matmul_operand_hi_lo(k: Kernel, site: tuple[int, int], machine,
                               rng=None) -> Kernel:
    i, side = site
    n = k.nodes[i]
    x, other = n.args[side], _bf16_source(k, n.args[1 - side])
    nodes = list(k.nodes)
    hi = append(nodes, "cast", [x], {"dtype": "bf16"}, n)
    widened = append(nodes, "cast", [hi], {"dtype": "f32"}, n)
    rest = append(nodes, "sub", [x, widened], {}, n)
    lo = append(nodes, "cast", [rest], {"dtype": "bf16"}, n)
    pairs = [(hi, other), (lo, other)] if side == 0 else [(other, hi), (other, lo)]
    first = append(nodes, "matmul", list(pairs[0]), {}, n)
    second = append(nodes, "matmul", list(pairs[1]), {}, n)
    total = append(nodes, "add", [first, second], {}, n, n.name)
    return substitute(k, nodes, i, total, machine)

