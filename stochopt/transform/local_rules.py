"""The local rewrite rules, as (pattern -> replacement) entries (pattern.py).

Each entry is the algebra it implements (its first line, also shown by docs/search.md),
a pattern over the DAG, an optional condition and the replacement, built from what the
pattern bound: ``m.x`` is the node (or literal) the pattern named ``x``. A bound node
given back as the replacement takes the root's place for its readers; ``new(...)`` and
``m.x.but(...)`` build new nodes. tests/transform prove each keeps meaning.
"""

from __future__ import annotations

from stochopt.leir.ops import unary_elementwise
from stochopt.leir.rules import Const
from stochopt.transform.pattern import Bound, Local, Match, New, Pat, new

# unary elementwise ops (one tensor argument): movement commutes with them
UNARY = unary_elementwise()
MOVES = ("relayout", "transpose", "reshape")
# how much of a value each dtype keeps: a cast to a dtype at least as precise is exact
PRECISION = {"bool": 0, "bf16": 1, "i32": 2, "f32": 3}

X, Y, A, B = Pat.tensor("x"), Pat.tensor("y"), Pat.tensor("a"), Pat.tensor("b")


def _nonzero(c: Const) -> bool:
    return c.value not in (0, 0.0)


def scaled(x: Pat, name: str, c: str = "c") -> Pat:
    """x * c, c * x or x / c (c a literal, not zero for /): a tensor times a number."""
    return Pat.any(Pat("mul", x, Pat.const(c)), Pat("mul", Pat.const(c), x),
                   Pat("div", x, Pat.const(c, where=_nonzero)), name=name)


def factor(scale: Bound, c: Const) -> float:
    """The number a ``scaled`` node multiplies by: c, or 1/c for a division."""
    return float(c.value) if scale.op == "mul" else 1.0 / float(c.value)


def _drops_a_widening_pair(m: Match) -> bool:
    dtype = m.x.type.dtype
    return dtype == m.outer.attr("dtype") and dtype in ("bf16", "f32") \
        and PRECISION[m.inner.attr("dtype")] >= PRECISION[dtype]


def _folds_to_a_writable_number(m: Match) -> bool:
    # a folded literal must stay a number LEIR can write back (|c| <= 1e300)
    return 0 < abs(factor(m.outer, m.c2) * factor(m.inner, m.c1)) <= 1e300


def _scale_smaller_operand(m: Match) -> New:
    # a new matmul reads the scaled operand: other readers of a @ b still read it unscaled
    c = Const(factor(m.s, m.c))
    if m.a.type.numel <= m.b.type.numel:
        return new("matmul", new("mul", m.a, c, like=m.mm), m.b, like=m.mm)
    return new("matmul", m.a, new("mul", m.b, c, like=m.mm), like=m.mm)


def _both_broadcast(m: Match) -> bool:
    size = m.outer.type.numel
    return m.inner.op == m.outer.op and m.b1.type.numel < size and m.b2.type.numel < size


# The order is the order of RULES (rewrite.py), which docs/search.md follows.
MOVEMENT = [
    Local("fold_relayout_into_load", "relayout(load(x, A), B) -> load(x, B)",
          Pat("relayout", Pat("load", X, name="load"), name="r"),
          lambda m: m.load.but(layout=m.r.attr("layout"))),
    Local("fold_relayout_pair", "relayout(relayout(x, A), B) -> relayout(x, B): one move "
          "in place of two",
          Pat("relayout", Pat("relayout", X, name="inner"), name="outer"),
          lambda m: m.outer.but(m.x)),
    Local("drop_noop_relayout", "relayout(x, layout_of(x)) -> x",
          Pat("relayout", X, name="r"), lambda m: m.x,
          when=lambda m: m.x.type.layout == m.r.attr("layout")),
    Local("hoist_movement", "m(f(x)) -> f(m(x)) for m in relayout, transpose, reshape and "
          "unary elementwise f: move the narrower dtype, and let casts meet the matmul",
          Pat(MOVES, Pat(UNARY, Pat.var("x"), name="f"), name="m"),
          lambda m: m.f.but(m.m.but(m.x, name=""))),
]

DTYPES = [
    Local("drop_widening_cast_pair", "cast(cast(x, wider), dtype_of(x)) -> x (exact)",
          Pat("cast", Pat("cast", X, name="inner"), name="outer"), lambda m: m.x,
          when=_drops_a_widening_pair),
    Local("bf16_matmul_operands", "matmul(cast(a16, f32), cast(b16, f32)) -> matmul(a16, b16): "
          "bf16 products are exact in f32, the MAU runs 8x faster",
          Pat("matmul", Pat("cast", A), Pat("cast", B), name="mm"),
          lambda m: m.mm.but(m.a, m.b),
          when=lambda m: m.a.type.dtype == m.b.type.dtype == "bf16"),
    Local("round_matmul_operands_to_bf16", "matmul(a32, b32) -> matmul(cast(a32, bf16), "
          "cast(b32, bf16)): lossy; the precision check decides",
          Pat("matmul", A, B, name="mm"),
          lambda m: m.mm.but(new("cast", m.a, like=m.a, dtype="bf16"),
                             new("cast", m.b, like=m.b, dtype="bf16")),
          when=lambda m: m.mm.type.dtype == "f32" and m.a.type.dtype == "f32"),
]

ARITHMETIC = [
    Local("multiply_by_reciprocal", "x / y -> x * reciprocal(y) when y is broadcast (smaller)",
          Pat("div", X, Y, name="d"),
          lambda m: m.d.but(m.x, new("reciprocal", m.y, like=m.y), op="mul"),
          when=lambda m: m.y.type.numel < m.d.type.numel),
    Local("divide_by_constant_as_multiply", "x / c -> x * (1/c)",
          Pat("div", Pat.var("x"), Pat.const("c", where=_nonzero), name="d"),
          lambda m: m.d.but(m.x, Const(1.0 / m.c.value), op="mul")),
    Local("fold_scales", "(x * c1) * c2 -> x * (c1*c2)",
          scaled(scaled(X, "inner", "c1"), "outer", "c2"),
          lambda m: m.outer.but(m.x, Const(factor(m.inner, m.c1) * factor(m.outer, m.c2)),
                                op="mul"),
          when=_folds_to_a_writable_number),
    Local("scale_before_matmul", "(a @ b) * c -> (a * c) @ b: scale the smaller operand",
          scaled(Pat("matmul", A, B, name="mm"), "s"), _scale_smaller_operand),
    Local("reassociate_broadcasts", "(x + b1) + b2 -> x + (b1 + b2) (also *): combine the "
          "two small operands first",
          Pat(("add", "mul"), Pat(("add", "mul"), X, Pat.tensor("b1"), name="inner"),
              Pat.tensor("b2"), name="outer"),
          lambda m: m.outer.but(m.x, new(m.outer.op, m.b1, m.b2, like=m.b1)),
          when=_both_broadcast),
]
