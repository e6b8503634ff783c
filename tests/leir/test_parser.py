"""The syntax: what parse() accepts, how it unrolls and folds, and the ParseError (with
line and column) for each form that is not LEIR."""

from __future__ import annotations

import re

import pytest

from stochopt.errors import ConstraintError, ParseError, StochoptError
from stochopt.leir import Const, parse, render
from stochopt.leir.ir import MAX_OPS
from stochopt.leir.parser import MAX_DEPTH, MAX_STEPS, MAX_TEXT, MAX_TRIP

HEAD = 'def kernel(x: "f32[8,16] @ dram") -> "f32[8,16] @ dram":'
LOAD = '    xs = load(x, "(8,16)/((2_L2B,4_MAB),(16))")'


def text_of(*lines: str, head: str = HEAD, load: bool = True) -> str:
    body = ([LOAD] if load else []) + [f"    {line}" for line in lines]
    return "\n".join([head, *body]) + "\n"


def ops_of(text: str) -> list[str]:
    return [n.op for n in parse(text, "small").nodes]


# ---------------------------------------------------------------------------------
# what is accepted
# ---------------------------------------------------------------------------------

def test_operators_are_the_ops():
    text = text_of("a = xs + 1.0", "b = a - xs", "c = b * a", "d = c / a", "e = -d",
                   "f = where(e > 0.0, e, 0.0)", "g = where(e >= 0.0, e, 0.0)",
                   "h = where(e < 0.0, e, 0.0)", "i = where(e <= 0.0, e, 0.0)",
                   "j = where(e == 0.0, e, 0.0)", "k = xs[:, 0:16]", "return store(j + k)")
    assert ops_of(text) == ["input", "load", "add", "sub", "mul", "div", "neg",
                            "gt", "where", "ge", "where", "lt", "where", "le", "where",
                            "eq", "where", "slice", "add", "store"]


def test_loops_unroll_with_the_index_as_a_constant():
    text = text_of("acc = xs", "for i in range(1, 7, 2):", "    acc = acc + i",
                   "return store(acc)")
    kernel = parse(text, "small")
    adds = [n for n in kernel.nodes if n.op == "add"]
    assert [n.args[1] for n in adds] == [Const(1), Const(3), Const(5)]


def test_nested_loops_and_index_arithmetic_make_static_slices():
    head = 'def kernel(x: "f32[8,16] @ dram") -> "f32[2,4] @ dram":'
    text = text_of("acc = full((2, 4), 0.0, \"f32\", \"(2,4)/((2),(4))\")",
                   "for i in range(4):", "    for j in range(2):",
                   "        t = load(x[2 * j:2 * j + 2, 4 * i:(i + 1) * 4], \"(2,4)/((2),(4))\")",
                   "        acc = acc + t", "return store(acc)", head=head, load=False)
    kernel = parse(text, "small")
    slices = [n.attr("bounds") for n in kernel.nodes if n.op == "slice"]
    assert slices == [((2 * j, 2 * j + 2), (4 * i, 4 * i + 4))
                      for i in range(4) for j in range(2)]


def test_negative_and_missing_slice_bounds_count_like_python():
    head = 'def kernel(x: "f32[8,16] @ dram") -> "f32[3,16] @ dram":'
    text = text_of('t = load(x[-5:-2], "(3,16)/((3),(16))")', "return store(t)",
                   head=head, load=False)
    assert parse(text, "small").nodes[1].attr("bounds") == ((3, 6), (0, 16))


def test_numbers_fold_at_parse_time_without_eval():
    text = text_of("y = maximum(xs * (2 * 3 + 7 // 2 - 5 % 3) + inf - (-inf) * nan, -inf)",
                   "return store(y)")
    consts = [a for n in parse(text, "small").nodes for a in n.args if isinstance(a, Const)]
    assert consts[0] == Const(7)  # 6 + 3 - 2
    assert consts[1] == Const(float("inf"))
    assert consts[2] == Const(float("nan"))  # -inf * nan, folded
    assert consts[3] == Const(float("-inf"))


