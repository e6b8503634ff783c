"""Hash-consed terms: identical subgraphs are one object, and every node has a value key.

A kernel's nodes refer to earlier nodes by index, which ties a node to its place in the
program. A Term is the same node with its sources as objects: op, type, sources and
static attributes, and nothing of its name, line or position. Terms are hash-consed, as
tinygrad's UOp cache does: making a term looks it up first in a cache keyed by (op,
sources, attributes), so building the same op on the same sources returns the same
object, equality is identity, and per-node caches (types, op costs, values) key on it
for the price of a pointer hash. The type is left out of the key because the type rules
are pure: a term's type is a function of its op, its sources' types and its attributes
(the machine only decides whether it is legal, see ``checked_on``). Inputs, whose type
is given rather than inferred, key on it.

Every term also has two *value keys*, terms of the layout-free value graph:

- ``exact_key``: what the term computes in exact mode (float64, no rounding). Layouts
  never change an exact value, so the key drops them: load, relayout and store are the
  identity on values and collapse to their source; a full() forgets its layout; types
  keep only dtype and shape. Nor does the float dtype: exact mode computes f32 and bf16
  alike, so both read "float" in the key and a cast between them collapses to its
  source (a dtype move leaves every exact value as it was). Two kernels that differ
  only in layouts, placement of relayouts, program order or float dtypes have the same
  exact key.
- ``native_key``: what the term computes in native mode (the machine's dtypes and
  rounding). Rounding depends on the order in which a sum is taken, and a machine sums
  a reduced or contracted axis in the order its layout spreads it. So the native key is
  the exact key plus, at every op in REDUCTION_ORDER (reduce_sum, matmul), the factors
  of the axis it sums: the layout facts that set a reduction order, and no others.
  (Today's emulator sums in an order independent of layouts, so this is finer than it
  needs to be; it is right for an emulator that follows the layout, and no coarser.)

Value keys are what the screening cache and the "proved earlier" registry key on
(stochopt/search/values.py).
"""

from __future__ import annotations

import hashlib
import weakref
from typing import Any

import numpy as np

from stochopt.leir.layout import Layout
from stochopt.leir.rules import Const

# ops whose value is their (only) source's value: they move data, never change it
VALUE_PRESERVING = frozenset({"load", "relayout", "store"})
# the float dtypes, which exact mode computes alike (float64, never rounded)
FLOATS = frozenset({"f32", "bf16"})


def _summed_axis_of_reduce(term: Term) -> Any:
    source = term.sources[0]
    return source.type.layout.axes[term.attr("axis") % len(source.type.shape)]


def _summed_axis_of_matmul(term: Term) -> Any:
    return term.sources[0].type.layout.axes[-1]  # K, laid out alike in both operands


# op -> the layout facts that set the order of its sum (native value key only)
REDUCTION_ORDER = {"reduce_sum": _summed_axis_of_reduce, "matmul": _summed_axis_of_matmul}


class Term:
    """One op applied to terms (or scalar literals), hash-consed: see the module doc."""

    __slots__ = ("op", "type", "sources", "attrs", "checked_on", "facts", "_type_key",
                 "_exact", "_native", "__weakref__")

    def __init__(self, op: str, type_: Any, sources: tuple, attrs: tuple) -> None:
        self.op, self.type, self.sources, self.attrs = op, type_, sources, attrs
        self.checked_on: Any = None  # the machine whose constraints it was last checked on
        # what other layers derive from the term alone, kept on it under their own keys
        # (the cost model's Work per machine and surroundings): no lookup in a table
        self.facts: dict | None = None
        self._type_key: int | None = None
        self._exact: Term | None = None
        self._native: Term | None = None

    def attr(self, key: str) -> Any:
        return attr_of(self.attrs, key)

    @property
    def type_key(self) -> int:
        """Its type's number (type_key): equal types, one number."""
        if self._type_key is None:
            self._type_key = type_key(self.type)
        return self._type_key

    @property
    def exact_key(self) -> Term:
        """The layout-free value this term computes in exact mode."""
        return self._exact if self._exact is not None else _value_key(self, native=False)

    @property
    def native_key(self) -> Term:
        """The value in native mode: the exact key plus the layout facts that set the
        order of every sum (REDUCTION_ORDER)."""
        return self._native if self._native is not None else _value_key(self, native=True)

    def __reduce__(self):  # a copy or an unpickled term is the one interned term
        if self._exact is self:
            return _make_value, (self.op, self.type, self.sources, self.attrs)
        if self.op == "input":
            return make_input, (self.attr("name"), self.type)
        return make, (self.op, self.sources, self.attrs, self.type)

    def __repr__(self) -> str:
        return f"Term({self.op}, {self.type}, {len(self.sources)} sources, {self.attrs})"


