"""Rules as patterns: (pattern -> replacement) entries over a kernel's DAG.

A local rule is one entry: a pattern that names the shape it rewrites, an optional
condition, and a replacement built from what the pattern bound. tinygrad's
PatternMatcher is the model::

    # relayout(load(x, A), B) -> load(x, B)
    local("fold_relayout_into_load", Pat("relayout", Pat("load", X, name="load"), name="r"),
          lambda m: m.load.but(layout=m.r.attr("layout"))),

The kernel's nodes form a DAG (each argument is an earlier node's index or a literal);
a pattern matches at a node and walks its arguments. Matching by index rather than by
hash-consed Term keeps two identical nodes apart, which ``reuse_loaded_tensor`` needs.
``PatternMatcher`` groups the entries by the op at their root and makes one pass over a
kernel for all of them; what it finds is a ``Match`` per site, holding the bindings, so
a rule's apply never re-derives what its find matched.

A replacement is a bound node (the root's readers then read it instead) or a tree of
``New`` nodes over bound nodes and literals. The new nodes are placed just before the
root, in post-order, and the tree's root takes the old root's place and name.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from stochopt.leir.ir import Kernel, Node
from stochopt.leir.rules import Const
from stochopt.leir.types import TensorType
from stochopt.transform.edit import rebuild, remap, replace_uses

# ---------------------------------------------------------------------------------
# patterns
# ---------------------------------------------------------------------------------

NODE, TENSOR, CONST, ANY, ALTERNATIVES = "node", "tensor", "const", "any", "alternatives"


class Pat:
    """A pattern: a node with one of ``ops`` whose arguments match ``sources`` (all of
    them, in order, when given), bound as ``name``, kept only where ``where(bound)``."""

    __slots__ = ("kind", "ops", "sources", "name", "where", "alternatives")

    def __init__(self, ops: str | Sequence[str] | None = None, *sources: Pat,
                 name: str | None = None, where: Callable[[Any], bool] | None = None,
                 kind: str = NODE, alternatives: tuple[Pat, ...] = ()) -> None:
        self.kind = kind
        self.ops = (ops,) if isinstance(ops, str) else tuple(ops) if ops else None
        self.sources, self.name, self.where = sources, name, where
        self.alternatives = alternatives

    @staticmethod
    def var(name: str) -> Pat:
        """Any argument, a tensor or a literal."""
        return Pat(name=name, kind=ANY)

    @staticmethod
    def tensor(name: str, where: Callable[[Bound], bool] | None = None) -> Pat:
        """Any tensor argument (a node, not a literal)."""
        return Pat(name=name, where=where, kind=TENSOR)

    @staticmethod
    def const(name: str, where: Callable[[Const], bool] | None = None) -> Pat:
        """A scalar literal."""
        return Pat(name=name, where=where, kind=CONST)

    @staticmethod
    def any(*alternatives: Pat, name: str | None = None) -> Pat:
        """The first of ``alternatives`` that matches."""
        return Pat(name=name, kind=ALTERNATIVES, alternatives=alternatives)

    def names(self) -> set[str]:
        """Every name this pattern binds."""
        inner = self.alternatives + self.sources
        return {n for p in inner for n in p.names()} | ({self.name} if self.name else set())

    def root_ops(self) -> tuple[str, ...]:
        """The ops a node must have for this pattern to match at it (its index keys)."""
        if self.kind == ALTERNATIVES:
            return tuple(dict.fromkeys(op for a in self.alternatives for op in a.root_ops()))
        if self.kind != NODE or self.ops is None:
            raise ValueError(f"a rule's pattern needs an op at its root, got {self}")
        return self.ops

    def __repr__(self) -> str:
        if self.kind == ALTERNATIVES:
            return " | ".join(map(repr, self.alternatives))
        if self.kind != NODE:
            return self.name or self.kind
        op = self.ops[0] if self.ops and len(self.ops) == 1 else \
            "{" + ",".join(self.ops or ("*",)) + "}"
        inner = f"({', '.join(map(repr, self.sources))})" if self.sources else "(...)"
        return f"{op}{inner}"


Matcher = Callable[[tuple[Node, ...], Any, dict[str, Any]], bool]
_UNBOUND = object()


def compile_pattern(pat: Pat) -> Matcher:
    """A function ``(nodes, argument, bindings) -> bool`` that matches ``pat`` at one
    argument (a node index or a literal), adding to ``bindings``; on failure they may hold
    partial bindings, which the caller drops. Compiled once per entry: the proposer asks
    every entry for its sites at every step, so the tests that fail are made cheap."""
    where, name = pat.where, pat.name

    def bind(nodes: tuple[Node, ...], arg: Any, bound: dict[str, Any]) -> bool:
        if where is not None and not where(_view(nodes, arg)):
            return False
        if name is None:
            return True
        known = bound.get(name, _UNBOUND)
        if known is _UNBOUND:
            bound[name] = arg
            return True
        return known == arg  # a name used twice must bind the same argument

    plain = where is None and name is None  # nothing to check or bind: skip bind()
    if pat.kind == ALTERNATIVES:
        alternatives = [compile_pattern(a) for a in pat.alternatives]

        def match(nodes, arg, bound):
            size = len(bound)
            for alternative in alternatives:
                if alternative(nodes, arg, bound):
                    return bind(nodes, arg, bound)
                while len(bound) > size:  # drop what the failed alternative bound
                    bound.popitem()
            return False
        return match
    if pat.kind == ANY:
        return bind
    if pat.kind == CONST:
        return lambda nodes, arg, bound: isinstance(arg, Const) and bind(nodes, arg, bound)
    if pat.kind == TENSOR:
        return lambda nodes, arg, bound: not isinstance(arg, Const) and bind(nodes, arg, bound)
    ops = frozenset(pat.ops) if pat.ops is not None else None
    sources = [compile_pattern(source) for source in pat.sources]
    count = len(sources)

    def match_node(nodes, arg, bound):
        if isinstance(arg, Const):
            return False
        node = nodes[arg]
        if ops is not None and node.op not in ops:
            return False
        if count:
            args = node.args
            if len(args) != count:
                return False
            for source, a in zip(sources, args, strict=True):
                if not source(nodes, a, bound):
                    return False
        return plain or bind(nodes, arg, bound)
    return match_node


# ---------------------------------------------------------------------------------
# what a match binds
# ---------------------------------------------------------------------------------

class Bound:
    """A node a pattern bound: its index in the kernel and the node itself."""

    __slots__ = ("index", "node")  # a plain class: made for every binding, so made cheap

    def __init__(self, index: int, node: Node) -> None:
        self.index, self.node = index, node

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Bound) and (self.index, self.node) == (other.index, other.node)

    def __hash__(self) -> int:
        return hash(self.index)

    def __repr__(self) -> str:
        return f"Bound({self.index}, {self.node.op})"

    @property
    def op(self) -> str:
        return self.node.op

    @property
    def type(self) -> TensorType:
        return self.node.type

    def attr(self, key: str) -> Any:
        return self.node.attr(key)

    def but(self, *sources: Source, op: str | None = None,
            **attrs: Any) -> New:
        """This node rebuilt with other sources (none given: its own), op or attributes;
        it keeps its type (until the rebuild re-types it) and source line."""
        own = tuple(sources) if sources else self.node.args
        merged = dict(self.node.attrs) | attrs
        return New(op or self.node.op, own, tuple(merged.items()), self.node.type,
                   line=self.node.line)


def _view(nodes: tuple[Node, ...], arg: int | Const) -> Bound | Const:
    return arg if isinstance(arg, Const) else Bound(arg, nodes[arg])


RESERVED = {"kernel", "root", "bindings"}  # a Match's own attributes


class Match:
    """One site of one rule: the root node's index and what the pattern bound there
    (``m.x`` is the Bound node or the literal bound as ``x``)."""

    def __init__(self, kernel: Kernel, root: int, bindings: dict[str, Any]) -> None:
        # the bindings become attributes: conditions read them at every candidate site
        attributes, nodes = self.__dict__, kernel.nodes
        for name, arg in bindings.items():
            attributes[name] = arg if arg.__class__ is Const else Bound(arg, nodes[arg])
        self.kernel, self.root, self.bindings = kernel, root, bindings

    def __getattr__(self, name: str) -> Any:  # only reached for a name the pattern lacks
        raise AttributeError(f"the pattern binds no {name!r}")

    def __repr__(self) -> str:
        return f"Match(root={self.root}, {self.bindings})"


@dataclass(frozen=True, slots=True)
class New:
    """A node a replacement makes (its type is a placeholder until the rebuild)."""

    op: str
    sources: tuple[Source, ...]  # an int: an existing node, by index
    attrs: tuple[tuple[str, Any], ...]
    type: TensorType
    name: str | None = None   # None: the old root's name at the root, else unnamed
    line: int | None = field(default=None)


Source = Bound | New | Const | int


def new(op: str, *sources: Source, like: Bound | New, name: str | None = None,
        **attrs: Any) -> New:
    """A new node ``op(sources, attrs)``, typed like ``like`` until the rebuild."""
    return New(op, sources, tuple(attrs.items()), like.type, name)


# ---------------------------------------------------------------------------------
# rules and the matcher
# ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rule:
    """A rewrite rule: where it applies (``find``) and what it makes there (``apply``,
    ConstraintError when the result is ill-formed, None when it declines). Every rule
    takes the same arguments; a rule that draws a parameter uses ``rng``, which may be
    None (then it takes its deterministic default)."""

    name: str
    algebra: str
    find: Callable[[Kernel], list]
    apply: Callable[[Kernel, Any, Any, random.Random | None], Kernel | None]
    weight: float = 1.0  # how often the proposer picks it, among the rules that apply
    pattern: Pat | None = None  # local rules: the shape rewritten
    # the work of one application, in kernels made and costed (one for most rules): what
    # a proposal that applies it costs the bandit
    units: float = 1.0
    # changes values beyond rounding order (fewer mantissa bits): the precision check
    # decides, and the lookahead screens a plan that uses it before handing it out
    lossy: bool = False
    # rules that draw a parameter: the values it may take at a site, ``(kernel, site,
    # machine) -> list``; apply then takes ``option=`` (a plan's step names it) or draws
    # it with ``rng.choice`` from this same list
    options: Callable[[Kernel, Any, Any], list] | None = None


@dataclass(frozen=True)
class Local:
    """A local rule's entry: pattern, replacement and an optional condition."""

    name: str
    algebra: str
    pattern: Pat
    replace: Callable[[Match], Bound | New]
    when: Callable[[Match], bool] | None = None
    weight: float = 1.0


