"""Surgery on a kernel's node list: the few edits every move and rule is made of.

Edits work on plain lists of Nodes and return new lists; types on edited nodes are
stale until ``rebuild`` re-runs every constraint. Indices in ``args`` always point to
earlier nodes.
"""

from __future__ import annotations

from stochopt.leir.ir import Kernel, Node, build
from stochopt.leir.rules import Const


def rebuild(kernel: Kernel, nodes: list[Node], output: int, machine) -> Kernel:
    """Drop dead code, then type-check what the edit may have changed (everything from
    the first node that is not ``kernel``'s own; ConstraintError if invalid)."""
    nodes, output = remove_dead(nodes, output)
    return build(kernel.name, nodes, output, machine, kernel.spec_path, edited=kernel)


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