# The interning tables hold terms weakly: a term lives as long as some kernel or cache
# uses it, or while it is among the RECENT terms made last. A chain proposes the same
# few candidates again and again, and most are refused and dropped at once: without the
# recent ones, each would be typed, checked and costed anew every time. (Plain dicts of
# KeyedRefs, as WeakValueDictionary keeps them, read without its Python-level get: a
# lookup runs for every re-typed node.)
_TERMS: dict[tuple, weakref.KeyedRef] = {}
_VALUES: dict[tuple, weakref.KeyedRef] = {}
RECENT = 10_000
_recent: list[Term | None] = [None] * RECENT
_recent_at = 0


def _forget_term(ref: weakref.KeyedRef) -> None:
    if _TERMS.get(ref.key) is ref:
        del _TERMS[ref.key]


def _forget_value(ref: weakref.KeyedRef) -> None:
    if _VALUES.get(ref.key) is ref:
        del _VALUES[ref.key]


def _interned(table: dict, key: tuple) -> Term | None:
    ref = table.get(key)
    return ref() if ref is not None else None


def _intern(table: dict, key: tuple, term: Term) -> Term:
    global _recent_at
    table[key] = weakref.KeyedRef(term, _forget_term if table is _TERMS else _forget_value,
                                  key)
    _recent[_recent_at] = term
    _recent_at = (_recent_at + 1) % RECENT
    return term


def attr_of(attrs: tuple, key: str) -> Any:
    """The value of one attribute in a (key, value) tuple, as nodes and terms hold them."""
    for k, v in attrs:
        if k == key:
            return v
    raise KeyError(key)


def canonical(value: Any) -> Any:
    """A hashable key that tells apart what Python's == merges but a kernel does not:
    0.0 and -0.0 (1/x differs), 1, 1.0 and True, and every nan (nan != nan)."""
    if isinstance(value, Const):
        return ("const", canonical(value.value))
    if isinstance(value, bool | np.bool_):
        return ("bool", bool(value))
    if isinstance(value, float | np.floating):
        return (type(value).__name__, repr(float(value)))
    if isinstance(value, tuple | list):
        return tuple(canonical(v) for v in value)
    return value


def source_keys(sources: tuple) -> tuple:
    """The hashable key of a term's sources: the terms themselves, literals canonical()."""
    for s in sources:
        if type(s) is not Term:  # a literal: made canonical
            return tuple(s if isinstance(s, Term) else canonical(s) for s in sources)
    return sources  # terms only (the common case): they key by identity as they are


# attrs_key by the identity of the attrs tuple: unchanged nodes share theirs from kernel
# to kernel, so each is made canonical once, and layouts (deep to hash) become numbers
_ATTRS_KEYS: dict[int, tuple[tuple, tuple]] = {}
_LAYOUT_NUMBERS: dict[Layout, int] = {}
ATTRS_KEYS_KEPT = 100_000


def attrs_key(attrs: tuple) -> tuple:
    """The hashable key of a node's static arguments (canonical(), layouts numbered)."""
    known = _ATTRS_KEYS.get(id(attrs))
    if known is not None and known[0] is attrs:
        return known[1]
    key = tuple((name, _layout_number(v) if isinstance(v, Layout) else canonical(v))
                for name, v in attrs)
    if len(_ATTRS_KEYS) >= ATTRS_KEYS_KEPT:
        _ATTRS_KEYS.clear()
    _ATTRS_KEYS[id(attrs)] = (attrs, key)  # holding attrs keeps its id from being reused
    return key


# Every type seen, numbered: what a type rule or a cost rule reads of a source is its
# type, so caches of their results key on type numbers, which many terms share (a term is
# new whenever anything upstream of it is; its type seldom is), and compare as ints
# rather than as nested layouts. Numbers are never reused.
_TYPE_NUMBERS: dict[Any, int] = {}


def type_key(type_: Any) -> int:
    """The number of this type (equal types have one number), made on first sight."""
    number = _TYPE_NUMBERS.get(type_)
    if number is None:
        number = _TYPE_NUMBERS[type_] = len(_TYPE_NUMBERS)
    return number


def source_types_key(sources: tuple) -> tuple:
    """What a rule reads of a term's sources, as a key: each term's type number, each
    literal canonical()."""
    return tuple([s.type_key if type(s) is Term else canonical(s) for s in sources])


def _layout_number(layout: Layout) -> tuple[str, int]:
    number = _LAYOUT_NUMBERS.get(layout)
    if number is None:
        number = _LAYOUT_NUMBERS[layout] = len(_LAYOUT_NUMBERS)
    return ("layout", number)