def test_keywords_and_positions_give_the_same_kernel():
    positional = text_of("m = reduce_max(xs, 1, True)", "return store(xs - m)")
    keywords = text_of("m = reduce_max(keepdims=True, axis=1, x=xs)", "return store(xs - m)")
    assert parse(positional, "small") == parse(keywords, "small")


def test_spec_comment_docstrings_pass_and_returning_a_stored_name():
    text = ("# spec: specs/softmax.py\n" + '"""module docstring"""\n'
            + text_of('"""kernel docstring"""', "pass", "s = store(xs)", "return s"))
    kernel = parse(text, "small")
    assert kernel.spec_path == "specs/softmax.py"
    assert kernel.nodes[kernel.output].op == "store"
    assert render(kernel).startswith("# spec: specs/softmax.py\n")


def test_render_writes_one_op_per_line_and_reads_back():
    text = text_of("for i in range(2):", "    xs = exp(xs) * 0.5", "return store(xs)")
    kernel = parse(text, "small")
    rendered = render(kernel)
    assert rendered == (
        'def kernel(x: "f32[8,16] @ dram") -> "f32[8,16] @ dram":\n'
        '    xs = load(x, "(8,16)/((2_L2B,4_MAB),(16))")\n'
        "    t1 = exp(xs)\n"
        "    xs_1 = t1 * 0.5\n"
        "    t2 = exp(xs_1)\n"
        "    xs_2 = t2 * 0.5\n"
        "    return store(xs_2)\n")
    assert parse(rendered, "small") == kernel


# ---------------------------------------------------------------------------------
# what is not LEIR
# ---------------------------------------------------------------------------------

def _where(text: str, fragment: str) -> tuple[int, int]:
    """Line and 1-based column of the first occurrence of fragment in text."""
    for number, line in enumerate(text.split("\n"), 1):
        if fragment in line:
            return number, line.index(fragment) + 1
    raise AssertionError(fragment)


