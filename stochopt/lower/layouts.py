"""Layout choices of the lowering: plain, valid, and small enough to fit in PE memory.

The lowering is not an optimizer; it picks simple layouts (spread a leading axis over the
tree) and, for matmul, the assignment of tree levels to the M, N and K axes that fits in
memory and costs least: its matrix work plus bringing the operands into it (loads in
the cost model's DRAM runs, casts, relayouts; lowering.py). The search does the rest.
"""

from __future__ import annotations

import itertools
from math import gcd, prod

from stochopt.leir.layout import LEVELS, Factor, Layout, check_layout
from stochopt.leir.rules import make_layout


def spread_factors(size: int, levels: list[str], fanout: dict[str, int]) -> list[Factor]:
    """Spread one axis over the given levels, outermost first, by the largest divisors."""
    factors = []
    rest = size
    for level in levels:
        n = max((d for d in range(1, min(rest, fanout[level]) + 1) if rest % d == 0), default=1)
        if n > 1:
            factors.append(Factor(n, level))
            rest //= n
    if rest > 1 or not factors:
        factors.append(Factor(rest))
    return factors


def default_layout(shape: tuple[int, ...], fanout: dict[str, int], itemsize: int,
                   budget: int, replicated: frozenset[str] = frozenset()) -> Layout:
    """Spread the leading axis over the tree; if a PE would still hold more than the
    budget, spread the next axes over the levels left over."""
    free = [lv for lv in LEVELS if lv not in replicated]
    axes = [[Factor(s)] for s in shape]
    lead = next((i for i, s in enumerate(shape) if s > 1), 0)
    order = [lead] + [i for i in range(len(shape)) if i != lead]
    for axis in order:
        if not free:
            break
        local = prod(f.size for ax in axes for f in ax if f.level is None)
        if axis != lead and local * itemsize <= budget:
            break
        factors = spread_factors(shape[axis], free, fanout)
        used = {f.level for f in factors if f.level}
        free = [lv for lv in free if lv not in used]
        axes[axis] = factors
    return make_layout(shape, axes, replicated)


def operand_layout(out: Layout, shape: tuple[int, ...]) -> Layout:
    """The layout an elementwise operand of this shape needs to combine with ``out``:
    the same factors on shared axes, replicated wherever it is broadcast."""
    rank = len(out.shape)
    full = (1,) * (rank - len(shape)) + tuple(shape)
    axes, need = [], set(out.replicated)
    for i in range(rank):
        if full[i] == out.shape[i]:
            axes.append(out.axes[i])
        else:
            axes.append((Factor(1),))
            need |= {f.level for f in out.axes[i] if f.level}
    return make_layout(shape, axes[rank - len(shape):], need)


def local_axis_layout(layout: Layout, axis: int, fanout: dict[str, int]) -> Layout:
    """The same layout with one axis made local; its levels move to the axes that are
    local, outermost first, as far as they divide them."""
    freed = [f.level for f in layout.axes[axis] if f.level]
    axes = [list(a) for a in layout.axes]
    axes[axis] = [Factor(layout.shape[axis])]
    for i in range(len(axes)):
        if i != axis and freed and layout.shape[i] > 1 and all(f.level is None
                                                               for f in axes[i]):
            axes[i] = spread_factors(layout.shape[i], freed, fanout)
            used = {f.level for f in axes[i] if f.level}
            freed = [lv for lv in freed if lv not in used]
    return make_layout(layout.shape, axes, layout.replicated)


def matmul_plans(a_shape, b_shape, fanout: dict[str, int]):
    """Every way to give each tree level to one matmul axis (batch, M, N, K or none).

    Yields (a layout, b layout) pairs that satisfy matmul's rule: K laid out alike, a
    replicated where N is spread and b where M is."""
    batch = len(a_shape) - 2
    roles = ["M", "N", "K", None] + (["B"] if batch else [])
    M, K, N = a_shape[-2], a_shape[-1], b_shape[-1]
    for assign in itertools.product(roles, repeat=len(LEVELS)):
        by_role = {r: [lv for lv, x in zip(LEVELS, assign, strict=True) if x == r]
                   for r in roles}
        bfac = spread_factors(a_shape[0], by_role.get("B", []), fanout) if batch else None
        mfac = spread_factors(M, by_role["M"], fanout)
        nfac = spread_factors(N, by_role["N"], fanout)
        kfac = spread_factors(K, by_role["K"], fanout)
        lv = lambda fs: {f.level for f in fs if f.level}  # noqa: E731
        batch_axes = [bfac] + [[Factor(s)] for s in a_shape[1:batch]] if batch else []
        a = make_layout(a_shape, batch_axes + [mfac, kfac], lv(nfac))
        b = make_layout(b_shape, batch_axes + [kfac, nfac], lv(mfac))
        try:
            check_layout(a, fanout)
            check_layout(b, fanout)
        except Exception:
            continue
        yield a, b


def matmul_work(a: Layout, b: Layout, machine) -> int:
    """Cycles of a plan by the cost model's own rule: matrix units and, for a spread K,
    the tree reduction of the partial products (which can dwarf the matrix work)."""
    from stochopt.leir.cost_rules import matmul_cost
    from stochopt.leir.rules import matmul_rule
    from stochopt.leir.types import TensorType

    ta = TensorType("f32", a.shape, "pe", a)
    tb = TensorType("f32", b.shape, "pe", b)
    out = matmul_rule("matmul", [ta, tb], {}, machine, [])
    return matmul_cost(machine, [ta, tb], out, {}).cycles


def reshape_pieces(src: tuple[int, ...], dst: tuple[int, ...]) -> list[list[tuple[int, bool]]]:
    """Cut each axis of ``src`` into pieces (size, whole) outermost first: a whole piece is
    a run of elements that is also whole in ``dst``; where the shapes stop agreeing, the
    rest of each axis is one piece that is not whole (it must stay local)."""
    pieces: list[list[tuple[int, bool]]] = [[] for _ in src]
    i = j = 0
    ra, rb = (src[0] if src else 1), (dst[0] if dst else 1)
    while i < len(src) and j < len(dst):
        if ra == 1:
            i += 1
            ra = src[i] if i < len(src) else 1
            continue
        if rb == 1:
            j += 1
            rb = dst[j] if j < len(dst) else 1
            continue
        g = gcd(ra, rb)
        if g == 1:
            break
        pieces[i].append((g, True))
        ra //= g
        rb //= g
    for k in range(i, len(src)):  # what is left is one local block
        rest = src[k] // prod(size for size, _ in pieces[k])
        if rest > 1:
            pieces[k].append((rest, False))
    return pieces


def reshape_layout(src: tuple[int, ...], dst: tuple[int, ...], fanout: dict[str, int],
                   itemsize: int, budget: int) -> Layout:
    """A layout of ``src`` that reshape can turn into ``dst`` (no spread factor split or
    merged): its whole pieces spread over the tree, outermost first, until a PE's share is
    within the budget."""
    free = list(LEVELS)
    axes: list[list[Factor]] = []
    local = prod(src)
    for axis_pieces in reshape_pieces(src, dst):
        factors: list[Factor] = []
        for size, whole in axis_pieces:
            if whole and free and local * itemsize > budget:
                spread = spread_factors(size, free, fanout)
                used = {f.level for f in spread if f.level}
                free = [lv for lv in free if lv not in used]
                local //= prod(f.size for f in spread if f.level)
                factors.extend(spread)
            else:
                factors.append(Factor(size))
        axes.append(factors or [Factor(1)])
    return make_layout(src, axes, frozenset())