class PatternMatcher:
    """Local rules grouped by the op at their root: one pass over a kernel finds the
    sites of all of them (cached for the last kernel, which the proposer asks once per
    rule)."""

    def __init__(self, entries: Sequence[Local]) -> None:
        self.entries = tuple(entries)
        self.by_op: dict[str, list[tuple[Local, Matcher]]] = {}
        for entry in self.entries:
            if clash := entry.pattern.names() & RESERVED:
                raise ValueError(f"{entry.name}: the pattern binds {sorted(clash)}, which a "
                                 f"Match holds itself; name them otherwise")
            matcher = compile_pattern(entry.pattern)
            for op in entry.pattern.root_ops():
                self.by_op.setdefault(op, []).append((entry, matcher))
        self._last: tuple[Kernel | None, dict[str, list[Match]]] = (None, {})

    def sites(self, kernel: Kernel) -> dict[str, list[Match]]:
        """Every entry's matches in this kernel, by rule name, in node order."""
        last, found = self._last
        if last is kernel:
            return found
        found: dict[str, list[Match]] = {entry.name: [] for entry in self.entries}
        nodes, by_op = kernel.nodes, self.by_op
        for index, node in enumerate(nodes):
            for entry, matches in by_op.get(node.op, ()):
                bound: dict[str, Any] = {}
                if matches(nodes, index, bound):
                    m = Match(kernel, index, bound)
                    if entry.when is None or entry.when(m):
                        found[entry.name].append(m)
        self._last = (kernel, found)
        return found

    def rules(self) -> dict[str, Rule]:
        """Each entry behind the one Rule interface, by name."""
        return {e.name: Rule(e.name, e.algebra, self._finder(e.name), _applier(e),
                             e.weight, e.pattern) for e in self.entries}

    def _finder(self, name: str) -> Callable[[Kernel], list]:
        return lambda kernel: self.sites(kernel)[name]


