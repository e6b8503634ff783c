"""The IR: a kernel is a tuple of nodes in program order; a node is one op application.

Nodes refer to earlier nodes by index. Everything is frozen, so kernels are values:
two kernels are equal when they compute the same graph with the same layouts, whatever
their variable names. ``build`` is the only way nodes get their types, and it runs every
op's constraint rule, so a Kernel that exists is well formed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from stochopt.displayable import Displayable
from stochopt.errors import ConstraintError, StochoptError
from stochopt.leir import terms as T
from stochopt.leir.ops import FORGET_ON_CHANGE, INPUT_OP, OPS, Op
from stochopt.leir.rules import Const, check_local_memory
from stochopt.leir.types import TensorType

MAX_OPS = 10_000

Arg = int | Const


@dataclass(frozen=True, slots=True)
class Node:
    op: str
    args: tuple[Arg, ...]             # earlier node indices, or scalar literals
    attrs: tuple[tuple[str, Any], ...]  # static arguments, in the op's parameter order
    type: TensorType
    name: str = field(default="", compare=False)
    line: int | None = field(default=None, compare=False)
    # the node indices among args, made once: dead-code removal, the schedule and the
    # value caches read them for every node of every candidate
    inputs: tuple[int, ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple([a for a in self.args if isinstance(a, int)]))

    def attr(self, key: str) -> Any:
        return T.attr_of(self.attrs, key)

    def replaced(self, *, op: str | None = None, args: tuple[Arg, ...] | None = None,
                 attrs: tuple | None = None) -> Node:
        """This node with another op, args or attributes, as dataclasses.replace gives it
        (without its walk over the fields: edits make many nodes per candidate)."""
        return Node(self.op if op is None else op, self.args if args is None else args,
                    self.attrs if attrs is None else attrs, self.type, self.name, self.line)


@dataclass(frozen=True, slots=True)
class Kernel(Displayable):  # Displayable: Jupyter shows it highlighted
    name: str
    nodes: tuple[Node, ...]
    output: int           # index of the node returned: a store, or a concat of stores
    spec_path: str | None = field(default=None, compare=False)
    _terms: tuple | None = field(default=None, init=False, compare=False, repr=False)
    _memo: dict | None = field(default=None, init=False, compare=False, repr=False)

    @property
    def memo(self) -> dict:
        """Facts derived from this kernel object alone (its cycles on a machine, its
        structure key), kept on it by whoever derives them: kernels never change, and a
        chain asks about the same kernel objects again and again. Not pickled."""
        if self._memo is None:
            object.__setattr__(self, "_memo", {})
        return self._memo

    def __getstate__(self) -> tuple:  # what a copy or a pickle keeps: not the memo
        return self.name, self.nodes, self.output, self.spec_path, self._terms

    def __setstate__(self, state: tuple) -> None:
        for key, value in zip(("name", "nodes", "output", "spec_path", "_terms"), state,
                              strict=True):
            object.__setattr__(self, key, value)
        object.__setattr__(self, "_memo", None)

    @property
    def terms(self) -> tuple[T.Term, ...]:
        """The hash-consed term of every node (terms.py): identical subgraphs, in this
        kernel or any other, are one object. Made by the Builder, or on first use."""
        if self._terms is None:
            object.__setattr__(self, "_terms", T.terms_of(self.nodes))
        return self._terms

    @property
    def arguments(self) -> tuple[tuple[Arg, ...], ...]:
        """Every node's arguments in program order, made once per kernel object: with the
        terms, what the schedule and the range analysis read, so their caches key on it."""
        known = self.memo.get(Kernel.arguments)
        if known is None:
            known = self.memo[Kernel.arguments] = tuple([n.args for n in self.nodes])
        return known

    @property
    def exact_key(self) -> T.Term:
        """What the kernel computes in exact mode, whatever its layouts and op order."""
        return self.terms[self.output].exact_key

    @property
    def native_key(self) -> T.Term:
        """What it computes in native mode: the exact key plus the layouts that set the
        order of its sums (terms.REDUCTION_ORDER)."""
        return self.terms[self.output].native_key

    @property
    def params(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.op == "input")

    @property
    def output_type(self) -> TensorType:
        return self.nodes[self.output].type

    def signature(self) -> dict[str, TensorType]:
        known = self.memo.get(Kernel.signature)  # asked of every candidate: made once
        if known is None:
            known = self.memo[Kernel.signature] = {n.attr("name"): n.type for n in self.params}
        return dict(known)

    def users(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in self.nodes]
        for i, n in enumerate(self.nodes):
            for j in n.inputs:
                out[j].append(i)
        return out


def op_of(name: str) -> Op:
    return INPUT_OP if name == "input" else OPS[name]


def infer(op_name: str, arg_types: Sequence[TensorType | Const], attrs: dict,
          machine, names: list[str] | None = None) -> TensorType:
    """Type of one op application, or ConstraintError."""
    op = OPS[op_name]
    out = op.infer(op_name, list(arg_types), attrs, machine, names or [])
    check_local_memory(out, machine, op_name)
    return out


class Builder:
    """Appends nodes one at a time, typing each as it goes (define-and-run).

    Each node's term is looked up before its type rule runs: a term already checked on
    this machine has its type, so re-typing a kernel after a small edit costs one cache
    lookup per unchanged node (the type and constraint cache on (op, sources' types,
    attributes) that hash-consing gives for free)."""

    def __init__(self, machine) -> None:
        self.machine = machine
        self.nodes: list[Node] = []
        self.terms: list[T.Term] = []

    def input(self, name: str, type_: TensorType) -> int:
        self.nodes.append(Node("input", (), (("name", name),), type_, name))
        term = T.make_input(name, type_)
        term.checked_on = self.machine  # an input has no constraint: legal on any machine
        self.terms.append(term)
        return len(self.nodes) - 1

    def add(self, op_name: str, args: Sequence[Arg], attrs: dict, name: str = "",
            line: int | None = None, col: int | None = None) -> int:
        ordered = tuple((p.name, attrs[p.name]) for p in OPS[op_name].static_params
                        if p.name in attrs)
        return self._add(op_name, tuple(args), ordered, attrs, name, line, col)

    def _add(self, op_name: str, args: tuple, ordered: tuple, attrs: dict | None,
             name: str, line: int | None, col: int | None, given: Node | None = None) -> int:
        """Append a node whose static arguments are ``ordered`` (the op's parameter order;
        ``attrs`` as given, or None to take them from ``ordered``). ``given``: the node
        being re-typed, appended itself when its type and attributes are the term's."""
        if len(self.nodes) >= MAX_OPS:
            raise ConstraintError(f"kernel has more than {MAX_OPS} ops", line=line, col=col,
                                  hint="use fewer loop iterations")
        if len(self.terms) != len(self.nodes):  # nodes were given from outside: trust them
            self.terms = list(T.terms_of(self.nodes))
        sources = tuple(a if isinstance(a, Const) else self.terms[a] for a in args)
        term = T.lookup(op_name, sources, ordered)
        if term is None or not _checked_on(term, self.machine):
            key = None if attrs is not None else \
                (op_name, T.source_types_key(sources), T.attrs_key(ordered))
            attrs = dict(ordered) if attrs is None else attrs
            out, number = self._infer(op_name, args, attrs, line, col, key)
            ordered = tuple((p.name, attrs[p.name]) for p in OPS[op_name].static_params)
            term = T.make(op_name, sources, ordered, out, number)
            term.checked_on = self.machine
        if given is None or given.type is not term.type or given.attrs is not term.attrs:
            given = Node(op_name, args, term.attrs, term.type, name, line)
        self.nodes.append(given)
        self.terms.append(term)
        return len(self.nodes) - 1

    def _infer(self, op_name: str, args: Sequence[Arg], attrs: dict, line, col,
               key: tuple | None = None) -> tuple[TensorType, int | None]:
        """Run the op's type rule and every constraint, naming the operands in errors:
        the type (and its type number when known). ``key``: (op, the sources' type
        numbers and literals, attributes), of which the rules' verdict on this machine is
        a function (a refusal's message also names the operands): the verdict is
        remembered under it."""
        if key is not None:
            typed = _TYPED.get(key)
            if typed is not None and typed[0] is self.machine:
                return self._stored_tiles_checked(op_name, args, typed[1], line, col), \
                    typed[2]
        names = [str(a) if isinstance(a, Const) else (self.nodes[a].name or f"%{a}")
                 for a in args]
        refusal = None if key is None else (*key, tuple(names), self.machine)
        if refusal is not None:
            known = _REFUSALS.get(refusal)
            if known is not None:
                raise _located(known, line, col)
        types = [a if isinstance(a, Const) else self.nodes[a].type for a in args]
        try:
            out = infer(op_name, types, attrs, self.machine, names)
        except StochoptError as e:
            if refusal is not None:
                _remember(_REFUSALS, refusal, e.with_traceback(None))  # not the rule's frames
            raise _located(e, line, col) from None
        if key is None:
            return self._stored_tiles_checked(op_name, args, out, line, col), None
        number = T.type_key(out)
        _remember(_TYPED, key, (self.machine, out, number))
        return self._stored_tiles_checked(op_name, args, out, line, col), number

    def _stored_tiles_checked(self, op_name: str, args: Sequence[Arg], out: TensorType,
                              line, col) -> TensorType:
        if op_name == "concat" and out.location == "dram":
            _check_stored_tiles(self.nodes, args, line, col)
        return out

    def finish(self, name: str, output: int, spec_path: str | None = None) -> Kernel:
        if not is_stored(self.nodes[output]):
            raise ConstraintError(RETURN_RULE, line=self.nodes[output].line,
                                  hint="return store(y)")
        kernel = Kernel(name, tuple(self.nodes), output, spec_path)
        if len(self.terms) == len(self.nodes):
            object.__setattr__(kernel, "_terms", tuple(self.terms))
        return kernel


