"""Hash-consed terms: identical subgraphs are one object; value keys see values only."""

import copy
import pickle

from stochopt.leir import parse
from stochopt.leir.ir import build
from stochopt.machine import MNCORE2

SOFTMAX = """
def softmax(x: "f32[128,1024] @ dram") -> "f32[128,1024] @ dram":
    v1 = load(x, "{load}")
    v2 = reduce_max(v1, axis=1, keepdims=True)
    v3 = v1 - v2
    v4 = exp(v3)
    v5 = reduce_sum(v4, axis=1, keepdims=True)
    v6 = v4 / v5
    return store({out})
"""
ROWS_SPREAD = "(128,1024)/((8_L2B,8_L1B,2_MAB),(1024))"
ROWS_SPREAD_ELSEWHERE = "(128,1024)/((8_L2B,16_MAB),(1024))"   # only the kept axis moves
SUMMED_AXIS_SPREAD = "(128,1024)/((8_L2B,8_L1B,2_MAB),(4_PE,256))"  # the summed axis moves


def kernel(load: str = ROWS_SPREAD, out: str = "v6"):
    return parse(SOFTMAX.format(load=load, out=out), MNCORE2)


def test_identical_subgraphs_are_one_object_whatever_the_names_and_kernels():
    a = kernel()
    b = parse(SOFTMAX.format(load=ROWS_SPREAD, out="v6").replace("v", "w"), MNCORE2)
    assert all(x is y for x, y in zip(a.terms, b.terms, strict=True))
    # within one kernel: the same op on the same sources twice is one term
    twice = parse("""
def k(x: "f32[8] @ dram") -> "f32[8] @ dram":
    a = load(x, "(8)/((8))")
    return store(exp(a) + exp(a))
""", MNCORE2)
    exps = [t for t in twice.terms if t.op == "exp"]
    assert len(exps) == 2 and exps[0] is exps[1]


def test_a_rebuilt_or_copied_kernel_has_the_same_terms():
    a = kernel()
    rebuilt = build(a.name, list(a.nodes), a.output, MNCORE2)
    assert rebuilt.terms == a.terms and rebuilt.terms[a.output] is a.terms[a.output]
    assert copy.deepcopy(a.terms[a.output]) is a.terms[a.output]
    assert pickle.loads(pickle.dumps(a.terms[a.output])) is a.terms[a.output]


def test_a_copied_or_pickled_kernel_leaves_the_memo_of_this_process_behind():
    a = kernel()
    a.memo["fact"] = object()  # what a cache derived from this kernel object
    for other in (copy.copy(a), copy.deepcopy(a), pickle.loads(pickle.dumps(a))):
        assert other == a and other.terms == a.terms and other.spec_path == a.spec_path
        assert [n.name for n in other.nodes] == [n.name for n in a.nodes]
        assert other.memo == {}


def test_literals_that_python_calls_equal_are_different_terms():
    text = """
def k(x: "f32[8] @ dram") -> "f32[8] @ dram":
    a = load(x, "(8)/((8))")
    return store(reciprocal(a + {zero}))
"""
    plus, minus = (parse(text.format(zero=z), MNCORE2) for z in ("0.0", "-0.0"))
    assert plus.exact_key is not minus.exact_key  # 1/(x + -0.0) is -inf at x = -0.0


def test_value_keys_ignore_layout_only_changes():
    a, moved = kernel(), kernel(ROWS_SPREAD_ELSEWHERE)
    assert a.terms[a.output] is not moved.terms[moved.output]  # a different kernel...
    assert a.exact_key is moved.exact_key                       # ...computing the same
    assert a.native_key is moved.native_key                     # in either mode
    relaid = parse(SOFTMAX.format(load=ROWS_SPREAD, out="v7").replace(
        "    return", f'    v7 = relayout(v6, "{ROWS_SPREAD_ELSEWHERE}")\n    return'), MNCORE2)
    assert relaid.exact_key is a.exact_key and relaid.native_key is a.native_key


def test_value_keys_change_with_values():
    a = kernel()
    for other in ("v4", "v3"):  # exp(x - max) unnormalized; x - max
        changed = kernel(out=other)
        assert changed.exact_key is not a.exact_key
        assert changed.native_key is not a.native_key
    bf16 = parse(SOFTMAX.format(load=ROWS_SPREAD, out="v8").replace(
        "    return", '    v7 = cast(v6, "bf16")\n    v8 = cast(v7, "f32")\n    return'),
        MNCORE2)
    # rounding to bf16 changes the native value; exact mode never rounds, so a float
    # cast changes nothing there (emulate: f32 and bf16 are one float64 when exact)
    assert bf16.native_key is not a.native_key
    assert bf16.exact_key is a.exact_key
    from stochopt.backend.emulate import emulate, random_inputs
    inputs = random_inputs(a)
    assert (emulate(bf16, inputs, exact=True)
            == emulate(a, inputs, exact=True)).all()


