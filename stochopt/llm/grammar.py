"""The shapes an LLM reply may take, as constraints a server can decode with: a grammar
for LEIR kernels and for SEARCH/REPLACE edits (GBNF, gbnf.py), a JSON schema and a
grammar for transform plans.

The LEIR grammar is generated, not written out: the calls from the op table
(stochopt/leir/ops.py: each op's parameters, in order, by kind), the operators from the
ops that are spelled with one, dtypes and signatures from the type module, layout text
from the tree's levels, and the statements, expressions and literals the parser reads
(stochopt/leir/parser.py). Text this grammar accepts is a kernel the parser reads as
LEIR; what a context-free grammar cannot see is left to the parser and the checker:

- names: a name used before it is bound, or a tensor where a loop index belongs;
- values: a constant expression that folds past the parser's limits (too large, a
  loop of more than 4,096 trips, a zero range step) or more indices than a tensor has
  axes;
- types: every ConstraintError (shapes, layouts, dtypes, memory).

tests/search/test_llm_grammar.py holds the grammar and the parser to exactly that, both ways.
"""

from __future__ import annotations

import keyword

from stochopt.leir.layout import LEVELS
from stochopt.leir.ops import (
    AXIS,
    BOOL,
    BOUNDS,
    DTYPE,
    LAYOUT,
    OPS,
    PERM,
    REQUIRED,
    SHAPE,
    SUBSCRIPT,
    TENSOR,
    TENSORS,
)
from stochopt.leir.parser import MAX_INT, NAMED_CONSTANTS, RESERVED_WORDS
from stochopt.leir.types import DTYPES
from stochopt.llm.gbnf import (
    Alt,
    Chars,
    Grammar,
    Lit,
    Ref,
    alt,
    one_of,
    opt,
    plus,
    references,
    rep,
    seq,
    star,
    to_gbnf,
)

MAX_NAME_CHARS = 32         # a model decoding under the grammar cannot ramble in a name
MAX_LOOP_DEPTH = 3          # nested for-loops the grammar allows
MAX_EDITS = 4               # SEARCH/REPLACE blocks in one constrained reply
MAX_REPLACEMENT_LINES = 4
INT_DIGITS = len(str(MAX_INT)) - 1    # any literal this long is within the parser's limit
SIZE_DIGITS = 7                       # shape sizes: at most 2**24 (8 digits may exceed it)
EXPONENT_DIGITS = 2                   # floats within 1e100: never "too large"


def _r(name: str) -> Ref:
    return Ref(name)


WS = _r("ws")          # spaces on a line
GAP = _r("gap")        # spaces and line breaks inside brackets


def _listed(item, open_: str, close: str, low: int = 1, high: int | None = None,
            trailing: bool = True):
    """open item (, item)* ,? close, with gaps as Python allows inside brackets."""
    more = (None if high is None else high - 1)
    return seq(open_, GAP, item, rep(seq(GAP, ",", GAP, item), max(0, low - 1), more),
               opt(GAP, ",") if trailing else "", GAP, close)


# -- names: an identifier that is no keyword and no reserved word ------------------------

def identifier_except(words, prefix: str = "ident") -> Grammar:
    """Rules for the identifiers not in ``words`` ([A-Za-z_][A-Za-z0-9_]*), as a trie
    over the words: each rule continues a prefix of some word without ending on one."""
    rules: Grammar = {}
    words = set(words)
    prefixes = {w[:i] for w in words for i in range(len(w))}
    first, rest = "a-zA-Z_", "a-zA-Z0-9_"
    rules[f"{prefix}-tail"] = rep(Chars(rest), 0, MAX_NAME_CHARS - 2)

    def rule(p: str) -> str:   # GBNF names: letters, digits and dashes ("_" -> "-")
        return f"{prefix}-{len(p)}-" + p.replace("_", "-")

    for p in sorted(prefixes):
        children = sorted({w[len(p)] for w in words if w.startswith(p) and len(w) > len(p)})
        options = []
        if p and p not in words:
            options.append(Lit(""))
        others = _class_without(first if not p else rest, children)
        if others:
            options.append(seq(Chars(others), _r(f"{prefix}-tail")))
        for c in children:
            if p + c in prefixes:
                options.append(seq(c, _r(rule(p + c))))
            else:   # a whole word: any identifier that goes on past it
                options.append(seq(c, Chars(rest), _r(f"{prefix}-tail")))
        rules[rule(p)] = alt(*options)
    rules[prefix] = _r(rule(""))
    return rules