# id, text, message regex, fragment the error points at (None: only the line matters)
PARSE_ERRORS = [
    ("import-at-top", "import os\n" + text_of("return store(xs)"),
     "exactly one def and nothing else", "def kernel"),
    ("import-in-body", text_of("import os", "return store(xs)"),
     "Import statements are not part of LEIR", "import os"),
    ("from-import", text_of("from os import system", "return store(xs)"),
     "ImportFrom statements are not part of LEIR", "from os"),
    ("dunder-import", text_of("y = __import__('os')", "return store(xs)"),
     "'__import__' is not a LEIR op", "__import__"),
    ("attribute", text_of("y = xs.T", "return store(y)"),
     "Attribute expressions are not part of LEIR", "xs.T"),
    ("dunder-attribute", text_of("y = xs.__class__", "return store(y)"),
     "Attribute expressions", "xs.__class__"),
    ("method-call", text_of("y = xs.sum(axis=1)", "return store(y)"),
     "only LEIR ops can be called: no attributes, no methods", "xs.sum"),
    ("module-call", text_of("y = np.exp(xs)", "return store(y)"),
     "only LEIR ops can be called", "np.exp"),
    ("lambda", text_of("f = lambda q: q", "return store(xs)"),
     "Lambda expressions are not part of LEIR", "lambda"),
    ("while", text_of("while True:", "    xs = xs + 1.0", "return store(xs)"),
     "While statements are not part of LEIR", "while"),
    ("if", text_of("if 1:", "    pass", "return store(xs)"), "If statements", "if 1"),
    ("with", text_of("with xs:", "    pass", "return store(xs)"), "With statements", "with"),
    ("try", text_of("try:", "    pass", "except Exception:", "    pass", "return store(xs)"),
     "Try statements", "try"),
    ("global", text_of("global g", "return store(xs)"), "Global statements", "global"),
    ("augmented-assignment", text_of("xs += 1.0", "return store(xs)"),
     "AugAssign statements", "xs +="),
    ("bare-expression", text_of("exp(xs)", "return store(xs)"), "Expr statements", "exp(xs)"),
    ("nested-def", text_of("def f():", "    pass", "return store(xs)"),
     "FunctionDef statements", "def f"),
    ("comprehension", text_of("y = [q for q in range(3)]", "return store(xs)"),
     "ListComp expressions", "[q"),
    ("walrus", text_of("y = (z := xs)", "return store(xs)"), "NamedExpr expressions", "z :="),
    ("f-string", text_of("y = f'{xs}'", "return store(xs)"), "JoinedStr expressions", "f'"),
    ("conditional-expression", text_of("y = xs if 1 else xs", "return store(xs)"),
     "IfExp expressions", "xs if"),
    ("yield", text_of("y = yield xs", "return store(xs)"), "Yield expressions", "yield"),
    ("await", "async " + text_of("y = await xs", "return store(xs)"),
     "exactly one def", "async def"),
    ("unknown-name", text_of("y = exp(zz)", "return store(y)"), "unknown name 'zz'", "zz"),
    ("unknown-function", text_of("y = softmax(xs)", "return store(y)"),
     "'softmax' is not a LEIR op", "softmax"),
    ("op-not-called", text_of("y = exp", "return store(y)"), "exp is an op; call it", "exp"),
    ("name-used-before-definition", text_of("y = later + 1.0", "later = xs", "return store(y)"),
     "unknown name 'later'", "later +"),
    ("return-not-last", text_of("return store(xs)", "return store(xs)"),
     "return is allowed only as the last statement", "return"),
    ("statements-after-return", text_of("return store(xs)", "y = xs"),
     "must end with return store", "def kernel"),
    ("return-in-loop", text_of("for i in range(2):", "    return store(xs)", "y = xs",
                               "return store(xs)"),
     "return is allowed only as the last statement", "return"),
    ("no-return", text_of("y = xs"), "must end with return store", "def kernel"),
    ("return-without-store", text_of("return xs"), "must return store\\(\\.\\.\\.\\)", "return"),
    ("return-of-a-number", text_of("return 1.0"), "must return a tensor", "return"),
    ("bare-return", text_of("return"), "return needs a value", "return"),
    ("annotation-not-a-string", text_of("return store(xs)", head=HEAD.replace(
        '"f32[8,16] @ dram")', "int)", 1)), "types are written as strings", "x: int"),
    ("annotation-missing", text_of("return store(xs)", head=HEAD.replace(
        ': "f32[8,16] @ dram")', ")", 1)), "types are written as strings", "x)"),
    ("annotation-garbled", text_of("return store(xs)", head=HEAD.replace(
        "f32[8,16] @ dram", "f32 8x16", 1)), "bad type annotation 'f32 8x16'", "x:"),
    ("annotation-unknown-dtype", text_of("return store(xs)", head=HEAD.replace(
        "f32[8,16]", "f64[8,16]", 1)), "unknown dtype 'f64'", "x:"),
    ("annotation-in-pe", text_of("return store(xs)", head=HEAD.replace(
        "@ dram", "@ pe", 1)), "live in dram, not 'pe'", "x:"),
    ("annotation-absurd-shape", text_of("return store(xs)", head=HEAD.replace(
        "f32[8,16]", "f32[100000000,100000000]", 1)), "bad shape in annotation", "x:"),
    ("annotation-too-large", text_of("return store(xs)", head=HEAD.replace(
        "f32[8,16]", "f32[65536,65536]", 1)), "is too large", "x:"),
    ("annotation-spaces-for-commas", text_of("return store(xs)", head=HEAD.replace(
        "f32[8,16]", "f32[8 16]", 1)), "bad shape in annotation", "x:"),
    ("return-annotation-missing", text_of("return store(xs)", head=HEAD.replace(
        ' -> "f32[8,16] @ dram"', "")), "needs a return annotation", "def"),
    ("decorator", "@jit\n" + text_of("return store(xs)"), "decorators are not allowed", "jit"),
    ("two-defs", text_of("return store(xs)") + "def helper():\n    pass\n",
     "exactly one def and nothing else", "def helper"),
    ("default-argument", text_of("return store(xs)", head=HEAD.replace(
        '@ dram")', '@ dram" = 1)', 1)), "plain names with type annotations", "def"),
    ("star-args", text_of("return store(xs)", head=HEAD.replace("(x:", "(*x:", 1)),
     "plain names with type annotations", "def"),
    ("reserved-parameter", text_of("return store(xs)", head=HEAD.replace("(x:", "(exp:", 1)),
     "parameter name 'exp' is reserved or repeated", "exp:"),
    ("assign-to-reserved", text_of("inf = xs", "return store(xs)"),
     "cannot assign to 'inf'", "inf ="),
    ("assign-a-number", text_of("y = 2.0", "return store(xs)"), "assign tensors only", "y ="),
    ("tuple-assignment", text_of("a, b = xs, xs", "return store(xs)"),
     "assign to one plain name", "a, b"),
    ("assign-to-loop-variable", text_of("for i in range(2):", "    i = xs", "return store(xs)"),
     "cannot assign to 'i'", "i = xs"),
    ("loop-variable-shadows", text_of("for xs in range(2):", "    pass", "return store(x)"),
     "loop variable 'xs' shadows another name", "xs in"),
    ("loop-over-a-list", text_of("for i in [1, 2]:", "    pass", "return store(xs)"),
     "loops run over range\\(N\\) with constant bounds", "[1, 2]"),
    ("loop-with-else", text_of("for i in range(2):", "    pass", "else:", "    pass",
                               "return store(xs)"), "no else", "for"),
    ("loop-float-bound", text_of("for i in range(2.5):", "    pass", "return store(xs)"),
     "expected a constant integer", "2.5"),
    ("loop-tensor-bound", text_of("for i in range(xs):", "    pass", "return store(xs)"),
     "expected a constant integer", "xs)"),
    ("loop-step-zero", text_of("for i in range(0, 4, 0):", "    pass", "return store(xs)"),
     "step must not be zero", "range"),
    ("loop-too-long", text_of(f"for i in range({MAX_TRIP + 1}):", "    pass",
                              "return store(xs)"),
     f"loop of {MAX_TRIP + 1} iterations; at most {MAX_TRIP}", "range"),
    ("slice-with-step", text_of("y = xs[:, ::2]", "return store(y)"),
     "static slices a:b \\(no steps, no single indices\\)", "::2"),
    ("single-index", text_of("y = xs[0]", "return store(y)"), "no single indices", "0]"),
    ("slice-with-a-tensor-bound", text_of("y = xs[:, xs:4]", "return store(y)"),
     "expected a constant integer", "xs:4"),
    ("too-many-indices", text_of("y = xs[:, :, :]", "return store(y)"),
     "3 indices for a tensor of rank 2", "xs[:, :, :]"),
    ("slice-a-number", text_of("y = (1)[0:1]", "return store(y)"),
     "only tensors can be sliced", "(1)"),
    ("power", text_of("y = xs ** 2", "return store(y)"),
     "operator Pow is not defined on tensors", "xs **"),
    ("power-of-numbers", text_of("y = xs * 2 ** 10 ** 10", "return store(y)"),
     "operator Pow is not allowed on numbers", "10 ** 10"),  # ** binds right first
    ("shift-of-numbers", text_of("y = xs * (1 << 100000)", "return store(y)"),
     "operator LShift is not allowed on numbers", "1 <<"),
    ("floor-division-of-tensors", text_of("y = xs // 2", "return store(y)"),
     "operator FloorDiv is not defined on tensors", "xs //"),
    ("division-by-zero", text_of("y = xs * (1 // 0)", "return store(y)"),
     "division by zero in a constant expression", "1 //"),
    ("integer-too-large", text_of("y = xs * 1099511627777", "return store(y)"),
     "integer constant too large", "1099511627777"),
    ("folded-integer-too-large", text_of("y = xs * (1099511627776 * 2)", "return store(y)"),
     "integer constant too large", "1099511627776 *"),
    ("float-too-large", text_of("y = xs * 1e301", "return store(y)"),
     "number too large", "1e301"),
    ("string-operand", text_of('y = xs * "2"', "return store(y)"),
     "literal '2' cannot stand here", '"2"'),
    ("bool-operand", text_of("y = xs * True", "return store(y)"),
     "literal True cannot stand here", "True"),
    ("chained-comparison", text_of("y = xs < xs < xs", "return store(y)"),
     "compare two values with one of", "xs <"),
    ("not-equal", text_of("y = xs != xs", "return store(y)"), "compare two values", "xs !="),
    ("not", text_of("y = not xs", "return store(y)"), "UnaryOp expressions", "not"),
    ("star-call", text_of("y = exp(*[xs])", "return store(y)"),
     "\\*args and \\*\\*kwargs are not allowed", "exp("),
    ("kwargs-call", text_of("y = reduce_sum(xs, **{'axis': 1})", "return store(y)"),
     "\\*args and \\*\\*kwargs are not allowed", "reduce_sum("),
    ("too-many-arguments", text_of("y = exp(xs, xs)", "return store(y)"),
     "exp\\(\\) takes at most 1 arguments", "exp("),
    ("unknown-keyword", text_of("y = reduce_sum(xs, dim=1)", "return store(y)"),
     "reduce_sum\\(\\) has no argument 'dim'", "1)"),
    ("keyword-twice", text_of("y = reduce_sum(xs, 1, axis=1)", "return store(y)"),
     "reduce_sum\\(\\) got 'axis' twice", "1)"),
    ("missing-argument", text_of("y = reduce_sum(xs)", "return store(y)"),
     "reduce_sum\\(\\) is missing its argument 'axis'", "reduce_sum("),
    ("layout-not-a-string", text_of("y = relayout(xs, 5)", "return store(y)"),
     "relayout\\(\\) takes the layout as a string", "5)"),
    ("dtype-not-a-string", text_of("y = cast(xs, f32)", "return store(y)"),
     "cast\\(\\) takes the dtype as a string", "f32)"),
    ("keepdims-not-a-bool", text_of("y = reduce_sum(xs, axis=1, keepdims=1)",
                                    "return store(y)"),
     "reduce_sum\\(\\) takes True or False here", "1)"),
    ("shape-not-a-tuple", text_of("y = reshape(xs, 128)", "return store(y)"),
     "reshape\\(\\) takes a tuple of integers here", "128"),
    ("shape-negative", text_of("y = reshape(xs, (-1, 16))", "return store(y)"),
     "a shape is 1 to 8 positive integers", "(-1"),
    ("slice-called-by-name", text_of("y = slice(xs, ((0, 1), (0, 16)))", "return store(y)"),
     "write slices as x\\[a:b\\]", "((0"),
    ("list-for-a-tensor", text_of("y = concat(xs, axis=0)", "return store(y)"),
     "concat\\(\\) takes a list of tensors: \\[a, b\\]", "xs,"),
    ("number-for-full-value", text_of(
        'y = full((8, 16), xs, "f32", "(8,16)/((8),(16))")', "return store(y)"),
     "full\\(\\) takes a number here", "xs,"),
    ("syntax-error", text_of("y = exp(xs", "return store(y)"), "syntax error", None),
    ("bad-indentation", text_of("  y = xs", "return store(y)"), "syntax error", None),
    ("class", "class Kernel:\n    pass\n", "exactly one def and nothing else", "class"),
    ("empty", "", "exactly one def and nothing else", None),
]