def test_only_the_native_key_sees_the_layout_of_a_summed_axis():
    a, summed = kernel(), kernel(SUMMED_AXIS_SPREAD)
    assert a.exact_key is summed.exact_key
    assert a.native_key is not summed.native_key  # the tree sums in another order


def test_value_graph_ids_are_stable_names():
    from stochopt.leir.terms import value_graph_id
    a, moved, other = kernel(), kernel(ROWS_SPREAD_ELSEWHERE), kernel(out="v4")
    assert value_graph_id(a.native_key) == value_graph_id(moved.native_key)
    assert value_graph_id(a.native_key) != value_graph_id(other.native_key)
    assert len(value_graph_id(a.native_key)) == 12


def test_value_graph_ids_are_the_same_in_another_process():
    import subprocess
    import sys

    from stochopt.leir.terms import value_graph_id
    code = ("import sys; sys.path.insert(0, 'tests/leir'); from test_terms import kernel; "
            "from stochopt.leir.terms import value_graph_id; "
            "print(value_graph_id(kernel().native_key))")
    root = __file__.rsplit("/tests/", 1)[0]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == value_graph_id(kernel().native_key)


def rule_types(nodes, output) -> list | str:
    """Every node's type from the op table's type rules alone (no term, type or refusal
    cache), or the message of the first rule that refuses: what build must agree with."""
    from stochopt.errors import StochoptError
    from stochopt.leir.ir import RETURN_RULE, infer
    from stochopt.leir.rules import Const

    types: list = []
    try:
        for n in nodes:
            if n.op == "input":
                types.append(n.type)
                continue
            ins = [a if isinstance(a, Const) else types[a] for a in n.args]
            names = [str(a) if isinstance(a, Const) else (nodes[a].name or f"%{a}")
                     for a in n.args]
            types.append(infer(n.op, ins, dict(n.attrs), MNCORE2, names))
    except StochoptError as e:
        return e.message
    last = nodes[output]
    stored = last.op == "store" or (last.op == "concat" and types[output].location == "dram")
    return types if stored else RETURN_RULE


def test_an_edit_is_retyped_from_its_first_changed_node_as_from_scratch(monkeypatch):
    """build(edited=...) keeps the unchanged prefix's types and terms; the kernel it
    gives, and the refusals it raises, are those of a build from scratch, and the types
    and refusals are the type rules' own (whatever the caches of terms, types and
    refusals already held)."""
    import random

    import stochopt.transform.edit as edit_module
    from stochopt.errors import StochoptError
    from stochopt.leir.ir import Node
    from stochopt.lower import lower
    from stochopt.spec import load_spec
    from stochopt.transform.mutate import MOVES

    def outcome(make, *args):
        try:
            return make(*args)
        except StochoptError as e:
            return f"{type(e).__name__}: {e}"

    edits: list = []

    def capture(name, nodes, output, machine, spec_path=None, edited=None):
        edits.append((list(nodes), output, edited))
        return build(name, nodes, output, machine, spec_path, edited)

    monkeypatch.setattr(edit_module, "build", capture)
    compared = refused = refused_by_rules = 0
    for spec in ("softmax", "attention_decode"):
        current = lower(load_spec(f"specs/{spec}.py"), MNCORE2)
        rng = random.Random(7)
        for _ in range(150):
            edits.clear()
            edit_module._forget_edits()  # build every edit (tests/transform/test_edit.py
            #                              checks the kernels edits remember)
            got = outcome(MOVES[rng.choice(sorted(MOVES))], current, rng, MNCORE2)
            if not edits:
                continue  # the move did not apply
            nodes, output, edited = edits[0]
            assert edited is current
            # the same nodes as fresh objects: nothing shared, everything typed anew
            fresh = [Node(n.op, n.args, n.attrs, n.type, n.name, n.line) for n in nodes]
            scratch = outcome(build, current.name, fresh, output, MNCORE2,
                              current.spec_path)
            by_rules = rule_types(fresh, output)
            if isinstance(scratch, str):
                assert got == scratch
                if isinstance(by_rules, str):  # else build's own check refused it
                    assert by_rules in got
                    refused_by_rules += 1
                refused += 1
                continue
            assert got == scratch and got.terms == scratch.terms
            assert [n.type for n in got.nodes] == [n.type for n in scratch.nodes]
            assert [n.type for n in got.nodes] == rule_types(list(got.nodes), got.output)
            compared += 1
            if got.output_type.shape == current.output_type.shape:
                current = got
    assert compared > 50 and refused > 10 and refused_by_rules > 5