# What the type rules gave, by (op, sources' type numbers and literals, attributes):
# the type a machine accepted (with that machine), and what they refused, with the
# operand names and the machine (a refusal's message names the operands). A chain makes
# many new terms of types it has seen (anything new upstream makes a term new), and
# proposes the same invalid candidates again and again (a cast no reader accepts).
_TYPED: dict[tuple, tuple] = {}
_REFUSALS: dict[tuple, StochoptError] = {}
VERDICTS_KEPT = 50_000


FORGET_ON_CHANGE.extend((_TYPED.clear, _REFUSALS.clear))


def _remember(cache: dict, key: tuple, verdict) -> None:
    if len(cache) >= VERDICTS_KEPT:
        cache.clear()
    cache[key] = verdict


def _located(e: StochoptError, line: int | None, col: int | None) -> StochoptError:
    """A type rule's refusal, placed at the node's line when the rule gave none (a fresh
    copy each time: a refusal is remembered, and its catchers annotate what they catch)."""
    if e.line is None:
        return type(e)(e.message, line=line, col=col, hint=e.hint)
    return type(e)(e.message, line=e.line, col=e.col, hint=e.hint, source=e.source)


def _checked_on(term: T.Term, machine) -> bool:
    """Whether the term's constraints hold on this machine: checked there already (a
    term's type never depends on the machine, its legality does)."""
    if term.checked_on is machine:
        return True
    if term.checked_on is not None and term.checked_on == machine:
        term.checked_on = machine  # an equal copy (a worker's unpickled machine)
        return True
    return False


