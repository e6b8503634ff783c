"""STOKE-style random local moves on the IR: cheap, blind, often invalid or wrong.

Each move takes (kernel, rng, machine) and returns a new Kernel, None when it does not
apply to this kernel, or raises ConstraintError when the result is ill-formed. The
chain's cost function, not the move, decides whether a move was any good.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Mapping

from stochopt.errors import StochoptError
from stochopt.leir.ir import Kernel, Node
from stochopt.leir.layout import LEVELS, Factor, Layout, divisors_within
from stochopt.leir.ops import OPS, layout_ops, siblings
from stochopt.leir.rules import make_layout
from stochopt.transform.choice import weighted_choice
from stochopt.transform.edit import edited, insert, remap, replace_uses, shifted, with_layout


def _pick(rng: random.Random, kernel: Kernel, ops: tuple[str, ...] | None = None,
          where: Callable[[Node], bool] | None = None) -> int | None:
    choices = _sites(kernel, (ops, where), lambda: [
        i for i, n in enumerate(kernel.nodes)
        if n.op != "input" and (ops is None or n.op in ops) and (where is None or where(n))])
    return rng.choice(choices) if choices else None


def _sites(kernel: Kernel, what: Hashable, find: Callable[[], list]) -> list:
    """The kernel's sites of one kind (``what``: which; ``find``: how to list them), found
    once per kernel object: a chain edits the same kernel until a candidate is accepted.
    (``where`` predicates are module functions, so they name a kind for good.)"""
    key = ("sites", what)
    found = kernel.memo.get(key)
    if found is None:
        found = kernel.memo[key] = find()
    return found


def mutate_layout(layout: Layout, rng: random.Random, fanout: dict[str, int]) -> Layout:
    """One random change to a layout: spread, gather, move a level, (un)replicate."""
    axes = [list(a) for a in layout.axes]
    replicated = set(layout.replicated)
    used = {f.level for a in axes for f in a if f.level}
    free = [lv for lv in LEVELS if lv not in used and lv not in replicated]
    kind = rng.choice(("spread", "gather", "move", "replicate", "unreplicate"))
    if kind == "spread" and free:
        candidates = [(i, j) for i, a in enumerate(axes) for j, f in enumerate(a)
                      if f.level is None and f.size > 1]
        if candidates:
            i, j = rng.choice(candidates)
            level = rng.choice(free)
            size = axes[i][j].size
            divisors = divisors_within(size, fanout[level])
            if divisors:
                d = rng.choice(divisors)
                axes[i][j:j + 1] = [Factor(d, level), Factor(size // d)]
    elif kind == "gather":
        spread = [(i, j) for i, a in enumerate(axes) for j, f in enumerate(a) if f.level]
        if spread:
            i, j = rng.choice(spread)
            axes[i][j] = Factor(axes[i][j].size)
    elif kind == "move":
        spread = [(i, j) for i, a in enumerate(axes) for j, f in enumerate(a) if f.level]
        if spread and free:
            i, j = rng.choice(spread)
            axes[i][j] = Factor(axes[i][j].size, rng.choice(free))
    elif kind == "replicate" and free:
        replicated.add(rng.choice(free))
    elif kind == "unreplicate" and replicated:
        replicated.discard(rng.choice(sorted(replicated)))
    return make_layout(layout.shape, axes, replicated)


def change_layout(kernel: Kernel, rng: random.Random, machine) -> Kernel | None:
    """An op that takes a layout (load, relayout, full) gets a randomly changed one."""
    i = _pick(rng, kernel, layout_ops())
    if i is None:
        return None
    n = kernel.nodes[i]
    layout = mutate_layout(n.attr("layout"), rng, machine.fanout)

    def make() -> tuple[list[Node], int]:
        nodes = list(kernel.nodes)
        nodes[i] = n.replaced(attrs=with_layout(n.attrs, layout))
        return nodes, kernel.output

    return edited(kernel, machine, ("layout", i, layout), make)


def change_dtype(kernel: Kernel, rng: random.Random, machine) -> Kernel | None:
    """Flip a cast between f32 and bf16, or insert a cast after a float op."""
    nodes = kernel.nodes
    casts = _sites(kernel, "float casts", lambda: [
        i for i, n in enumerate(nodes) if n.op == "cast" and n.attr("dtype") in ("f32", "bf16")])
    if casts and rng.random() < 0.5:
        i = rng.choice(casts)
        flip = "bf16" if nodes[i].attr("dtype") == "f32" else "f32"

        def flipped() -> tuple[list[Node], int]:
            edit = list(nodes)
            edit[i] = nodes[i].replaced(attrs=(("dtype", flip),))
            return edit, kernel.output

        return edited(kernel, machine, ("dtype flip", i), flipped)
    i = _pick(rng, kernel, where=_float_on_pes)
    if i is None:
        return None

    def cast_after() -> tuple[list[Node], int]:
        target = "bf16" if nodes[i].type.dtype == "f32" else "f32"
        cast = Node("cast", (i,), (("dtype", target),), nodes[i].type,
                    f"{nodes[i].name}_{target}")
        edit = insert(list(nodes), i + 1, cast)
        edit = replace_uses(edit, i, i + 1, after=i + 1)
        return edit, shifted(kernel.output, i + 1)

    return edited(kernel, machine, ("dtype cast", i), cast_after)


def _float_on_pes(n: Node) -> bool:
    return n.type.location == "pe" and n.type.dtype in ("f32", "bf16")


def swap_independent(kernel: Kernel, rng: random.Random, machine) -> Kernel | None:
    """Swap two neighbouring ops that do not depend on each other (changes the schedule)."""
    nodes = kernel.nodes
    pairs = _sites(kernel, "swaps", lambda: [
        i for i in range(len(nodes) - 1)
        if nodes[i].op != "input" and nodes[i + 1].op != "input"
        and i not in nodes[i + 1].inputs and i + 1 != kernel.output and i != kernel.output])
    if not pairs:
        return None
    i = rng.choice(pairs)

    def swapped() -> tuple[list[Node], int]:
        edit = list(nodes)
        swap = {i: i + 1, i + 1: i}
        edit[i], edit[i + 1] = nodes[i + 1], nodes[i]
        edit = edit[:i + 2] + [remap(n, swap) for n in edit[i + 2:]]
        return edit, kernel.output

    return edited(kernel, machine, ("swap", i), swapped)


def sibling_op(kernel: Kernel, rng: random.Random, machine) -> Kernel | None:
    """Replace an op by one of the same kind and parameters (add -> sub, exp -> tanh)."""
    i = _pick(rng, kernel, where=_has_siblings)
    if i is None:
        return None
    nodes = kernel.nodes
    new = rng.choice(siblings(nodes[i].op))

    def replaced() -> tuple[list[Node], int]:
        edit = list(nodes)
        attrs = tuple((p.name, dict(nodes[i].attrs)[p.name]) for p in OPS[new].static_params
                      if p.name in dict(nodes[i].attrs))
        edit[i] = nodes[i].replaced(op=new, attrs=attrs)
        return edit, kernel.output

    return edited(kernel, machine, ("sibling", i, new), replaced)


def _has_siblings(n: Node) -> bool:
    return bool(siblings(n.op))


def delete_op(kernel: Kernel, rng: random.Random, machine) -> Kernel | None:
    """Bypass an op: its readers read its first tensor operand instead."""
    i = _pick(rng, kernel, where=_bypassable)
    if i is None:
        return None
    return edited(kernel, machine, ("delete", i), lambda: (
        replace_uses(list(kernel.nodes), i, kernel.nodes[i].inputs[0]), kernel.output))


def _bypassable(n: Node) -> bool:
    return bool(n.inputs) and n.op != "store"


def duplicate_op(kernel: Kernel, rng: random.Random, machine) -> Kernel | None:
    """Copy an op just before one of its readers, which then reads the copy."""
    readers = _sites(kernel, "readers", kernel.users)
    i = _pick(rng, kernel, where=_not_store)
    if i is None or not readers[i]:
        return None
    r = rng.choice(readers[i])

    def duplicated() -> tuple[list[Node], int]:
        nodes = insert(list(kernel.nodes), r, kernel.nodes[i])
        nodes[r + 1] = nodes[r + 1].replaced(args=tuple(r if a == i else a
                                                        for a in nodes[r + 1].args))
        return nodes, shifted(kernel.output, r)

    return edited(kernel, machine, ("duplicate", i, r), duplicated)


def _not_store(n: Node) -> bool:
    return n.op != "store"


# The moves and how often each is drawn (STOKE's weighted transforms): data, not code.
# Equal until a measurement says otherwise.
MOVES = {
    "layout": change_layout,
    "dtype": change_dtype,
    "swap": swap_independent,
    "sibling": sibling_op,
    "delete": delete_op,
    "duplicate": duplicate_op,
}
WEIGHTS = {"layout": 1.0, "dtype": 1.0, "swap": 1.0, "sibling": 1.0, "delete": 1.0,
           "duplicate": 1.0}


def propose_mutation(kernel: Kernel, rng: random.Random, machine,
                     weights: Mapping[str, float] | None = None) -> tuple[str, Kernel | None]:
    """Apply one random move, drawn by weight (WEIGHTS, overridden by ``weights``); (move
    name, kernel or None if it did not apply)."""
    names = tuple(MOVES)
    name = weighted_choice(rng, names, names, [WEIGHTS[m] for m in names], weights)
    try:
        return name, MOVES[name](kernel, rng, machine)
    except StochoptError as e:
        e.move = name  # the chain logs which move broke the kernel
        raise
