"""render(kernel) -> text: the canonical LEIR text, one assignment per op.

``parse(render(k)) == k`` for every kernel: loops come back unrolled, names are made
unique, literals and static arguments are written so that they read back the same.
"""

from __future__ import annotations

import keyword

from stochopt.leir.ir import Kernel, Node
from stochopt.leir.ops import AXIS, DTYPE, LAYOUT, OPS, REQUIRED, SUBSCRIPT, TENSOR, TENSORS
from stochopt.leir.parser import is_reserved
from stochopt.leir.rules import Const


def render(kernel: Kernel, machine=None) -> str:
    """The kernel's text; with ``machine``, a ``# machine: NAME`` header records what
    it was written for (kernel files carry it, so `run` and `verify` cost it there)."""
    names = _unique_names(kernel)
    lines = []
    if kernel.spec_path:
        lines.append(f"# spec: {kernel.spec_path}")
    if machine is not None:
        lines.append(f"# machine: {machine.name}")
    params = ", ".join(f'{names[i]}: "{n.type.signature()}"'
                       for i, n in enumerate(kernel.nodes) if n.op == "input")
    lines.append(f'def {kernel.name}({params}) -> "{kernel.output_type.signature()}":')
    # the returned store is written inline only when it is the last node: moving an
    # earlier one to the end would reorder the nodes and break parse(render(k)) == k
    last = len(kernel.nodes) - 1
    for i, n in enumerate(kernel.nodes):
        if n.op == "input" or i == kernel.output == last:
            continue
        lines.append(f"    {names[i]} = {expression(n, names)}")
    ret = kernel.nodes[kernel.output]
    lines.append("    return " + (expression(ret, names) if kernel.output == last
                                  else names[kernel.output]))
    return "\n".join(lines) + "\n"


def expression(n: Node, names: list[str]) -> str:
    """Right-hand side of one node, referring to earlier nodes by name."""
    op = OPS[n.op]

    def arg(a) -> str:
        if isinstance(a, Const):
            text = str(a)
            return f"({text})" if text.startswith("-") else text
        return names[a]

    if op.written_as_operator and op.operator == SUBSCRIPT:
        bounds = ", ".join(f"{lo}:{hi}" for lo, hi in n.attr("bounds"))
        return f"{arg(n.args[0])}[{bounds}]"
    if op.written_as_operator and len(n.args) == 1:
        return f"{op.operator}{arg(n.args[0])}"
    if op.written_as_operator:
        return f"{arg(n.args[0])} {op.operator} {arg(n.args[1])}"
    parts: list[str] = []
    attrs = dict(n.attrs)
    args = iter(n.args)
    for p in op.params:
        if p.kind == TENSOR:
            parts.append(arg(next(args)))
        elif p.kind == TENSORS:
            parts.append("[" + ", ".join(arg(a) for a in args) + "]")
        elif p.default is REQUIRED and p.kind != AXIS:
            parts.append(_static(p.kind, attrs[p.name]))
        elif p.default is REQUIRED:
            parts.append(f"{p.name}={attrs[p.name]}")
        elif not (attrs[p.name] == p.default and type(attrs[p.name]) is type(p.default)):
            parts.append(f"{p.name}={_static(p.kind, attrs[p.name])}")
    return f"{n.op}({', '.join(parts)})"


def _static(kind: str, value) -> str:
    if kind in (LAYOUT, DTYPE):
        return f'"{value}"'
    if isinstance(value, tuple):
        return "(" + ", ".join(str(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, float | int) and not isinstance(value, bool):
        return str(Const(value))
    return repr(value)


def value_names(kernel: Kernel) -> list[str]:
    """Each node's name as render() writes it (unique, never a reserved word)."""
    return _unique_names(kernel)


def _unique_names(kernel: Kernel) -> list[str]:
    taken: set[str] = set()
    out = []
    for i, n in enumerate(kernel.nodes):
        base = n.attr("name") if n.op == "input" else (n.name or f"v{i}")
        if not base.isidentifier() or keyword.iskeyword(base) or is_reserved(base):
            base = f"v{i}"
        name, k = base, 1
        while name in taken:
            name = f"{base}_{k}"
            k += 1
        taken.add(name)
        out.append(name)
    return out