def _class_without(ranges: str, excluded: list[str]) -> str:
    """A character class of ``ranges`` without the characters listed."""
    chars = [c for c in map(chr, range(128)) if _in_ranges(c, ranges) and c not in excluded]
    out, i = [], 0
    while i < len(chars):   # runs of consecutive characters become ranges again
        j = i
        while j + 1 < len(chars) and ord(chars[j + 1]) == ord(chars[j]) + 1:
            j += 1
        out.append(chars[i] if i == j else f"{chars[i]}-{chars[j]}")
        i = j + 1
    return "".join(out)


def _in_ranges(c: str, ranges: str) -> bool:
    i = 0
    while i < len(ranges):
        if i + 2 < len(ranges) and ranges[i + 1] == "-":
            if ranges[i] <= c <= ranges[i + 2]:
                return True
            i += 3
        else:
            if c == ranges[i]:
                return True
            i += 1
    return False


def reserved_names() -> set[str]:
    """What can never name a value: Python's keywords (a syntax error), every op's name
    and the words LEIR gives a meaning (the parser's reserved words)."""
    return set(keyword.kwlist) | set(OPS) | set(RESERVED_WORDS)


# -- literals, signatures, layouts ----------------------------------------------------------

def _literals() -> Grammar:
    digit = Chars("0-9")
    exponent = seq(Chars("eE"), opt(Chars("-+")), rep(digit, 1, EXPONENT_DIGITS))
    mantissa = rep(digit, 1, 20)
    return {
        "int": alt("0", seq(Chars("1-9"), rep(digit, 0, INT_DIGITS - 1))),
        # divisors in folded constants: never zero
        "pos-int": seq(Chars("1-9"), rep(digit, 0, INT_DIGITS - 1)),
        "size": seq(Chars("1-9"), rep(digit, 0, SIZE_DIGITS - 1)),
        "float": alt(seq(mantissa, ".", rep(digit, 0, 20), opt(exponent)),
                     seq(".", mantissa, opt(exponent)), seq(mantissa, exponent)),
        "pos-float": seq(rep("0", 0, 3), Chars("1-9"), rep(digit, 0, 19), ".",
                         rep(digit, 0, 20), opt(exponent)),
        "number": alt(_r("float"), _r("int"), *(Lit(n) for n in NAMED_CONSTANTS)),
        "signature": seq('"', one_of(*DTYPES), "[", _r("size"),
                         rep(seq(",", _r("size")), 0, 5), "]", " @ dram", '"'),
        "dtype": seq('"', one_of(*DTYPES), '"'),
        "level": one_of(*LEVELS),
        "factor": seq(_r("size"), opt("_", _r("level"))),
        "sp": star(" "),
        "layout": seq('"', "(", _r("size"), rep(seq(",", _r("sp"), _r("size")), 0, 7), ")",
                      _r("sp"), "/", _r("sp"), "(", _r("layout-axis"),
                      rep(seq(",", _r("sp"), _r("layout-axis")), 0, 7), ")",
                      opt(_r("sp"), ";", _r("sp"), "B@[", _r("level"),
                          rep(seq(",", _r("level")), 0, len(LEVELS) - 1), "]"), '"'),
        "layout-axis": seq("(", _r("factor"), rep(seq(",", _r("sp"), _r("factor")), 0, 7),
                           ")"),
        "bool": one_of("True", "False"),
        "shape": alt(seq("(", GAP, _r("size"), GAP, ",", GAP, ")"),
                     _listed(_r("size"), "(", ")", low=2, high=8),
                     _listed(_r("size"), "[", "]", high=8)),
        "perm": alt("None", seq("(", GAP, _r("int"), GAP, ",", GAP, ")"),
                    _listed(_r("int"), "(", ")", low=2, high=8),
                    _listed(_r("int"), "[", "]", high=8)),
    }


