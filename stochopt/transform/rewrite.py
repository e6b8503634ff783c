"""Rewrite rules that keep meaning: the classical compiler inside the search loop.

Each rule is one entry of RULES (at the end): a name, its algebra, ``_where_<name>(k)``
listing the places it applies, and ``<name>(kernel, place, machine)`` returning the
rewritten kernel (or raising ConstraintError when the result would be ill-formed).
docs/search.md lists them all; tests/transform prove each keeps meaning through the
verifier.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from stochopt.errors import StochoptError
from stochopt.leir.ir import Kernel, Node
from stochopt.leir.layout import LEVELS, Factor, Layout
from stochopt.leir.rules import Const, make_layout
from stochopt.leir.types import TensorType
from stochopt.transform import algebraic_forms as forms
from stochopt.transform.edit import (
    append,
    common_subexpressions,
    insert,
    rebuild,
    replace_uses,
    shifted,
    substitute,
)
from stochopt.transform.layout_propagation import (
    gather_spread_factor,
    propagate_layout,
    where_gather_spread_factor,
    where_propagate_layout,
)
from stochopt.transform.reduce_tiling import tile_reduction, where_tile_reduction
from stochopt.transform.schedule import schedule
from stochopt.transform.tiling import tile_output, where_tile_output
from stochopt.transform.weights import weighted_choice

LAYOUT_OPS = ("load", "relayout", "full")


@dataclass(frozen=True)
class Rule:
    name: str
    algebra: str
    find: Callable[[Kernel], list]
    apply: Callable[..., Kernel]  # (kernel, site, machine) or, if uses_rng, (..., rng)
    uses_rng: bool = False        # the rule draws a parameter (a divisor) of its own
    weight: float = 1.0           # how often the proposer picks it, among the rules that apply


def _with(n: Node, **changes) -> Node:
    if "attrs" in changes and isinstance(changes["attrs"], dict):
        changes["attrs"] = tuple(changes["attrs"].items())
    return replace(n, **changes)


def _node(op: str, args, attrs: dict, like: TensorType, name: str = "") -> Node:
    return Node(op, tuple(args), tuple(attrs.items()), like, name)


def _add_before(kernel: Kernel, nodes: list[Node], position: int, node: Node):
    """Insert ``node`` at ``position``; returns (nodes, its index, shifted output)."""
    return insert(nodes, position, node), position, shifted(kernel.output, position)


# -- movement ----------------------------------------------------------------------

def _where_fold_relayout_into_load(k: Kernel) -> list:
    return [i for i, n in enumerate(k.nodes)
            if n.op == "relayout" and k.nodes[n.args[0]].op == "load"]


def fold_relayout_into_load(k: Kernel, i: int, machine) -> Kernel:
    nodes = list(k.nodes)
    load = nodes[nodes[i].args[0]]
    nodes[i] = _with(load, attrs={"layout": nodes[i].attr("layout")}, name=nodes[i].name)
    return rebuild(k, nodes, k.output, machine)


def _where_drop_noop_relayout(k: Kernel) -> list:
    return [i for i, n in enumerate(k.nodes) if n.op == "relayout"
            and k.nodes[n.args[0]].type.layout == n.attr("layout")]


def drop_noop_relayout(k: Kernel, i: int, machine) -> Kernel:
    return rebuild(k, replace_uses(list(k.nodes), i, k.nodes[i].args[0]), k.output, machine)


_UNARY = ("cast", "exp", "neg", "abs", "tanh", "sqrt", "reciprocal", "rsqrt", "log")
_MOVES = ("relayout", "transpose", "reshape")


def _where_hoist_movement(k: Kernel) -> list:
    return [i for i, n in enumerate(k.nodes) if n.op in _MOVES
            and k.nodes[n.args[0]].op in _UNARY]


def hoist_movement(k: Kernel, i: int, machine) -> Kernel:
    nodes = list(k.nodes)
    f = nodes[nodes[i].args[0]]
    moved = _with(nodes[i], args=(f.args[0],) + nodes[i].args[1:], name="")
    nodes, at, out = _add_before(k, nodes, i, moved)
    nodes[i + 1] = _with(f, args=(at,) + f.args[1:], name=nodes[i + 1].name)
    return rebuild(k, nodes, out, machine)


def _where_reuse_loaded_tensor(k: Kernel) -> list:
    seen, out = {}, []
    for i, n in enumerate(k.nodes):
        key = (n.op, n.args, n.attrs)
        if n.op != "input" and key in seen:
            out.append(i)
        seen.setdefault(key, i)
    return out


def reuse_loaded_tensor(k: Kernel, i: int, machine) -> Kernel:
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


def relayout_instead_of_reload(k: Kernel, site, machine) -> Kernel:
    a, b = site
    nodes = list(k.nodes)
    nodes[b] = _with(nodes[b], op="relayout", args=(a,))
    return rebuild(k, nodes, k.output, machine)


def _where_store_parts(k: Kernel) -> list:
    out = k.nodes[k.output]
    if out.op == "store" and k.nodes[out.args[0]].op == "concat":
        return [k.output]
    return []


def store_parts(k: Kernel, i: int, machine) -> Kernel:
    nodes = list(k.nodes)
    joined = nodes[nodes[i].args[0]]
    stores = []
    for part in joined.args:
        nodes.append(_node("store", [part], {}, nodes[part].type))
        stores.append(len(nodes) - 1)
    nodes.append(_with(joined, args=tuple(stores), name=nodes[i].name))
    return rebuild(k, nodes, len(nodes) - 1, machine)


# -- dtypes -------------------------------------------------------------------------

_PRECISION = {"bool": 0, "bf16": 1, "i32": 2, "f32": 3}


def _where_drop_widening_cast_pair(k: Kernel) -> list:
    out = []
    for i, n in enumerate(k.nodes):
        if n.op == "cast" and k.nodes[n.args[0]].op == "cast":
            inner = k.nodes[n.args[0]]
            x = k.nodes[inner.args[0]]
            if x.type.dtype == n.attr("dtype") and x.type.dtype in ("bf16", "f32") \
                    and _PRECISION[inner.attr("dtype")] >= _PRECISION[x.type.dtype]:
                out.append(i)
    return out


def drop_widening_cast_pair(k: Kernel, i: int, machine) -> Kernel:
    x = k.nodes[k.nodes[i].args[0]].args[0]
    return rebuild(k, replace_uses(list(k.nodes), i, x), k.output, machine)


def _where_bf16_matmul_operands(k: Kernel) -> list:
    out = []
    for i, n in enumerate(k.nodes):
        if n.op == "matmul":
            ops = [k.nodes[a] for a in n.args]
            if all(o.op == "cast" and k.nodes[o.args[0]].type.dtype == "bf16" for o in ops):
                out.append(i)
    return out


def bf16_matmul_operands(k: Kernel, i: int, machine) -> Kernel:
    nodes = list(k.nodes)
    n = nodes[i]
    nodes[i] = _with(n, args=tuple(k.nodes[a].args[0] for a in n.args))
    return rebuild(k, nodes, k.output, machine)


def _where_round_matmul_operands_to_bf16(k: Kernel) -> list:
    return [i for i, n in enumerate(k.nodes) if n.op == "matmul" and n.type.dtype == "f32"
            and k.nodes[n.args[0]].type.dtype == "f32"]


def round_matmul_operands_to_bf16(k: Kernel, i: int, machine) -> Kernel:
    nodes = list(k.nodes)
    for side in (0, 1):
        src = nodes[i].args[side]
        cast = _node("cast", [src], {"dtype": "bf16"}, nodes[src].type)
        nodes, at, _ = _add_before(k, nodes, i, cast)
        i += 1
        args = list(nodes[i].args)
        args[side] = at
        nodes[i] = _with(nodes[i], args=tuple(args))
    return rebuild(k, nodes, shifted(shifted(k.output, i - 1), i - 1), machine)


# -- arithmetic -------------------------------------------------------------------

def _where_multiply_by_reciprocal(k: Kernel) -> list:
    return [i for i, n in enumerate(k.nodes) if n.op == "div"
            and all(isinstance(a, int) for a in n.args)
            and k.nodes[n.args[1]].type.numel < n.type.numel]


def multiply_by_reciprocal(k: Kernel, i: int, machine) -> Kernel:
    nodes = list(k.nodes)
    x, y = nodes[i].args
    r = _node("reciprocal", [y], {}, nodes[y].type)
    nodes, at, out = _add_before(k, nodes, i, r)
    nodes[i + 1] = _with(nodes[i + 1], op="mul", args=(x, at))
    return rebuild(k, nodes, out, machine)


def _where_divide_by_constant_as_multiply(k: Kernel) -> list:
    return [i for i, n in enumerate(k.nodes) if n.op == "div" and isinstance(n.args[1], Const)
            and n.args[1].value not in (0, 0.0)]


def divide_by_constant_as_multiply(k: Kernel, i: int, machine) -> Kernel:
    nodes = list(k.nodes)
    x, c = nodes[i].args
    nodes[i] = _with(nodes[i], op="mul", args=(x, Const(1.0 / c.value)))
    return rebuild(k, nodes, k.output, machine)


def _scale_of(n: Node) -> tuple[int, float] | None:
    """(tensor, c) when n is x*c, c*x or x/c."""
    if n.op == "mul":
        a, b = n.args
        if isinstance(b, Const) and isinstance(a, int):
            return a, float(b.value)
        if isinstance(a, Const) and isinstance(b, int):
            return b, float(a.value)
    if n.op == "div" and isinstance(n.args[1], Const) and isinstance(n.args[0], int) \
            and n.args[1].value not in (0, 0.0):
        return n.args[0], 1.0 / float(n.args[1].value)
    return None


def _where_fold_scales(k: Kernel) -> list:
    out = []
    for i, n in enumerate(k.nodes):
        outer = _scale_of(n)
        inner = outer and _scale_of(k.nodes[outer[0]])
        # a folded literal must stay a number LEIR can write back (|c| <= 1e300)
        if inner and 0 < abs(outer[1] * inner[1]) <= 1e300:
            out.append(i)
    return out


def fold_scales(k: Kernel, i: int, machine) -> Kernel:
    nodes = list(k.nodes)
    inner_idx, c2 = _scale_of(nodes[i])
    x, c1 = _scale_of(nodes[inner_idx])
    nodes[i] = _with(nodes[i], op="mul", args=(x, Const(c1 * c2)))
    return rebuild(k, nodes, k.output, machine)


def _where_scale_before_matmul(k: Kernel) -> list:
    out = []
    for i, n in enumerate(k.nodes):
        s = _scale_of(n)
        if s and k.nodes[s[0]].op == "matmul":
            out.append(i)
    return out


def scale_before_matmul(k: Kernel, i: int, machine) -> Kernel:
    nodes = list(k.nodes)
    mm_idx, c = _scale_of(nodes[i])
    mm = nodes[mm_idx]
    side = 0 if nodes[mm.args[0]].type.numel <= nodes[mm.args[1]].type.numel else 1
    # a new matmul reads the scaled operand: other readers of a @ b still read it unscaled
    scaled = append(nodes, "mul", [mm.args[side], Const(c)], {}, mm)
    args = list(mm.args)
    args[side] = scaled
    product = append(nodes, "matmul", args, {}, mm, nodes[i].name)
    return substitute(k, nodes, i, product, machine)


def _where_reassociate_broadcasts(k: Kernel) -> list:
    out = []
    for i, n in enumerate(k.nodes):
        if n.op in ("add", "mul") and isinstance(n.args[0], int) and isinstance(n.args[1], int):
            inner = k.nodes[n.args[0]]
            if inner.op == n.op and all(isinstance(a, int) for a in inner.args):
                b1, b2 = k.nodes[inner.args[1]].type, k.nodes[n.args[1]].type
                if b1.numel < n.type.numel and b2.numel < n.type.numel:
                    out.append(i)
    return out


def reassociate_broadcasts(k: Kernel, i: int, machine) -> Kernel:
    nodes = list(k.nodes)
    inner = nodes[nodes[i].args[0]]
    x, b1 = inner.args
    b2 = nodes[i].args[1]
    small = _node(nodes[i].op, [b1, b2], {}, nodes[b1].type)
    nodes, at, out = _add_before(k, nodes, i, small)
    nodes[i + 1] = _with(nodes[i + 1], args=(x, at))
    return rebuild(k, nodes, out, machine)


# -- layouts ---------------------------------------------------------------------

def _spread_sites(k: Kernel) -> list:
    sites = []
    for i, n in enumerate(k.nodes):
        if n.op not in LAYOUT_OPS:
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
    if lay.axes[axis] != ref_axis or level in lay.spread() or level in lay.replicated:
        return None
    axes = [list(a) for a in lay.axes]
    size = axes[axis][j].size
    axes[axis][j:j + 1] = [Factor(d, level), Factor(size // d)]
    return make_layout(lay.shape, axes, lay.replicated)


def _where_spread_over_more_of_the_tree(k: Kernel) -> list:
    return _spread_sites(k)


def spread_over_more_of_the_tree(k: Kernel, site, machine, rng=None) -> Kernel:
    i, neg_axis, j, level = site
    lay: Layout = k.nodes[i].attr("layout")
    size = lay.axes[neg_axis + len(lay.shape)][j].size
    divisors = [d for d in range(2, min(size, machine.fanout[level]) + 1) if size % d == 0]
    if not divisors:
        return None
    d = (rng or random).choice(divisors) if rng is not None else divisors[-1]
    ref_axis = lay.axes[neg_axis + len(lay.shape)]
    nodes = list(k.nodes)
    for t, n in enumerate(nodes):
        if n.op in LAYOUT_OPS:
            new = _spread_layout(n.attr("layout"), ref_axis, neg_axis, j, level, d)
            if new is not None:
                attrs = dict(n.attrs)
                attrs["layout"] = new
                nodes[t] = _with(n, attrs=attrs)
    return rebuild(k, nodes, k.output, machine)


# -- whole-kernel rules -------------------------------------------------------------

def tile_reduction_scheduled(k: Kernel, site, machine) -> Kernel:
    """Tiles are worth something only once loads run ahead of compute: schedule them."""
    return schedule(tile_reduction(k, site, machine), machine)


def _where_list_schedule(k: Kernel) -> list:
    return [k.output]


def list_schedule(k: Kernel, site, machine) -> Kernel | None:
    """None when no candidate order is faster (the proposer then draws again)."""
    out = schedule(k, machine)
    return None if out is k else out


# The rules, in the order docs/search.md lists them: name, algebra, where, how, and the
# weight the proposer gives each (STOKE's weighted transforms): data, not code.
RULES: list[Rule] = [
    Rule("fold_relayout_into_load", "relayout(load(x, A), B) -> load(x, B)",
         _where_fold_relayout_into_load, fold_relayout_into_load),
    Rule("drop_noop_relayout", "relayout(x, layout_of(x)) -> x",
         _where_drop_noop_relayout, drop_noop_relayout),
    Rule("hoist_movement", "m(f(x)) -> f(m(x)) for m in relayout, transpose, reshape and unary "
      "elementwise f: move the narrower dtype, and let casts meet the matmul",
         _where_hoist_movement, hoist_movement),
    Rule("reuse_loaded_tensor", "two identical ops (a tensor loaded twice) -> one",
         _where_reuse_loaded_tensor, reuse_loaded_tensor),
    Rule("relayout_instead_of_reload", "load(x, B) after load(x, A) -> relayout(load(x, A), B): "
      "DRAM is read once, the second copy moves on chip",
         _where_relayout_instead_of_reload, relayout_instead_of_reload),
    Rule("store_parts", "store(concat([a, b, ...], axis)) -> concat([store(a), store(b), "
      "...], axis): each part is stored in its region of the output; no local copy, and "
      "the parts may then be spread along the axis",
         _where_store_parts, store_parts),
    Rule("drop_widening_cast_pair", "cast(cast(x, wider), dtype_of(x)) -> x (exact)",
         _where_drop_widening_cast_pair, drop_widening_cast_pair),
    Rule("bf16_matmul_operands", "matmul(cast(a16, f32), cast(b16, f32)) -> matmul(a16, b16): "
      "bf16 products are exact in f32, the MAU runs 8x faster",
         _where_bf16_matmul_operands, bf16_matmul_operands),
    Rule("round_matmul_operands_to_bf16", "matmul(a32, b32) -> matmul(cast(a32, bf16), "
      "cast(b32, bf16)): lossy; the precision check decides",
         _where_round_matmul_operands_to_bf16, round_matmul_operands_to_bf16),
    Rule("multiply_by_reciprocal", "x / y -> x * reciprocal(y) when y is broadcast (smaller)",
         _where_multiply_by_reciprocal, multiply_by_reciprocal),
    Rule("divide_by_constant_as_multiply", "x / c -> x * (1/c)",
         _where_divide_by_constant_as_multiply, divide_by_constant_as_multiply),
    Rule("fold_scales", "(x * c1) * c2 -> x * (c1*c2)",
         _where_fold_scales, fold_scales),
    Rule("scale_before_matmul", "(a @ b) * c -> (a * c) @ b: scale the smaller operand",
         _where_scale_before_matmul, scale_before_matmul),
    Rule("reassociate_broadcasts", "(x + b1) + b2 -> x + (b1 + b2) (also *): combine the two "
      "small operands first",
         _where_reassociate_broadcasts, reassociate_broadcasts),
    Rule("spread_over_more_of_the_tree", "split a local factor n of an axis into d_LEVEL x n/d "
      "in every layout that lays the axis out alike (replicate where it is broadcast)",
         _where_spread_over_more_of_the_tree, spread_over_more_of_the_tree, uses_rng=True),
    Rule("gather_spread_factor", "split a spread factor d_LEVEL of an axis into (d/g)_LEVEL x g "
      "local in every layout that lays the axis out alike: longer DRAM runs, shorter trees",
         where_gather_spread_factor, gather_spread_factor, uses_rng=True),
    Rule("tile_output", "store(f(x)) -> concat([store(f(x[tile t])) for t in tiles]): cut the "
      "output along an axis into 2, 4 or 8 blocks, each loaded, computed and stored on its "
      "own, the next block's loads issued ahead; shared values computed once",
         where_tile_output, tile_output),
    Rule("tile_reduction", "reduce(f(x), a) -> combine(reduce(f(x[tile t]), a) for t in "
      "tiles), a @ b -> sum(a[:, tile t] @ b[tile t]): cut a reduced axis into 2, 4 or 8 "
      "tiles through the whole kernel (flash-decoding), partial sums, maxima and matmuls "
      "combined once; then list-scheduled",
         where_tile_reduction, tile_reduction_scheduled),
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
         forms.where_split_matmul_operand_hi_lo, forms.split_matmul_operand_hi_lo),
    Rule("list_schedule", "reorder ops (depth first, loads d ahead) when the cost model "
      "finds the order faster",
         _where_list_schedule, list_schedule, weight=0.5),
]


def apply_rule(r: Rule, kernel: Kernel, site, machine, rng: random.Random | None = None):
    if r.uses_rng:
        return r.apply(kernel, site, machine, rng)
    return r.apply(kernel, site, machine)


def propose_rewrite(kernel: Kernel, rng: random.Random, machine,
                    weights: Mapping[str, float] | None = None) -> tuple[str, Kernel | None]:
    """Apply a random rule (drawn by weight among those that apply) at a random place."""
    applicable = [(r, s) for r in RULES for s in [r.find(kernel)] if s]
    if not applicable:
        return "none", None
    r, sites = weighted_choice(rng, applicable, [r.name for r, _ in applicable],
                               [r.weight for r, _ in applicable], weights)
    try:
        return r.name, apply_rule(r, kernel, rng.choice(sites), machine, rng)
    except StochoptError as e:
        e.move = r.name
        raise
