"""Each node's Work (cycles on its resource, bytes, flops) from the op table's cost
rules, told the few facts about its surroundings a rule reads: the extent of the DRAM
tensor a load or store touches, and how a tree result must reach its readers. The
scheduler (cost.py) places this work in time. See docs/machine.md for every formula.
"""

from __future__ import annotations

from stochopt.leir import terms as T
from stochopt.leir.cost_rules import DELIVERY, DRAM_EXTENT, Work, keeps_local_order, reduced_levels
from stochopt.leir.ir import Kernel, op_of
from stochopt.leir.ops import ELEMENTWISE, FORGET_ON_CHANGE, OPS
from stochopt.leir.rules import Const
from stochopt.machine import Machine

# Each term's Work by its surroundings, per machine, kept on the term (Term.facts, under
# the machine's key below): a term fixes the op, its input and output types and its
# attributes; with the few facts about its neighbours that some cost rules read (DRAM
# extent, how a tree result is delivered) that is all a cost rule sees, so an unchanged
# node is never costed twice. The key is one object per machine, made once: a term's
# facts are found by identity, without hashing the machine again for every node.
_MACHINE_KEYS: dict[Machine, object] = {}


def _term_facts(term, key: object) -> dict:
    """The cost facts of a term on the machine whose key is ``key``: its Work by context
    ("levels": the levels a tree result is combined over; "bytes": local bytes)."""
    facts = term.facts
    if facts is None:
        facts = term.facts = {}
    mine = facts.get(key)
    if mine is None:
        mine = facts[key] = {}
    return mine


_last_machine: list = [None, None]  # the machine asked last and its key


def machine_key(machine: Machine) -> object:
    """One object per machine (equal machines share it), found by identity first."""
    if _last_machine[0] is machine:
        return _last_machine[1]
    key = _MACHINE_KEYS.get(machine)
    if key is None:
        key = _MACHINE_KEYS[machine] = object()
    _last_machine[:] = machine, key
    return key


def local_bytes(term) -> int:
    """Bytes each holding PE keeps of the term's value, kept on the term."""
    facts = term.facts
    if facts is None:
        facts = term.facts = {}
    nbytes = facts.get(local_bytes)
    if nbytes is None:
        nbytes = facts[local_bytes] = term.type.local_bytes()
    return nbytes


def op_work(kernel: Kernel, machine: Machine) -> list[Work]:
    """The Work of every node, from the op table's cost rules, each told what about its
    surroundings its cost depends on (cost_rules.DRAM_EXTENT, cost_rules.DELIVERY).
    Cached per term and per those surroundings, so an unchanged node is costed once."""
    key = machine_key(machine)
    nodes = kernel.nodes
    users = kernel.users() if any(n.op == "store" or n.op in _TREE_RESULTS
                                  for n in nodes) else []
    out = []
    for i, (n, term) in enumerate(zip(nodes, kernel.terms, strict=True)):
        facts = _term_facts(term, key)
        op = n.op
        context: tuple = ()
        if op == "load":
            context = ((DRAM_EXTENT, _whole_axes(n.type.shape,
                                                 _dram_root(kernel, n.inputs[0]))),)
        elif op == "store":
            context = ((DRAM_EXTENT, _whole_axes(n.type.shape,
                                                 _stored_root(kernel, users, i))),)
        elif op in _TREE_RESULTS:
            levels = facts.get("levels")
            if levels is None:
                levels = facts["levels"] = reduced_levels(
                    op, [nodes[a].type for a in n.inputs], dict(n.attrs))
            if levels:
                context = ((DELIVERY, _delivery(kernel, users, i, levels)),)
        work = facts.get(context)
        if work is None:
            work = facts[context] = _work_of(n, term, context, nodes, key, machine)
        out.append(work)
    return out