# -- expressions: tensor-valued (t-), number-valued (n-) and static integers (i-) ----------

def _operators() -> tuple[list[str], list[str], list[str]]:
    """(additive, multiplicative, comparison) operators as the op table spells them."""
    spelled = {o.operator for o in OPS.values()
               if o.operator and o.operator != SUBSCRIPT and len(o.tensor_params) == 2}
    additive = [s for s in ("+", "-") if s in spelled]
    compare = sorted((s for s in spelled if s[0] in "<>="), key=lambda s: (-len(s), s))
    multiplicative = sorted(spelled - set(additive) - set(compare))
    return additive, multiplicative, compare


def _expressions() -> Grammar:
    add, mul, cmp = _operators()
    addop, mulop, cmpop = one_of(*add), one_of(*mul), one_of(*cmp)
    unary = [o.operator for o in OPS.values() if o.operator and len(o.tensor_params) == 1
             and o.operator != SUBSCRIPT]
    sign = one_of(*sorted(set(unary) | {"+"}))

    def chain(first, op, item):
        return seq(first, star(WS, op, WS, item))

    return {
        # a tensor expression: at least one operand is a tensor (a name, a call, a slice)
        "expr": alt(_r("t-expr"), _r("n-sum")),
        "t-expr": alt(seq(_r("t-sum"), opt(WS, cmpop, WS, _r("sum"))),
                      seq(_r("n-sum"), WS, cmpop, WS, _r("t-sum"))),
        "sum": alt(_r("t-sum"), _r("n-sum")),
        "t-sum": seq(opt(_r("n-sum"), WS, addop, WS), chain(_r("t-term"), addop, _r("term"))),
        "term": alt(_r("t-term"), _r("n-term")),
        "t-term": seq(opt(_r("n-term"), WS, mulop, WS),
                      chain(_r("t-unary"), mulop, _r("unary"))),
        "unary": alt(_r("t-unary"), _r("n-unary")),
        "t-unary": alt(seq(sign, WS, _r("t-unary")), _r("t-postfix")),
        "t-postfix": seq(_r("t-atom"), star(_r("subscript"))),
        "t-atom": alt(_r("name"), _r("call"), seq("(", GAP, _r("t-expr"), GAP, ")")),
        # numbers folded by the parser: a divisor is never zero
        "n-sum": chain(_r("n-term"), addop, _r("n-term")),
        "n-term": seq(_r("n-unary"), star(alt(seq(WS, "*", WS, _r("n-unary")),
                                              seq(WS, one_of("/", "//", "%"), WS,
                                                  alt(_r("pos-int"), _r("pos-float")))))),
        "n-unary": alt(seq(one_of("-", "+"), WS, _r("n-unary")), _r("number"),
                       seq("(", GAP, _r("n-sum"), GAP, ")")),
        # static integers: slice bounds, axes, loop bounds (loop indices are names)
        "i-expr": chain(_r("i-term"), one_of("+", "-"), _r("i-term")),
        "i-term": seq(_r("i-unary"), star(alt(seq(WS, "*", WS, _r("i-unary")),
                                              seq(WS, one_of("//", "%"), WS,
                                                  _r("pos-int"))))),
        "i-unary": alt(seq("-", WS, _r("i-unary")), _r("int"), _r("name"),
                       seq("(", GAP, _r("i-expr"), GAP, ")")),
        "subscript": _listed(_r("slice"), "[", "]", high=8),
        "slice": seq(opt(_r("i-expr")), WS, ":", WS, opt(_r("i-expr"))),
        "call": alt(*(_r(call_rule(name)) for name in sorted(_callable_ops()))),
    }