@pytest.mark.parametrize("case", PARSE_ERRORS, ids=[c[0] for c in PARSE_ERRORS])
def test_forms_outside_leir_are_parse_errors_at_their_place(case):
    _, text, message, fragment = case
    with pytest.raises(ParseError) as info:
        parse(text, "small")
    err = info.value
    assert re.search(message, err.message), err.message
    if fragment is not None:
        line, col = _where(text, fragment)
        assert (err.line, err.col) == (line, col), str(err)
    elif case[0] != "empty":
        assert err.line is not None


def test_every_parse_error_of_a_statement_names_a_fix():
    err = _parse_error(text_of("while True:", "    pass", "return store(xs)"))
    assert "for i in range(N)" in err.hint
    err = _parse_error(text_of("y = xs.T", "return store(y)"))
    assert "LEIR ops" in err.hint
    err = _parse_error(text_of("y = softmax(xs)", "return store(y)"))
    assert "docs/leir.md" in err.hint


def _parse_error(text: str) -> ParseError:
    with pytest.raises(ParseError) as info:
        parse(text, "small")
    return info.value


# ---------------------------------------------------------------------------------
# the caps
# ---------------------------------------------------------------------------------

def test_a_loop_of_exactly_the_trip_cap_unrolls():
    text = text_of("acc = xs", f"for i in range({MAX_TRIP}):", "    acc = acc + 1.0",
                   "return store(acc)")
    assert ops_of(text).count("add") == MAX_TRIP