# Work by what a cost rule reads (op, input and output types, attributes, surroundings)
# per machine: a new term (anything upstream of it changed) seldom has new types.
_WORK_BY_TYPES: dict[tuple, Work] = {}
WORKS_KEPT = 100_000
FORGET_ON_CHANGE.append(_WORK_BY_TYPES.clear)  # an op's cost rule may have changed


def _work_of(n, term, context: tuple, nodes, key: object, machine: Machine) -> Work:
    typed = (key, n.op, T.source_types_key(term.sources), term.type_key, T.attrs_key(n.attrs),
             context)
    work = _WORK_BY_TYPES.get(typed)
    if work is None:
        ins = [a if isinstance(a, Const) else nodes[a].type for a in n.args]
        work = op_of(n.op).cost(machine, ins, n.type, {**dict(n.attrs), **dict(context)})
        if len(_WORK_BY_TYPES) >= WORKS_KEPT:
            _WORK_BY_TYPES.clear()
        _WORK_BY_TYPES[typed] = work
    return work


_TREE_RESULTS = frozenset({"reduce_sum", "reduce_max", "reduce_min", "matmul"})


_MOVES = frozenset({"slice", "concat", "broadcast_to", "transpose"})


def _readers(kernel: Kernel, users: list[list[int]], i: int) -> list[int]:
    """The nodes that read node i's data, looking through free views (reshape, a
    transpose that keeps local order): a view moves nothing, its readers read i."""
    found = []
    for u in users[i]:
        n = kernel.nodes[u]
        if n.op == "reshape" or (n.op == "transpose" and keeps_local_order(
                kernel.nodes[i].type.layout, dict(n.attrs).get("perm"))):
            found.extend(_readers(kernel, users, u))
        else:
            found.append(u)
    return found


def _delivery(kernel: Kernel, users: list[list[int]], i: int, levels: frozenset[str]) -> str:
    """How tree result i must reach its readers (cost_rules.DELIVERIES): not at all when
    only stores read it; all of it on every PE when a reader combines it with data spread
    over the reduced ``levels``, or moves it to a layout that does not spread them, or
    does anything but local elementwise work or a local move with it; otherwise (the
    readers work on it where it lands, or relayout it to a spread of those levels) each
    PE its share."""
    readers = _readers(kernel, users, i)
    if all(kernel.nodes[u].op == "store" for u in readers):
        return "none"

    def needed_everywhere(v: int, seen: set[int]) -> bool:
        for u in _readers(kernel, users, v):
            n = kernel.nodes[u]
            if n.op == "store" or u in seen:
                continue
            seen.add(u)
            if n.op == "relayout":  # to its share of a spread, or it needs all of it
                if levels <= frozenset(n.type.layout.spread()):
                    continue
                return True
            if OPS[n.op].kind != ELEMENTWISE and n.op not in _MOVES:
                return True
            if any(levels & frozenset(kernel.nodes[a].type.layout.spread())
                   for a in n.inputs if kernel.nodes[a].type.location == "pe"):
                return True
            if needed_everywhere(u, seen):
                return True
        return False

    return "broadcast" if needed_everywhere(i, set()) else "scatter"


def _whole_axes(region: tuple[int, ...], root: tuple[int, ...]) -> tuple[bool, ...]:
    return tuple(a == b for a, b in zip(region, root, strict=True))


def _dram_root(kernel: Kernel, i: int) -> tuple[int, ...]:
    """Shape of the DRAM tensor a load reads from: slices of slices lead to it."""
    while kernel.nodes[i].op == "slice":
        i = kernel.nodes[i].inputs[0]
    return kernel.nodes[i].type.shape


def _stored_root(kernel: Kernel, users: list[list[int]], i: int) -> tuple[int, ...]:
    """Shape of the DRAM tensor a store writes into: a stored tile joined by concat
    writes a region of the concat's result."""
    while users[i] and kernel.nodes[users[i][0]].op == "concat":
        i = users[i][0]
    return kernel.nodes[i].type.shape