def _callable_ops() -> dict:
    """Ops a kernel calls by name (a slice is written x[a:b], never called)."""
    return {name: op for name, op in OPS.items()
            if name != "input" and not any(p.kind == BOUNDS for p in op.params)}


def call_rule(op: str) -> str:
    return "call-" + op.replace("_", "-")   # GBNF names: letters, digits and dashes


ARGUMENT = {TENSOR: "expr", TENSORS: "tensor-list", LAYOUT: "layout", DTYPE: "dtype",
            AXIS: "i-expr", BOOL: "bool", SHAPE: "shape", PERM: "perm", "number": "n-sum"}


def _calls() -> Grammar:
    """One rule per op: its parameters in the table's order, the first k positional and
    the rest as keywords (optional ones may be left out), as Python allows."""
    rules: Grammar = {"tensor-list": _listed(_r("expr"), "[", "]")}
    for name, op in _callable_ops().items():
        params = op.params
        forms = []
        for k in range(len(params) + 1):
            parts = [_r(ARGUMENT[p.kind]) for p in params[:k]]
            keywords = [(p, seq(p.name, WS, "=", WS, _r(ARGUMENT[p.kind])))
                        for p in params[k:]]
            forms.append(_arguments(parts, keywords))
        rules[call_rule(name)] = seq(f"{name}(", GAP, alt(*forms), GAP, ")")
    return rules


def _arguments(positional: list, keywords: list):
    """positional, then keywords (each optional one may be missing), comma-separated."""
    sep = seq(GAP, ",", GAP)
    out = None
    for item in positional:
        out = item if out is None else seq(out, sep, item)
    for param, item in keywords:
        present = item if out is None else seq(out, sep, item)
        if param.default is REQUIRED:
            out = present
        else:
            out = present if out is None else alt(present, out)
    return out if out is not None else Lit("")


# -- statements and the kernel ------------------------------------------------------------

def _statements(depth: int, comments: bool) -> Grammar:
    rules: Grammar = {}
    end = seq(WS, opt(_r("comment")), "\n") if comments else Lit("\n")
    for d in range(1, depth + 1):
        indent = "    " * d
        inner = [seq(indent, _r("assignment"), end), seq(indent, "pass", end)]
        if d < depth:
            inner.append(seq(indent, "for ", _r("name"), " in range(", GAP, _r("i-expr"),
                             rep(seq(GAP, ",", GAP, _r("i-expr")), 0, 2), GAP, "):", end,
                             _r(f"block-{d + 1}")))
        rules[f"statement-{d}"] = alt(*inner)
        rules[f"line-{d}"] = alt(_r(f"statement-{d}"), _r("filler")) if comments else \
            _r(f"statement-{d}")
        # a block holds at least one statement (comments alone are no block)
        rules[f"block-{d}"] = seq(star(_r("filler")), _r(f"statement-{d}"),
                                  star(_r(f"line-{d}"))) if comments else \
            plus(_r(f"statement-{d}"))
    rules["assignment"] = seq(_r("name"), WS, "=", WS, _r("t-expr"))
    rules["return"] = seq("    return ", _r("t-expr"), WS,
                          opt(_r("comment")) if comments else "")
    if comments:
        rules["comment"] = seq("#", star(Chars("^\n")))
        rules["filler"] = alt(seq(star(" "), "\n"), seq(star(" "), _r("comment"), "\n"))
    return rules