def _applier(entry: Local) -> Callable[..., Kernel]:
    def apply(kernel: Kernel, site: Match, machine, rng: random.Random | None = None) -> Kernel:
        if site.kernel is not kernel:  # a site is only good for the kernel it was found in
            raise ValueError(f"{entry.name}: the site was found in another kernel")
        return rewrite_at(kernel, site.root, entry.replace(site), machine)
    return apply


def rewrite_at(kernel: Kernel, root: int, replacement: Bound | New, machine) -> Kernel:
    """Put ``replacement`` in the place of node ``root`` and re-type the kernel."""
    nodes = list(kernel.nodes)
    if isinstance(replacement, Bound):  # the root's readers read the bound node instead
        return rebuild(kernel, replace_uses(nodes, root, replacement.index), kernel.output,
                       machine)
    fresh = _post_order(replacement)
    place = {id(n): root + position for position, n in enumerate(fresh)}

    def index_of(source: Source) -> int | Const:
        if isinstance(source, Const | int):
            return source
        return source.index if isinstance(source, Bound) else place[id(source)]

    made = [Node(n.op, tuple(index_of(s) for s in n.sources), n.attrs, n.type,
                 n.name if n.name is not None else nodes[root].name if n is replacement
                 else "", n.line) for n in fresh]
    shift = len(fresh) - 1
    moved = {j: j + shift for j in range(root, len(nodes))} if shift else {}
    later = [remap(n, moved) for n in nodes[root + 1:]] if shift else nodes[root + 1:]
    output = kernel.output + shift if kernel.output >= root else kernel.output
    return rebuild(kernel, nodes[:root] + made + later, output, machine)


def _post_order(root: New) -> list[New]:
    """The new nodes of a replacement, sources before readers, each once, root last."""
    seen: set[int] = set()
    out: list[New] = []
    stack: list[tuple[New, bool]] = [(root, False)]
    while stack:
        n, expanded = stack.pop()
        if expanded:
            out.append(n)
            continue
        if id(n) in seen:
            continue
        seen.add(id(n))
        stack.append((n, True))
        stack.extend((s, False) for s in reversed(n.sources) if isinstance(s, New))
    return out