def test_more_ops_than_the_cap_after_unrolling_is_an_error():
    text = text_of("acc = xs", "for i in range(4000):", "    acc = exp(acc)",
                   "    acc = acc + 1.0", "    acc = acc * 0.5", "return store(acc)")
    with pytest.raises(ConstraintError, match=f"more than {MAX_OPS} ops"):
        parse(text, "small")


def test_loops_that_make_no_ops_are_capped_by_the_statements_they_run():
    """Without this cap, three nested empty loops would run 4096**3 times."""
    text = text_of("for i in range(4096):", "    for j in range(4096):",
                   "        for k in range(4096):", "            pass", "return store(xs)")
    with pytest.raises(ParseError, match=f"more than {MAX_STEPS} statements"):
        parse(text, "small")


def test_nesting_is_capped():
    shallow = text_of("y = " + "exp(" * 20 + "xs" + ")" * 20, "return store(y)")
    parse(shallow, "small")
    deep = text_of("y = " + "-(" * MAX_DEPTH + "xs" + ")" * MAX_DEPTH, "return store(y)")
    with pytest.raises(ParseError, match="nested too deeply"):
        parse(deep, "small")


def test_long_chains_are_capped_by_the_same_depth():
    ok = text_of("y = xs" + " + xs" * (MAX_DEPTH - 8), "return store(y)")
    assert ops_of(ok).count("add") == MAX_DEPTH - 8
    with pytest.raises(ParseError, match="nested too deeply"):
        parse(text_of("y = xs" + " + xs" * (4 * MAX_DEPTH), "return store(y)"), "small")


def test_text_size_and_nul_characters_are_refused_before_reading():
    big = text_of("return store(xs)") + "#" * MAX_TEXT
    with pytest.raises(ParseError, match=f"at most {MAX_TEXT}"):
        parse(big, "small")
    with pytest.raises(ParseError, match="NUL"):
        parse(text_of("return store(xs)").replace("xs", "x\x00s", 1), "small")


def test_every_error_is_a_stochopt_error_carrying_its_place():
    for case in PARSE_ERRORS:
        with pytest.raises(StochoptError) as info:
            parse(case[1], "small")
        if info.value.line is not None:
            assert str(info.value).startswith(f"line {info.value.line}")