def kernel_grammar(def_line: str | None = None, comments: bool = True,
                   depth: int = MAX_LOOP_DEPTH) -> Grammar:
    """A LEIR kernel. With ``def_line`` (the kernel shown to the model), exactly that
    signature; without ``comments``, no comment or blank lines (a model decoding under
    the grammar writes statements only)."""
    rules: Grammar = {}
    rules.update(identifier_except(reserved_names(), "name"))
    rules.update(identifier_except(keyword.kwlist, "def-name"))
    rules.update(_literals())
    rules.update(_expressions())
    rules.update(_calls())
    rules.update(_statements(depth, comments))
    rules["ws"] = star(" ")
    rules["gap"] = star(Chars(" \n")) if comments else star(" ")
    params = seq(_r("name"), WS, ":", WS, _r("signature"))
    header = seq("def ", _r("def-name"), "(", GAP, opt(_listed(params, "", "")), GAP, ")",
                 WS, "->", WS, _r("signature"), WS, ":", WS)
    rules["def-line"] = Lit(def_line.rstrip("\n") + "\n") if def_line else seq(
        header, opt(_r("comment")) if comments else "", "\n")
    body = seq(opt(_r("docstring")), star(_r("line-1")), _r("return"))
    if comments:
        rules["docstring"] = seq("    ", '"""', star(Chars('^"\\')), '"""', "\n")
        rules["root"] = seq(star(_r("filler")), _r("def-line"), body,
                            alt("", seq("\n", star(_r("filler")))))
    else:
        rules["docstring"] = Lit("")
        rules["root"] = seq(_r("def-line"), body, opt("\n"))
    return _prune(rules)


def edit_grammar(kernel_text: str) -> Grammar:
    """SEARCH/REPLACE edits of the kernel shown: each SEARCH is one of its lines, copied
    exactly; a REPLACE is up to MAX_REPLACEMENT_LINES statements (the return line's ends
    with a return)."""
    rules = kernel_grammar(comments=False)
    lines = kernel_text.rstrip("\n").split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("def ")) + 1
    body = [line for line in lines[start:] if line.strip()]
    returns = [line for line in body if line.lstrip().startswith("return ")]
    others = [line for line in body if line not in returns]
    statements = rep(_r("statement-1"), 0, MAX_REPLACEMENT_LINES)
    options = []
    if others:
        rules["search-line"] = one_of(*(line + "\n" for line in others))
        options.append(seq(_r("search-line"), "=======\n", statements))
    if returns:
        rules["search-return"] = one_of(*(line + "\n" for line in returns))
        options.append(seq(_r("search-return"), "=======\n",
                           rep(_r("statement-1"), 0, MAX_REPLACEMENT_LINES - 1),
                           _r("return"), "\n"))
    rules["edit"] = seq("<<<<<<< SEARCH\n", alt(*options), ">>>>>>> REPLACE\n")
    rules["root"] = rep(_r("edit"), 1, MAX_EDITS)
    return _prune(rules)


def _prune(rules: Grammar) -> Grammar:
    """Only the rules root reaches (servers refuse or warn about unused ones)."""
    keep, todo = set(), ["root"]
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep.add(name)
        todo += sorted(references({name: rules[name]}) - keep)
    return {n: rules[n] for n in rules if n in keep}


# -- plans ----------------------------------------------------------------------------------

def plan_schema(numbers: list[int], max_steps: int) -> dict:
    """The JSON schema of a plan: {"steps": [entry numbers from the menu]}."""
    return {"type": "object",
            "properties": {"steps": {"type": "array", "items": {"type": "integer",
                                                                 "enum": list(numbers)},
                                     "minItems": 1, "maxItems": max_steps}},
            "required": ["steps"], "additionalProperties": False}


def plan_grammar(numbers: list[int], max_steps: int) -> Grammar:
    """The same plan as GBNF, for servers that take a grammar and no schema."""
    entry = Ref("entry")
    return {"root": seq('{"steps": [', entry, rep(seq(", ", entry), 0, max_steps - 1),
                        "]}"),
            "entry": Alt(tuple(Lit(str(n)) for n in numbers))}


__all__ = ["edit_grammar", "kernel_grammar", "plan_grammar", "plan_schema", "to_gbnf"]
