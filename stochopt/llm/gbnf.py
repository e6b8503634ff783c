"""Grammars as plain data, written out as GBNF (llama.cpp's grammar format), read back,
recognised and sampled.

A grammar is a dict of rule name -> expression; "root" is where text starts. The
expressions are five small frozen classes (Lit, Chars, Ref, Seq, Alt) and Repeat. The
LEIR grammar is built from the op table and the parser's rules (grammar.py) as such a
dict; to_gbnf writes the text a server takes, from_gbnf reads one back (a test server
enforces what it is sent), ``accepts`` recognises text and ``sample`` draws text, for
the tests that hold the grammar and the parser to the same language.

Bounded repetition is written out as nested options (``x{0,2}`` as ``(x (x)?)?``):
every GBNF dialect reads that.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from functools import cache

# -- expressions ---------------------------------------------------------------------


@dataclass(frozen=True)
class Lit:
    text: str


@dataclass(frozen=True)
class Chars:
    """One character from ranges such as "a-zA-Z_" (a leading "^" negates: any other
    printable character or newline)."""
    spec: str


@dataclass(frozen=True)
class Ref:
    name: str


@dataclass(frozen=True)
class Seq:
    items: tuple


@dataclass(frozen=True)
class Alt:
    options: tuple


@dataclass(frozen=True)
class Repeat:
    item: object
    low: int = 0
    high: int | None = None   # None: no limit


Expr = Lit | Chars | Ref | Seq | Alt | Repeat
Grammar = dict[str, Expr]


def seq(*items) -> Expr:
    parts = tuple(_expr(i) for i in items)
    return parts[0] if len(parts) == 1 else Seq(parts)


def alt(*options) -> Expr:
    parts = tuple(_expr(o) for o in options)
    return parts[0] if len(parts) == 1 else Alt(parts)


def opt(*items) -> Expr:
    return Repeat(seq(*items), 0, 1)


def star(*items) -> Expr:
    return Repeat(seq(*items), 0, None)


def plus(*items) -> Expr:
    return Repeat(seq(*items), 1, None)


def rep(item, low: int, high: int | None) -> Expr:
    return Repeat(_expr(item), low, high)


def one_of(*texts: str) -> Expr:
    """Any one of these literals."""
    return alt(*(Lit(t) for t in texts))


def _expr(x) -> Expr:
    return Lit(x) if isinstance(x, str) else x


# -- writing GBNF ----------------------------------------------------------------------

RULE_NAME = re.compile(r"[A-Za-z0-9-]+")   # llama.cpp reads no other name (it fails on "_")


def to_gbnf(grammar: Grammar) -> str:
    """The grammar as GBNF text, root first, one rule per line."""
    names = ["root"] + sorted(n for n in grammar if n != "root")
    wrong = [n for n in names if not RULE_NAME.fullmatch(n)]
    if wrong:
        raise ValueError(f"GBNF rule names are letters, digits and dashes: {wrong[:3]}")
    return "\n".join(f"{n} ::= {_write(grammar[n], top=True)}" for n in names) + "\n"


def _write(e: Expr, top: bool = False) -> str:
    if isinstance(e, Lit):
        return '"' + "".join(_ESCAPES.get(c, c) for c in e.text) + '"'
    if isinstance(e, Chars):
        return "[" + "".join(_CLASS_ESCAPES.get(c, c) for c in e.spec) + "]"
    if isinstance(e, Ref):
        return e.name
    if isinstance(e, Seq):
        text = " ".join(_write(i) for i in e.items)
        return text if top else f"({text})"
    if isinstance(e, Alt):
        text = " | ".join(_write(o, top=True) for o in e.options)
        return text if top else f"({text})"
    inner = _write(e.item)
    if (e.low, e.high) == (0, 1):
        return f"{inner}?"
    if e.high is None:
        head = " ".join([inner] * e.low)
        return f"({head} {inner}*)" if e.low > 1 else inner + ("*" if e.low == 0 else "+")
    # x{low,high}: low copies, then high - low nested options
    tail = ""
    for _ in range(e.high - e.low):
        tail = f"({inner} {tail})?" if tail else f"{inner}?"
    return "(" + " ".join([inner] * e.low + ([tail] if tail else [])) + ")"


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
_CLASS_ESCAPES = {"]": "\\]", "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


# -- reading GBNF (the subset to_gbnf writes, and the usual hand-written forms) ---------

class GrammarSyntaxError(ValueError):
    pass


def from_gbnf(text: str) -> Grammar:
    """A grammar from GBNF text; GrammarSyntaxError where it is not GBNF."""
    tokens = _tokens(text)
    rules: Grammar = {}
    i = 0
    while i < len(tokens):
        if not (tokens[i][0] == "name" and i + 1 < len(tokens) and tokens[i + 1] == ("def",
                                                                                       "::=")):
            raise GrammarSyntaxError(f"expected 'name ::=' at {tokens[i][1]!r}")
        name, i = tokens[i][1], i + 2
        expr, i = _alternatives(tokens, i)
        rules[name] = expr
    if "root" not in rules:
        raise GrammarSyntaxError("the grammar has no root rule")
    for missing in sorted(references(rules) - set(rules)):
        raise GrammarSyntaxError(f"rule {missing!r} is used but not defined")
    return rules


_TOKEN = re.compile(r'\s+|#[^\n]*|(?P<def>::=)|(?P<lit>"(?:\\.|[^"\\])*")'
                    r"|(?P<cls>\[(?:\\.|[^\]\\])*\])|(?P<name>[A-Za-z0-9-]+)"
                    r"|(?P<op>[()|*+?])|(?P<rep>\{\d+(?:,\d*)?\})")


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise GrammarSyntaxError(f"unexpected text {text[pos:pos + 20]!r}")
        if m.lastgroup:
            out.append((m.lastgroup, m.group()))
        pos = m.end()
    return out


def _alternatives(tokens, i):
    options = []
    seq_items, i = _sequence(tokens, i)
    options.append(seq_items)
    while i < len(tokens) and tokens[i] == ("op", "|"):
        seq_items, i = _sequence(tokens, i + 1)
        options.append(seq_items)
    return alt(*[seq(*s) if s else Lit("") for s in options]), i


def _sequence(tokens, i):
    items = []
    while i < len(tokens):
        kind, value = tokens[i]
        if kind == "name" and i + 1 < len(tokens) and tokens[i + 1] == ("def", "::="):
            break   # the next rule
        if kind == "op" and value in "|)":
            break
        if kind == "lit":
            item, i = Lit(_unescape(value[1:-1])), i + 1
        elif kind == "cls":
            item, i = Chars(_unescape(value[1:-1])), i + 1
        elif kind == "name":
            item, i = Ref(value), i + 1
        elif value == "(":
            item, i = _alternatives(tokens, i + 1)
            if i >= len(tokens) or tokens[i] != ("op", ")"):
                raise GrammarSyntaxError("a group is not closed")
            i += 1
        else:
            raise GrammarSyntaxError(f"unexpected {value!r}")
        while i < len(tokens) and (tokens[i][0] == "rep" or tokens[i][1] in ("*", "+", "?")
                                   and tokens[i][0] == "op"):
            item, i = _postfix(item, tokens[i][1]), i + 1
        items.append(item)
    return items, i


def _postfix(item: Expr, op: str) -> Expr:
    if op == "?":
        return Repeat(item, 0, 1)
    if op in "*+":
        return Repeat(item, 0 if op == "*" else 1, None)
    low, _, high = op[1:-1].partition(",")
    return Repeat(item, int(low), int(high) if high else (None if "," in op else int(low)))


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            out.append({"n": "\n", "t": "\t", "r": "\r"}.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def references(grammar: Grammar) -> set[str]:
    """The rule names the grammar's expressions refer to."""
    found: set[str] = set()

    def walk(e):
        if isinstance(e, Ref):
            found.add(e.name)
        elif isinstance(e, Seq):
            for x in e.items:
                walk(x)
        elif isinstance(e, Alt):
            for x in e.options:
                walk(x)
        elif isinstance(e, Repeat):
            walk(e.item)

    for e in grammar.values():
        walk(e)
    return found