RETURN_RULE = ("a kernel must return store(...) of its result, or concat([...], axis) of "
               "stored tiles")


def is_stored(node: Node) -> bool:
    """A store, or stored tiles joined in DRAM: what a kernel may return."""
    return node.op == "store" or (node.op == "concat" and node.type.location == "dram")


def _check_stored_tiles(nodes: list[Node], args: Sequence[Arg], line, col) -> None:
    """Only stores write DRAM, so only their results can be placed side by side for free;
    joining the kernel's inputs would need a copy the model does not charge."""
    for a in args:
        if isinstance(a, int) and not is_stored(nodes[a]):
            what = nodes[a].name or f"%{a}"
            kind = "a kernel input" if nodes[a].op == "input" else f"a {nodes[a].op} result"
            raise ConstraintError(f"concat() of dram values joins only stored tiles; {what} "
                                  f"is {kind}", line=line, col=col,
                                  hint="load the parts and concat them on the PEs")


def build(name: str, nodes: Iterable[Node], output: int, machine,
          spec_path: str | None = None, edited: Kernel | None = None) -> Kernel:
    """Re-type a node list from scratch (after a rewrite or mutation): a valid Kernel or
    ConstraintError. Types on the given nodes are ignored, except on the nodes that are
    the very node objects of ``edited`` (the kernel the list was edited from, built on
    this machine): an edit leaves what precedes it untouched, so those nodes keep their
    types and terms and only the rest is re-typed; after it, a node of ``edited`` whose
    sources kept their terms keeps its own term too (hash-consing would find that one)."""
    nodes = list(nodes)
    b = Builder(machine)
    kept = _unchanged_prefix(nodes, edited, machine)
    if kept:
        b.nodes, b.terms = nodes[:kept], list(edited.terms[:kept])
    old = _OldTerms(edited, machine) if edited is not None else None
    for i, n in enumerate(nodes[kept:], kept):
        if n.op == "input":
            b.input(n.attr("name"), n.type)
            continue
        if n.op not in OPS:
            raise ConstraintError(
                f"node {i} ({n.name or 'unnamed'}) has the unknown op {n.op!r}",
                line=n.line, hint="use an op of the table: " + ", ".join(sorted(OPS)))
        if n.inputs and (min(n.inputs) < 0 or max(n.inputs) >= i):
            raise ConstraintError(f"{n.op} uses a value before it is defined", line=n.line)
        term = old.term(n, b.terms) if old is not None else None
        if term is not None and len(b.nodes) < MAX_OPS:
            b.nodes.append(n)
            b.terms.append(term)
            continue
        b._add(n.op, n.args, n.attrs, None, n.name, n.line, None, n)
    if not 0 <= output < len(b.nodes):
        raise ConstraintError(f"kernel output is node {output}, out of range: the kernel "
                              f"has {len(b.nodes)} nodes (0..{len(b.nodes) - 1})")
    return b.finish(name, output, spec_path)


