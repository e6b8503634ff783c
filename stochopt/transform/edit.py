"""Surgery on a kernel's node list: the few edits every move and rule is made of.

Edits work on plain lists of Nodes and return new lists; types on edited nodes are
stale until ``rebuild`` re-runs every constraint. Indices in ``args`` always point to
earlier nodes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable

from stochopt.errors import StochoptError
from stochopt.leir.ir import Kernel, Node, build
from stochopt.leir.ops import FORGET_ON_CHANGE
from stochopt.leir.rules import Const


def rebuild(kernel: Kernel, nodes: list[Node], output: int, machine) -> Kernel:
    """Drop dead code, then type-check what the edit may have changed (everything from
    the first node that is not ``kernel``'s own; ConstraintError if invalid)."""
    nodes, output = remove_dead(nodes, output)
    return build(kernel.name, nodes, output, machine, kernel.spec_path, edited=kernel)


# The kernels (or refusals) edits gave before, by the structure of the kernel edited
# (names and lines included) and the machine, then by the edit: a chain draws the same
# few edits of the same few kernels again and again (on softmax, all but one candidate in
# a hundred had been built before), and a rebuild is most of a candidate's cost there.
# Least recently used structures go first once EDITS_KEPT results are kept.
_EDITS: OrderedDict[StructureKey, dict[Hashable, Kernel | StochoptError]] = OrderedDict()
EDITS_KEPT = 2_000
_edits_kept = 0


def _forget_edits() -> None:  # the op table changed: a rule's verdict may have too
    global _edits_kept
    _EDITS.clear()
    _edits_kept = 0


FORGET_ON_CHANGE.append(_forget_edits)


class StructureKey:
    """A kernel's structure and machine, as one key whose hash is computed once: every
    node's term (op, attributes, types), arguments, name and line, and the kernel's name,
    output, spec path and machine: all that a rebuild after an edit reads."""

    __slots__ = ("value", "hash")

    def __init__(self, kernel: Kernel, machine) -> None:
        self.value = (kernel.name, kernel.spec_path, kernel.output, machine, kernel.terms,
                      tuple([(n.args, n.name, n.line) for n in kernel.nodes]))
        self.hash = hash(self.value)

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, StructureKey) and self.hash == other.hash
                                 and self.value == other.value)


def edited(kernel: Kernel, machine, edit: Hashable,
           make: Callable[[], tuple[list[Node], int]]) -> Kernel:
    """``rebuild(kernel, *make(), machine)``, remembered: ``edit`` describes the edit so
    that, with the kernel's structure, it determines the node list ``make`` gives. A
    kernel of the same structure edited the same way before gets the kernel that edit
    gave (kernels never change), or the same refusal raised again."""
    memo = kernel.memo
    key = memo.get(StructureKey)
    if key is None or key.value[3] is not machine:
        key = memo[StructureKey] = StructureKey(kernel, machine)
    results = _EDITS.get(key)
    if results is None:
        results = _EDITS[key] = {}
    else:
        _EDITS.move_to_end(key)
        known = results.get(edit)
        if known is not None:
            if isinstance(known, StochoptError):
                raise refusal_copy(known)
            return known
    try:
        result = rebuild(kernel, *make(), machine)
    except StochoptError as e:
        _remember(results, edit, refusal_copy(e))
        raise
    _remember(results, edit, result)
    return result


def _remember(results: dict, edit: Hashable, result: Kernel | StochoptError) -> None:
    global _edits_kept
    results[edit] = result
    _edits_kept += 1
    while _edits_kept > EDITS_KEPT and len(_EDITS) > 1:
        _edits_kept -= len(_EDITS.popitem(last=False)[1])


def refusal_copy(e: StochoptError) -> StochoptError:
    """The same refusal as a new exception (the same type, message, place and hint),
    without the frames it was raised through: what a cache keeps and raises again."""
    return type(e)(e.message, line=e.line, col=e.col, hint=e.hint, source=e.source)


def remap(node: Node, mapping: dict[int, int]) -> Node:
    """The node reading ``mapping[a]`` for each argument ``a`` the mapping names (the
    node itself when that changes nothing)."""
    for a in node.inputs:
        if mapping.get(a, a) != a:
            break
    else:
        return node
    return node.replaced(args=tuple([a if isinstance(a, Const) else mapping.get(a, a)
                                     for a in node.args]))


def remove_dead(nodes: list[Node], output: int) -> tuple[list[Node], int]:
    """Keep inputs, the output and whatever it depends on; renumber."""
    live = [False] * len(nodes)
    live[output] = True
    for i in range(output, -1, -1):
        if live[i]:
            for a in nodes[i].inputs:
                live[a] = True
    keep = [i for i, n in enumerate(nodes) if live[i] or n.op == "input"]
    if len(keep) == len(nodes):  # nothing dead (the common case): no renumbering
        return list(nodes), output
    index = {old: new for new, old in enumerate(keep)}
    return [remap(nodes[i], index) for i in keep], index[output]


def replace_uses(nodes: list[Node], old: int, new: int, after: int | None = None) -> list[Node]:
    """Point every reader of ``old`` (after position ``after``) at ``new``."""
    start = (old if after is None else after) + 1
    return nodes[:start] + [remap(n, {old: new}) for n in nodes[start:]]


def with_layout(attrs: tuple, layout) -> tuple:
    """A layout op's attributes with another layout (every other attribute kept, in
    order)."""
    return tuple([(key, layout if key == "layout" else value) for key, value in attrs])


def insert(nodes: list[Node], position: int, node: Node) -> list[Node]:
    """Insert a node at a position; later references shift by one."""
    shift = {i: i + 1 for i in range(position, len(nodes))}
    return nodes[:position] + [node] + [remap(n, shift) for n in nodes[position:]]


def shifted(index: int, position: int) -> int:
    """Where a node index lands after an insertion at ``position``."""
    return index + 1 if index >= position else index


def append(nodes: list[Node], op: str, args, attrs: dict, like: Node, name: str = "") -> int:
    """Append a node (its type a placeholder ``rebuild`` replaces); returns its index."""
    nodes.append(Node(op, tuple(args), tuple(attrs.items()), like.type, name))
    return len(nodes) - 1


def substitute(kernel: Kernel, nodes: list[Node], old: int, new: int, machine) -> Kernel:
    """Finish an edit that appended nodes to ``kernel.nodes`` (all reading nodes up to
    ``old`` or each other): move them to just after ``old``, point the later readers of
    ``old`` at ``new``, drop what is dead and type-check."""
    count = len(kernel.nodes)
    order = list(range(old + 1)) + list(range(count, len(nodes))) + list(range(old + 1, count))
    index = {was: now for now, was in enumerate(order)}
    moved = [remap(nodes[was], index) for was in order]
    moved = replace_uses(moved, index[old], index[new], after=index[new])
    return rebuild(kernel, moved, index[kernel.output], machine)


def common_subexpressions(nodes: list[Node], output: int) -> tuple[list[Node], int]:
    """Merge nodes that apply the same op to the same arguments (a load done twice)."""
    seen: dict[tuple, int] = {}
    mapping: dict[int, int] = {}
    out = []
    for i, n in enumerate(nodes):
        n = remap(n, mapping)
        key = (n.op, n.args, n.attrs) if n.op != "input" else ("input", i)
        if key in seen:
            mapping[i] = seen[key]
            out.append(n)
            continue
        seen[key] = i
        out.append(n)
    return remove_dead(out, mapping.get(output, output))