# -- recognising ------------------------------------------------------------------------

def accepts(grammar: Grammar, text: str, rule: str = "root") -> bool:
    """Whether ``text`` is in the language of ``rule`` (every way of reading it is tried:
    the end positions each rule can reach from each position, memoised)."""
    return len(text) in _Recognizer(grammar, text).ends(Ref(rule), 0)


class _Recognizer:
    def __init__(self, grammar: Grammar, text: str) -> None:
        self.grammar, self.text = grammar, text
        self.memo: dict[tuple[str, int], frozenset[int]] = {}

    def ends(self, e: Expr, pos: int) -> frozenset[int]:
        text = self.text
        if isinstance(e, Lit):
            return frozenset((pos + len(e.text),)) if text.startswith(e.text, pos) \
                else frozenset()
        if isinstance(e, Chars):
            return frozenset((pos + 1,)) if pos < len(text) and \
                char_matches(e.spec, text[pos]) else frozenset()
        if isinstance(e, Ref):
            key = (e.name, pos)
            found = self.memo.get(key)
            if found is None:
                self.memo[key] = frozenset()   # left recursion reads as no match
                found = self.memo[key] = self.ends(self.grammar[e.name], pos)
            return found
        if isinstance(e, Seq):
            positions = frozenset((pos,))
            for item in e.items:
                positions = frozenset(q for p in positions for q in self.ends(item, p))
                if not positions:
                    break
            return positions
        if isinstance(e, Alt):
            return frozenset(q for o in e.options for q in self.ends(o, pos))
        # Repeat: grow the set of reachable ends one copy at a time
        reached = frozenset((pos,)) if e.low == 0 else frozenset()
        frontier, count = frozenset((pos,)), 0
        while frontier and (e.high is None or count < e.high):
            frontier = frozenset(q for p in frontier for q in self.ends(e.item, p))
            count += 1
            if count >= e.low:
                frontier = frontier - reached if e.high is None else frontier
                reached |= frontier
        return reached