def _unchanged_prefix(nodes: list[Node], edited: Kernel | None, machine) -> int:
    """How many leading nodes are ``edited``'s own node objects, with terms checked on
    this machine: typed and legal here, as they were in ``edited``."""
    if edited is None:
        return 0
    count = 0
    for new, old, term in zip(nodes, edited.nodes, edited.terms, strict=False):
        if new is not old or not _checked_on(term, machine):
            break
        count += 1
    return count


class _OldTerms:
    """The terms of an edited kernel's nodes, for the nodes an edit left as they were."""

    def __init__(self, edited: Kernel, machine) -> None:
        self.nodes, self.terms, self.machine = edited.nodes, edited.terms, machine
        self.shift = 0  # old index - new index of the last node found: an edit's offset

    def term(self, node: Node, terms: list[T.Term]) -> T.Term | None:
        """The term ``node`` had in the edited kernel, when lookup would give that very
        term: ``node`` is the edited kernel's node at the offset of the last one found
        (or one further or nearer: an insertion or deletion before it), or that node with
        its arguments renumbered, and its sources have the same terms here as there
        (``terms``: those of the nodes so far). Its type and attributes are the node's
        own, and it is checked on this machine. Else None (lookup decides)."""
        i = len(terms)
        for shift in (self.shift, self.shift + 1, self.shift - 1):
            j = i + shift
            if not 0 <= j < len(self.nodes):
                continue
            old = self.nodes[j]
            if old is node:
                if any(terms[a] is not self.terms[a] for a in node.inputs):
                    return None
            elif not self._renumbered(node, old, terms):
                continue
            term = self.terms[j]
            if term.type is not node.type or term.attrs is not node.attrs or \
                    not _checked_on(term, self.machine):
                return None
            self.shift = shift
            return term
        return None

    def _renumbered(self, node: Node, old: Node, terms: list[T.Term]) -> bool:
        """Whether ``node`` is ``old`` with its arguments renumbered: the same op and
        attributes, the same literals, and sources with the same terms."""
        if node.op != old.op or node.attrs is not old.attrs or len(node.args) != len(old.args):
            return False
        for a, b in zip(node.args, old.args, strict=True):
            if isinstance(a, Const) or isinstance(b, Const):
                if a is not b:
                    return False
            elif terms[a] is not self.terms[b]:
                return False
        return True


def typecheck(kernel: Kernel, machine) -> Kernel:
    """Re-run every type and constraint rule of a kernel on a machine; return it re-typed
    (a ConstraintError if it is not legal there)."""
    return build(kernel.name, kernel.nodes, kernel.output, machine, kernel.spec_path)