def lookup(op: str, sources: tuple, attrs: tuple) -> Term | None:
    """The term for (op, sources, attrs) if one exists (sources are Terms or Consts)."""
    return _interned(_TERMS, (op, source_keys(sources), attrs_key(attrs)))


def make(op: str, sources: tuple, attrs: tuple, type_: Any,
         number: int | None = None) -> Term:
    """The one term for (op, sources, attrs), made with this type if it is new
    (``number``: the type's type_key, when the caller knows it)."""
    key = (op, source_keys(sources), attrs_key(attrs))
    term = _interned(_TERMS, key)
    if term is None:
        term = _intern(_TERMS, key, Term(op, type_, sources, attrs))
        term._type_key = number
    return term


def make_input(name: str, type_: Any) -> Term:
    """The term of a kernel input: its name and its given type."""
    key = ("input", type_, (("name", name),))
    term = _interned(_TERMS, key)
    if term is None:
        term = _intern(_TERMS, key, Term("input", type_, (), (("name", name),)))
    return term


def terms_of(nodes) -> tuple[Term, ...]:
    """The terms of a node list whose types are already known (a built Kernel)."""
    terms: list[Term] = []
    for n in nodes:
        if n.op == "input":
            terms.append(make_input(n.attr("name"), n.type))
            continue
        sources = tuple(a if isinstance(a, Const) else terms[a] for a in n.args)
        terms.append(make(n.op, sources, n.attrs, n.type))
    return tuple(terms)


# ---------------------------------------------------------------------------------
# value keys
# ---------------------------------------------------------------------------------

def _make_value(op: str, type_: tuple, sources: tuple, attrs: tuple) -> Term:
    key = (op, type_, source_keys(sources), attrs_key(attrs))
    term = _interned(_VALUES, key)
    if term is None:
        term = Term(op, type_, sources, attrs)
        term._exact = term._native = term  # a value term is its own key
        _intern(_VALUES, key, term)
    return term


def _value_key(term: Term, native: bool) -> Term:
    """Compute (and cache on each term) the value key of a term and of every source that
    lacks one, sources first, without recursion: kernels may be 10,000 ops deep."""
    slot = "_native" if native else "_exact"
    stack = [term]
    while stack:
        t = stack[-1]
        if getattr(t, slot) is not None:
            stack.pop()
            continue
        missing = [s for s in t.sources if isinstance(s, Term) and getattr(s, slot) is None]
        if missing:
            stack.extend(missing)
            continue
        stack.pop()
        setattr(t, slot, _value_of(t, native, slot))
    return getattr(term, slot)


def _value_of(t: Term, native: bool, slot: str) -> Term:
    if t.op in VALUE_PRESERVING:
        return getattr(t.sources[0], slot)
    if not native and t.op == "cast" and t.attr("dtype") in FLOATS and \
            t.sources[0].type.dtype in FLOATS:
        return t.sources[0]._exact  # exact mode never rounds: a float cast moves nothing
    sources = tuple(getattr(s, slot) if isinstance(s, Term) else s for s in t.sources)
    attrs = tuple((k, v) for k, v in t.attrs if k != "layout")
    dtype = t.type.dtype
    if native and t.op in REDUCTION_ORDER:
        attrs += (("summed_axis", REDUCTION_ORDER[t.op](t)),)
    elif not native:  # f32 and bf16 are one float64 in exact mode (full's dtype too)
        dtype = _exact_dtype(dtype)
        attrs = tuple((k, _exact_dtype(v) if k == "dtype" else v) for k, v in attrs)
    return _make_value(t.op, (dtype, t.type.shape), sources, attrs)


def _exact_dtype(dtype: str) -> str:
    return "float" if dtype in FLOATS else dtype


def value_graph_id(value: Term) -> str:
    """A short stable name of a value graph (the same in every process and run): a
    digest of its ops, types, attributes and structure."""
    index: dict[int, int] = {}
    lines: list[str] = []
    stack = [value]
    while stack:
        t = stack[-1]
        if id(t) in index:
            stack.pop()
            continue
        missing = [s for s in t.sources if isinstance(s, Term) and id(s) not in index]
        if missing:
            stack.extend(missing)
            continue
        stack.pop()
        sources = [f"%{index[id(s)]}" if isinstance(s, Term) else repr(canonical(s))
                   for s in t.sources]
        attrs = [(name, canonical(v)) for name, v in t.attrs]  # no layout numbers here
        lines.append(f"{t.op} {t.type!r} ({', '.join(sources)}) {attrs!r}")
        index[id(t)] = len(index)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12]