@cache
def _class_ranges(spec: str) -> tuple[bool, tuple[tuple[str, str], ...]]:
    negated = spec.startswith("^")
    body = spec[1:] if negated else spec
    ranges, i = [], 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            ranges.append((body[i], body[i + 2]))
            i += 3
        else:
            ranges.append((body[i], body[i]))
            i += 1
    return negated, tuple(ranges)


def char_matches(spec: str, c: str) -> bool:
    negated, ranges = _class_ranges(spec)
    inside = any(lo <= c <= hi for lo, hi in ranges)
    return inside != negated


# -- sampling ---------------------------------------------------------------------------

PRINTABLE = [chr(c) for c in range(32, 127)] + ["\n"]


def sample(grammar: Grammar, rng: random.Random, rule: str = "root", depth: int = 24,
           repeat_mean: float = 1.5) -> str:
    """A text of ``rule`` drawn at random (see Sampler; one draw)."""
    return Sampler(grammar).draw(rng, rule, depth, repeat_mean)


class Sampler:
    """Draws texts of a grammar: alternatives uniformly, repetitions a few times; past
    ``depth`` nested rules, the way out that nests least."""

    def __init__(self, grammar: Grammar) -> None:
        self.grammar = grammar
        self.heights = _heights(grammar)

    def draw(self, rng: random.Random, rule: str = "root", depth: int = 24,
             repeat_mean: float = 1.5) -> str:
        grammar, heights = self.grammar, self.heights
        out: list[str] = []

        def draw(e: Expr, left: int) -> None:
            if isinstance(e, Lit):
                out.append(e.text)
            elif isinstance(e, Chars):
                out.append(rng.choice(_class_choices(e.spec)))
            elif isinstance(e, Ref):
                draw(grammar[e.name], left - 1)
            elif isinstance(e, Seq):
                for item in e.items:
                    draw(item, left)
            elif isinstance(e, Alt):
                options = e.options
                if left <= 0:
                    least = min(_height(o, heights) for o in options)
                    options = [o for o in options if _height(o, heights) == least]
                draw(rng.choice(options), left)
            else:
                count = e.low
                extra = e.high - e.low if e.high is not None else 8
                while left > 0 and extra > 0 and \
                        rng.random() < repeat_mean / (1 + repeat_mean):
                    count, extra = count + 1, extra - 1
                for _ in range(count):
                    draw(e.item, left)

        draw(Ref(rule), depth)
        return "".join(out)


@cache
def _class_choices(spec: str) -> list[str]:
    return [c for c in PRINTABLE if char_matches(spec, c)]


def _heights(grammar: Grammar) -> dict[str, int]:
    """How many rules deep the shallowest text of each rule goes (a fixpoint)."""
    heights = dict.fromkeys(grammar, 1 << 20)
    changed = True
    while changed:
        changed = False
        for name, e in grammar.items():
            h = 1 + _height(e, heights)
            if h < heights[name]:
                heights[name], changed = h, True
    return heights


def _height(e: Expr, heights: dict[str, int]) -> int:
    if isinstance(e, Lit | Chars):
        return 0
    if isinstance(e, Ref):
        return heights[e.name]
    if isinstance(e, Seq):
        return max((_height(i, heights) for i in e.items), default=0)
    if isinstance(e, Alt):
        return min(_height(o, heights) for o in e.options)
    return 0 if e.low == 0 else _height(e.item, heights)
