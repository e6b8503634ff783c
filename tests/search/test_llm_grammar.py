"""The grammars a reply is constrained by (stochopt/llm/grammar.py, gbnf.py), held to the
parser: every bundled kernel is in the LEIR grammar's language, and text drawn from the
grammar is never refused by the parser for its form, only for what a context-free grammar
cannot see (names, values past the parser's limits, types)."""

import random
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from stochopt.errors import ConstraintError, ParseError  # noqa: E402
from stochopt.leir.parser import parse  # noqa: E402
from stochopt.leir.render import render  # noqa: E402
from stochopt.llm import gbnf  # noqa: E402
from stochopt.llm.grammar import (  # noqa: E402
    edit_grammar,
    identifier_except,
    kernel_grammar,
    plan_grammar,
    plan_schema,
    reserved_names,
)
from stochopt.llm.prompt import apply_edits  # noqa: E402
from tests.tiers import QUICK_AND_FULL  # noqa: E402

BUNDLED = sorted([*ROOT.glob("docs/examples/*.leir"), *ROOT.glob("benchmarks/kernels/*.leir"),
                  *ROOT.glob("tests/verify/corpus/**/*.leir")])
SOFTMAX = (ROOT / "docs" / "examples" / "softmax_plain.leir").read_text()

# What the parser checks that a context-free grammar cannot: its messages, by kind.
NAMES = ("unknown name", "parameter name", "loop variable", "cannot assign to",
         "expected a constant integer", "is not defined on tensors", "assign tensors only",
         "only tensors can be sliced")
VALUES = ("too large", "indices for a tensor of rank", "loop of", "step must not be zero",
          "more than", "unrolls to more than", "lines; at most", "characters; at most")


@pytest.fixture(scope="module")
def leir():
    return kernel_grammar()


@pytest.mark.parametrize("full", QUICK_AND_FULL)
def test_every_bundled_kernel_is_in_the_grammar(leir, full):
    files = BUNDLED if full else BUNDLED[::15]
    assert len(BUNDLED) > 100
    refused = [str(p.relative_to(ROOT)) for p in files if not gbnf.accepts(leir, p.read_text())]
    assert not refused


@pytest.mark.parametrize("full", QUICK_AND_FULL)
def test_the_parser_refuses_grammar_text_only_for_names_values_or_types(full):
    """Samples from the grammar (names drawn from a few, so that many get past name
    lookup to the type rules): every one is read as LEIR or refused for a name, a value
    or a type, never for its form."""
    checked = {"parsed": 0, "types": 0, "names or values": 0}
    for def_line in (None, 'def k(x: "f32[8,16] @ dram") -> "f32[8,16] @ dram":'):
        grammar = kernel_grammar(def_line, comments=def_line is None)
        few_names = gbnf.Sampler({**grammar, "name": gbnf.one_of("x", "y", "a", "i")})
        rng = random.Random(7)
        for _ in range(300 if full else 10):
            text = few_names.draw(rng, depth=8)
            assert gbnf.accepts(grammar, text)   # a sub-grammar's text is the grammar's
            try:
                parse(text)
                checked["parsed"] += 1
            except ConstraintError:
                checked["types"] += 1
            except ParseError as e:
                assert any(m in e.message for m in NAMES + VALUES), (e.message, text)
                checked["names or values"] += 1
    assert checked["types"] > 0


def test_names_are_identifiers_but_no_keyword_op_or_reserved_word():
    rules = {**identifier_except(reserved_names(), "name"), "root": gbnf.Ref("name")}
    for word in ("for", "in", "if", "exp", "reduce_sum", "load", "inf", "nan", "range",
                 "True", "None"):
        assert not gbnf.accepts(rules, word), word
    for word in ("x", "exp2", "inputs", "forward", "in_", "reduce", "load_x", "_t", "Nonez"):
        assert gbnf.accepts(rules, word), word


def test_written_gbnf_reads_back_to_the_same_language_and_names_llama_cpp_reads(leir):
    text = gbnf.to_gbnf(leir)
    # llama.cpp's parser knows letters, digits and dashes in a rule name: an underscore
    # made the server fail on the grammar (and llama-cpp-python's with it)
    assert all(re.fullmatch(r"[A-Za-z0-9-]+", line.split(" ::= ")[0])
               for line in text.splitlines())
    again = gbnf.from_gbnf(text)
    assert gbnf.accepts(again, SOFTMAX) and not gbnf.accepts(again, SOFTMAX.replace(":", ";"))
    with pytest.raises(ValueError):
        gbnf.to_gbnf({"root": gbnf.Ref("bad_name"), "bad_name": gbnf.Lit("x")})
    with pytest.raises(gbnf.GrammarSyntaxError):
        gbnf.from_gbnf("root ::= ( ")


def test_bounded_repetition_is_written_as_nested_options():
    grammar = {"root": gbnf.rep("a", 1, 3)}
    text = gbnf.to_gbnf(grammar)
    assert "{" not in text
    back = gbnf.from_gbnf(text)
    assert [gbnf.accepts(back, "a" * n) for n in range(5)] == [False, True, True, True, False]


def test_the_kernel_form_is_held_to_the_shown_signature():
    kernel = parse(SOFTMAX)
    text = render(kernel)
    def_line = next(line for line in text.splitlines() if line.startswith("def "))
    grammar = kernel_grammar(def_line, comments=False)
    body = text[text.index(def_line):]
    assert gbnf.accepts(grammar, body)
    assert not gbnf.accepts(grammar, body.replace("def kernel(x", "def other(x"))
    assert not gbnf.accepts(grammar, body.replace("    return", "    # done\n    return"))


def test_an_edit_may_only_search_for_lines_of_the_kernel_shown():
    text = render(parse(SOFTMAX))
    grammar = edit_grammar(text)
    line = next(ln for ln in text.splitlines() if "reduce_max" in ln)
    edit = (f"<<<<<<< SEARCH\n{line}\n=======\n"
            f"{line.replace('reduce_max', 'reduce_min')}\n>>>>>>> REPLACE\n")
    assert gbnf.accepts(grammar, edit)
    assert "reduce_min" in apply_edits(text, edit)
    assert not gbnf.accepts(grammar, edit.replace(line, line + "  "))   # not the kernel's
    ret = next(ln for ln in text.splitlines() if "return" in ln)
    deleting_return = f"<<<<<<< SEARCH\n{ret}\n=======\n>>>>>>> REPLACE\n"
    assert not gbnf.accepts(grammar, deleting_return)   # a kernel must still end in one


def test_plan_constraints_list_only_the_menu_numbers():
    schema = plan_schema([1, 2, 5], 3)
    assert schema["properties"]["steps"]["items"]["enum"] == [1, 2, 5]
    assert schema["properties"]["steps"]["maxItems"] == 3
    grammar = plan_grammar([1, 2, 5], 3)
    assert gbnf.accepts(grammar, '{"steps": [5, 1]}')
    assert not gbnf.accepts(grammar, '{"steps": [3]}')
    assert not gbnf.accepts(grammar, '{"steps": [1, 1, 1, 1]}')
