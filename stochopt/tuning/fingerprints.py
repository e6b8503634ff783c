"""Fingerprints: what makes two specs, two machines or two verifiers the same.

A spec's fingerprint is read from the Spec object: its inputs' dtypes, shapes and
ranges, its output and tolerances, and its source normalized (parsed and unparsed, so
formatting and comments do not count; docstrings and the @spec decorator's arguments
left out, the decorator's facts being in the rest; the spec function's own name left
out, so a renamed copy is the same spec). Two more keys find similar specs:

- ``family``: the traced op graph with shapes left out (each op, its dtype, rank, the
  ops it reads, its axes) and the input dtypes: the same computation at other shapes;
- ``ops``: the traced ops as a multiset: a looser neighbour.

A spec the lowering cannot trace (it is started from --init) has the normalized source
without its shapes as its family and no op multiset.
"""

from __future__ import annotations

import ast
import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from stochopt.errors import StochoptError
from stochopt.spec import Spec, TensorSpec


@dataclass(frozen=True)
class SpecPrint:
    fingerprint: str
    name: str
    family: str
    ops: str | None      # the op multiset, e.g. "exp:1 matmul:3 reduce_max:1"
    shapes: dict         # inputs, output and tolerances as plain values
    source: str          # the normalized source


def _digest(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _tensor(t: TensorSpec | None) -> list | None:
    return None if t is None else [t.dtype, list(t.shape), t.low, t.high]


def spec_print(spec: Spec) -> SpecPrint:
    """The spec's fingerprint, family and op multiset."""
    source = normalized_source(spec)
    shapes = {"inputs": {n: _tensor(t) for n, t in spec.inputs.items()},
              "output": _tensor(spec.output), "rtol": spec.rtol, "atol": spec.atol}
    dtypes = [t.dtype for t in spec.inputs.values()] + [spec.output_dtype]
    graph = op_graph(spec)
    if graph is None:
        family, ops = _digest({"source": source, "dtypes": dtypes}), None
    else:
        family = _digest({"graph": graph, "dtypes": dtypes})
        counts = Counter(node[0] for node in graph if node[0] != "input")
        ops = " ".join(f"{op}:{n}" for op, n in sorted(counts.items()))
    return SpecPrint(_digest({"source": source, "shapes": shapes}), spec.name, family, ops,
                     shapes, source)


def normalized_source(spec: Spec) -> str:
    """The spec's source as the parser sees it: no comments, docstrings or formatting,
    the @spec decorator's arguments and the function's name replaced by placeholders."""
    try:
        tree = ast.parse(spec.source)
    except SyntaxError:
        return spec.source.strip()   # not Python on its own (a fragment): as written
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef) and body and \
                isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
        if isinstance(node, ast.FunctionDef) and node.name == spec.reference.__name__:
            node.name = "_spec_"
            node.decorator_list = [_bare(d) for d in node.decorator_list]
    return ast.unparse(tree)


def _bare(decorator: ast.expr) -> ast.expr:
    """@spec(inputs=...) -> @spec(): the arguments are the fingerprint's shapes."""
    return ast.Call(decorator.func, [], []) if isinstance(decorator, ast.Call) else decorator


def op_graph(spec: Spec) -> list[list] | None:
    """The traced graph in a form that leaves shapes out: one [op, dtype, rank, inputs,
    attributes] per node, inputs by position (constants as "c"); None if untraceable."""
    from stochopt.lower.trace import TNode, trace

    try:
        inputs, out = trace(spec)
    except StochoptError:
        return None
    order: list[TNode] = []
    seen: set[int] = set()
    stack = [(out, False)] + [(n, False) for n in reversed(inputs)]
    while stack:  # post-order from the output, the inputs first in their own order
        node, expanded = stack.pop()
        if id(node) in seen:
            continue
        if expanded or not any(isinstance(a, TNode) for a in node.args):
            seen.add(id(node))
            order.append(node)
            continue
        stack.append((node, True))
        stack += [(a, False) for a in reversed(node.args) if isinstance(a, TNode)]
    index = {id(n): i for i, n in enumerate(order)}
    return [[n.op, n.dtype, len(n.shape),
             [index[id(a)] if isinstance(a, TNode) else "c" for a in n.args],
             {k: _shape_free(v) for k, v in sorted(n.attrs.items())
              if k not in ("name", "bounds", "shape")}]
            for n in order]


def _shape_free(value):
    """Attribute values as JSON (axes and permutations stay: they do not scale)."""
    if isinstance(value, tuple | list):
        return [_shape_free(v) for v in value]
    return value if isinstance(value, bool | int | float | str) or value is None else str(value)


def machine_print(machine) -> tuple[str, str, dict]:
    """(fingerprint, name, constants): the machine's constants decide its cycles; its
    name does not (a TOML copy of a preset is the same machine)."""
    return summary_print(machine.summary(), machine.name)


def summary_print(summary: dict, name: str | None = None) -> tuple[str, str, dict]:
    """machine_print of a Machine.summary() (as run.json keeps it)."""
    constants = json.loads(json.dumps({k: v for k, v in summary.items() if k != "name"}))
    return _digest(constants), name or summary.get("name") or "custom", constants


# what decides a verdict: the verifier, the emulator and the ops' numpy meaning
VERIFIER_SOURCES = ("verify/*.py", "backend/emulate.py", "leir/ops.py")


@cache
def verifier_version() -> str:
    """stochopt's version and a digest of the code and libraries a verdict depends on: a
    kernel proved under another one is checked again before a run trusts it."""
    from importlib.metadata import PackageNotFoundError, version

    from stochopt.version import __version__
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for pattern in VERIFIER_SOURCES:
        for path in sorted(package.glob(pattern)):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    for library in ("numpy", "hypothesis", "ml_dtypes"):  # read, not imported: no cost
        try:
            found = version(library)
        except PackageNotFoundError:
            found = "absent"
        digest.update(f"{library} {found}\0".encode())
    return f"{__version__}+{digest.hexdigest()[:12]}"
