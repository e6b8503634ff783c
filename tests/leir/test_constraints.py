"""Each type, layout, location and memory rule: a kernel that breaks it is a
ConstraintError that names the problem, points at the op (line and column) and hints at
the fix. These messages go back to the LLM verbatim, so their content is pinned here.

Kernels run on the ``small`` preset: fan-outs L2B 2, L1B 2, MAB 4, PE 4.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from stochopt.errors import ConstraintError, StochoptError
from stochopt.leir import build, parse
from stochopt.machine import SMALL

ROWS = "(8,16)/((2_L2B,4_MAB),(16))"
COLS = "(8,16)/((2_L2B,4_MAB),(4_PE,4))"


def kernel_text(params: dict[str, str], body: list[str], out: str = "f32[8,16]") -> str:
    sig = ", ".join(f'{n}: "{t} @ dram"' for n, t in params.items())
    lines = [f'def kernel({sig}) -> "{out} @ dram":'] + [f"    {b}" for b in body]
    return "\n".join(lines) + "\n"


F = {"x": "f32[8,16]"}
FF = {"x": "f32[8,16]", "y": "f32[8,16]"}
LOAD_X = f'xs = load(x, "{ROWS}")'
LOAD_Y = f'ys = load(y, "{ROWS}")'
MM = {"a": "f32[8,16]", "b": "f32[16,12]"}

# id, params, body (the last line breaks the rule at `where`), message regex, hint part
CASES = [
    ("dtype-mismatch", {"x": "f32[8,16]", "y": "bf16[8,16]"}, [LOAD_X, LOAD_Y, "z = xs + ys"],
     "add\\(\\) operands have different dtypes bf16 and f32", 'cast(x, "bf16")', "xs + ys"),
    ("dram-operand", F, ["z = exp(x)"],
     "exp\\(\\) takes a pe tensor, got x @ dram", 'load it first: load(x, "...")', "exp(x)"),
    ("dram-operand-of-operator", F, [LOAD_X, "z = xs * x"],
     "mul\\(\\) takes a pe tensor, got x @ dram", "load it first", "xs * x"),
    ("layouts-differ", FF, [LOAD_X, f'ys = load(y, "{COLS}")', "z = xs + ys"],
     "layouts differ on axis 1: xs has \\(16\\), ys has \\(4_PE,4\\)",
     f'relayout(ys, "{ROWS}")', "xs + ys"),
    ("broadcast-needs-replication", {"x": "f32[8,16]", "b": "f32[1,16]"},
     [LOAD_X, 'bs = load(b, "(1,16)/((1),(16))")', "z = xs + bs"],
     "bs is broadcast along axis 0, which is spread over L2B, MAB, but bs is not "
     "replicated there", 'relayout(bs, "...; B@[L2B,MAB]")', "xs + bs"),
    ("shapes-do-not-broadcast", {"x": "f32[8,16]", "b": "f32[8,4]"},
     [LOAD_X, 'bs = load(b, "(8,4)/((2_L2B,4_MAB),(4))")', "z = xs - bs"],
     "do not broadcast", "sizes must match or be 1", "xs - bs"),
    ("matmul-k-mismatch", MM,
     ['p = load(a, "(8,16)/((2_L2B,4),(16)); B@[MAB]")',
      'q = load(b, "(16,12)/((2_L1B,8),(4_MAB,3)); B@[L2B]")', "z = p @ q"],
     "contraction axis is laid out differently: p has \\(16\\), q has \\(2_L1B,8\\)",
     "relayout one so the K axis has the same factors", "p @ q"),
    ("matmul-needs-replication", MM,
     ['p = load(a, "(8,16)/((2_L2B,4),(16))")',
      'q = load(b, "(16,12)/((16),(4_MAB,3)); B@[L2B]")', "z = matmul(p, q)"],
     "p must be replicated over MAB, where the other operand is spread",
     'relayout(p, "...; B@[MAB]")', "matmul(p, q)"),
    ("matmul-m-and-n-on-one-level", MM,
     ['p = load(a, "(8,16)/((2_L2B,4),(16))")', 'q = load(b, "(16,12)/((16),(2_L2B,6))")',
      "z = p @ q"],
     "M and N are both spread over L2B", "different levels", "p @ q"),
    ("matmul-dtypes", {"a": "f32[8,16]", "b": "bf16[16,12]"},
     ['p = load(a, "(8,16)/((8),(16))")', 'q = load(b, "(16,12)/((16),(12))")', "z = p @ q"],
     "matmul\\(\\) takes two f32 or two bf16 operands, got f32 and bf16", "cast", "p @ q"),
    ("matmul-shapes", {"a": "f32[8,16]", "b": "f32[12,16]"},
     ['p = load(a, "(8,16)/((8),(16))")', 'q = load(b, "(12,16)/((12),(16))")', "z = p @ q"],
     "shapes \\(8, 16\\) and \\(12, 16\\) do not match", "(..., K, N)", "p @ q"),
    ("reshape-across-spread-factor", F, [LOAD_X, "z = reshape(xs, (4, 32))"],
     "reshape\\(\\): \\(8, 16\\) -> \\(4, 32\\) would split or merge across the spread "
     "factor 4_MAB", "relayout first", "reshape(xs, (4, 32))"),
    ("reshape-size", F, [LOAD_X, "z = reshape(xs, (4, 4))"],
     "cannot reshape \\(8, 16\\) to \\(4, 4\\)", "same total", "reshape(xs, (4, 4))"),
    ("slice-of-spread-axis", F, [LOAD_X, "z = xs[0:4, :]"],
     "slice of axis 0, which is spread over L2B, MAB", "slice the dram tensor before load()",
     "xs[0:4, :]"),
    ("slice-of-part-of-a-block", F,
     ['xs = load(x, "(8,16)/((2,4_MAB),(16))")', "z = xs[0:2, :]"],
     "slice of axis 0, which is spread over MAB: 0:2 does not keep whole blocks of 4",
     "outermost local factor whose blocks the slice keeps whole", "xs[0:2, :]"),
    ("slice-out-of-range", F, [LOAD_X, "z = xs[:, 4:20]"],
     "slice 4:20 of axis 1 is out of range 0..16", "non-empty", "xs[:, 4:20]"),
    ("slice-empty", F, [LOAD_X, "z = xs[:, 4:4]"],
     "slice 4:4 of axis 1 is out of range", "non-empty", "xs[:, 4:4]"),
    ("concat-along-spread-axis", F, [LOAD_X, "z = concat([xs, xs], axis=0)"],
     "concat\\(\\) along axis 0, which operand 0 spreads over the tree", "relayout",
     "concat([xs, xs], axis=0)"),
    ("concat-other-axis-laid-out-differently", FF,
     [LOAD_X, f'ys = load(y, "{COLS}")', "z = concat([xs, ys], axis=0)"],
     "operand 1 differs from the first on axis 1", "relayout it to match",
     "concat([xs, ys], axis=0)"),
    ("concat-dtypes", {"x": "f32[8,16]", "y": "bf16[8,16]"},
     [LOAD_X, LOAD_Y, "z = concat([xs, ys], axis=1)"],
     "concat\\(\\) operands must share dtype and rank: operand 1 \\(ys\\) is bf16, the "
     "first \\(xs\\) f32", 'cast(ys, "f32")', "concat([xs, ys], axis=1)"),
    ("concat-replication", FF,
     ['xs = load(x, "(8,16)/((8),(16))")', 'ys = load(y, "(8,16)/((8),(16)); B@[L2B]")',
      "z = concat([xs, ys], axis=1)"],
     "operand 1 \\(ys\\) is replicated over \\[L2B\\], the first \\(xs\\) over no level",
     "relayout ys without B@", "concat([xs, ys], axis=1)"),
    ("over-fan-out", F, ['z = load(x, "(8,16)/((8_L2B),(16))")'],
     "uses 8 units of L2B, but the machine has 2 per parent", "use at most 2_L2B",
     'load(x, "(8,16)/((8_L2B),(16))")'),
    ("over-fan-out-across-axes", F, ['z = load(x, "(8,16)/((2_PE,4),(4_PE,4))")'],
     "uses 8 units of PE", "use at most 4_PE", "load("),
    ("spread-and-replicated", F, ['z = load(x, "(8,16)/((2_L2B,4),(16)); B@[L2B]")'],
     "both spreads and replicates over L2B", "either spread", "load("),
    ("layout-for-another-shape", F, [LOAD_X, 'z = relayout(xs, "(16,8)/((16),(8))")'],
     "layout \\(16,8\\)/\\(\\(16\\),\\(8\\)\\) is for shape \\(16, 8\\), but the tensor has "
     "shape \\(8, 16\\)", "write a layout for (8, 16)", "relayout("),
    ("pe-memory-per-value", {"x": "f32[64,256]"}, ['z = load(x, "(64,256)/((64),(256))")'],
     "load\\(\\) makes a value of 65536 bytes per PE, more than the 32768 bytes of PE local "
     "memory", "spread it over more of the tree", "load("),
    ("pe-memory-of-a-result", F, [LOAD_X, "z = broadcast_to(xs, (1024, 8, 16))"],
     "broadcast_to\\(\\) makes a value of 65536 bytes per PE", "spread it", "broadcast_to("),
    ("float-only-op", {"x": "i32[8,16]"}, [LOAD_X, "z = exp(xs)"],
     "exp\\(\\) takes a float tensor, got i32", 'cast it first: cast(x, "f32")', "exp(xs)"),
    ("division-of-integers", {"x": "i32[8,16]"}, [LOAD_X, "z = xs / 2"],
     "div\\(\\) takes a float tensor, got i32", "cast", "xs / 2"),
    ("bool-arithmetic", {"x": "bool[8,16]"}, [LOAD_X, "z = xs + xs"],
     "add\\(\\) does not take bool tensors", 'cast(x, "f32")', "xs + xs"),
    ("bool-reduction", {"x": "bool[8,16]"}, [LOAD_X, "z = reduce_max(xs, axis=1)"],
     "reduce_max\\(\\) does not take bool tensors", 'cast(x, "f32")', "reduce_max("),
    ("i32-literal-not-whole", {"x": "i32[8,16]"}, [LOAD_X, "z = xs * 2.5"],
     "mul\\(\\): the literal 2.5 is not an i32 value", "cast to f32 first", "xs * 2.5"),
    ("i32-literal-out-of-range", {"x": "i32[8,16]"}, [LOAD_X, "z = xs + 4294967296"],
     "the literal 4294967296 is not an i32 value", "whole number", "xs + 4294967296"),
    ("i32-full-value", F, [f'z = full((8, 16), inf, "i32", "{ROWS}")'],
     "full\\(\\): the literal inf is not an i32 value", "whole number", "full("),
    ("where-condition-not-bool", FF, [LOAD_X, LOAD_Y, "z = where(xs, xs, ys)"],
     "where\\(\\) takes a bool condition first, got xs", "compare first", "where("),
    ("only-literals", F, [LOAD_X, "z = maximum(1.0, 2.0)"],
     "maximum\\(\\) needs at least one tensor operand", None, "maximum("),
    ("reduce-axis-out-of-range", F, [LOAD_X, "z = reduce_sum(xs, axis=2)"],
     "axis 2 is out of range for rank 2", "use an axis in 0..1", "reduce_sum("),
    ("reduce-to-rank-0", {"x": "f32[16]"}, ['xs = load(x, "(16)/((16))")',
                                             "z = reduce_sum(xs, axis=0)"],
     "would leave a rank-0 tensor", "keepdims=True", "reduce_sum("),
    ("transpose-not-a-permutation", F, [LOAD_X, "z = transpose(xs, (0, 0))"],
     "\\(0, 0\\) is not a permutation of the 2 axes", "transpose(x, (1, 0))", "transpose("),
    ("broadcast-to-a-smaller-shape", F, [LOAD_X, "z = broadcast_to(xs, (8, 32))"],
     "shapes \\(8, 16\\) and \\(8, 32\\) do not broadcast", "must match or be 1",
     "broadcast_to("),
    ("load-of-a-pe-tensor", F, [LOAD_X, f'z = load(xs, "{ROWS}")'],
     "load\\(\\) takes a dram tensor", "already loaded", "load(xs"),
    ("store-of-a-dram-tensor", F, ["z = store(x)"],
     "store\\(\\) takes a pe tensor, got x @ dram", "load it first", "store(x)"),
    ("cast-to-unknown-dtype", F, [LOAD_X, 'z = cast(xs, "f64")'],
     "unknown dtype 'f64'", "f32, bf16, i32, bool", "cast("),
]


def _error(params, body, out="f32[8,16]") -> StochoptError:
    text = kernel_text(params, body + ["return store(z)"], out)
    with pytest.raises(StochoptError) as info:
        parse(text, "small")
    return info.value


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_each_broken_rule_is_a_constraint_error_that_points_and_teaches(case):
    _, params, body, message, hint, where = case
    err = _error(params, body)
    assert type(err) is ConstraintError, str(err)
    assert re.search(message, err.message), err.message
    if hint is not None:
        assert err.hint is not None and hint in err.hint, err.hint
    # the op is on the last body line (line 1 is the def) at the column of `where`
    assert err.line == len(body) + 1, str(err)
    line = f"    {body[-1]}"
    assert err.col == line.index(where) + 1, str(err)
    assert str(err).startswith(f"line {err.line}, col {err.col}: ")


def test_a_node_list_with_an_unknown_op_or_output_says_which():
    kernel = parse(kernel_text(F, [LOAD_X, "z = exp(xs)", "return store(z)"]), SMALL)
    nodes = list(kernel.nodes)
    nodes[2] = replace(nodes[2], op="cube")
    with pytest.raises(ConstraintError, match=r"node 2 \(z\) has the unknown op 'cube'") as info:
        build(kernel.name, nodes, kernel.output, SMALL)
    assert "exp" in info.value.hint
    with pytest.raises(ConstraintError, match=r"kernel output is node 9, out of range: the "
                                              r"kernel has 4 nodes \(0\.\.3\)"):
        build(kernel.name, kernel.nodes, 9, SMALL)


def test_the_hinted_fixes_make_the_kernels_legal():
    """The hints are not just words: doing what they say gives a kernel."""
    fixes = [
        (FF, [LOAD_X, f'ys = load(y, "{COLS}")', f'z = xs + relayout(ys, "{ROWS}")']),
        ({"x": "f32[8,16]", "b": "f32[1,16]"},
         [LOAD_X, 'bs = load(b, "(1,16)/((1),(16)); B@[L2B,MAB]")', "z = xs + bs"]),
        (MM, ['p = load(a, "(8,16)/((2_L2B,4),(16)); B@[MAB]")',
              'q = load(b, "(16,12)/((16),(4_MAB,3)); B@[L2B]")', "z = p @ q"]),
        (F, ['xs = load(x[0:4, :], "(4,16)/((2_L2B,2_MAB),(16))")', "z = xs"]),
        (F, [LOAD_X, 'r = relayout(xs, "(8,16)/((8),(2_L2B,4_MAB,2))")',
             "z = reshape(r, (4, 32))"]),
        ({"x": "f32[64,256]"}, ['z = load(x, "(64,256)/((2_L2B,2_L1B,4_MAB,4),(256))")']),
        ({"x": "i32[8,16]"}, [LOAD_X, 'z = cast(xs, "f32") * 2.5']),
    ]
    for params, body in fixes:
        out = "f32[4,16]" if "x[0:4" in body[0] else (
            "f32[4,32]" if "reshape" in body[-1] else (
                "f32[8,12]" if "p @ q" in body[-1] else (
                    "f32[64,256]" if "64" in params.get("x", "") else "f32[8,16]")))
        parse(kernel_text(params, body + ["return store(z)"], out), "small")


def test_a_result_that_does_not_match_the_annotation_is_an_error_at_the_return():
    err = _error(F, [LOAD_X, "z = xs"], out="bf16[8,16]")
    assert isinstance(err, ConstraintError)
    assert "returns f32[8,16] @ dram but is annotated bf16[8,16] @ dram" in err.message
    assert err.line == 4 and err.col == 5
    assert "cast or reshape" in err.hint


def test_errors_name_values_by_the_kernels_own_names():
    err = _error({"x": "f32[8,16]", "y": "bf16[8,16]"},
                 [f'activations = load(x, "{ROWS}")', f'weights = load(y, "{COLS}")',
                  'z = activations + cast(weights, "f32")'])
    assert "activations has (16)" in err.message
    assert "relayout(t1," in err.hint  # an unnamed value gets its temporary name
    assert err.line == 4


def test_the_same_kernel_is_legal_on_one_machine_and_not_on_the_other():
    text = kernel_text(F, ['xs = load(x, "(8,16)/((8_L2B),(16))")', "return store(xs)"])
    parse(text, "mncore2")
    with pytest.raises(ConstraintError, match="2_L2B"):
        parse(text, "small")


@pytest.mark.parametrize("layout, message", [
    ("(8,16)", "has no '/'"),
    ("(8,16)/((4),(16))", "axis 0 factors multiply to 4, not 8"),
    ("(8,16)/((8)(16))", "parenthesised factor list"),
    ("(8,16)/((8_L3B),(16))", "unknown level 'L3B'"),
    ("(8,16)/((8),(16)); B@[PE,PE]", "repeated"),
])
def test_a_malformed_layout_in_a_kernel_points_at_the_layout_string(layout, message):
    line = f'z = relayout(xs, "{layout}")'
    err = _error(F, [LOAD_X, line])
    assert type(err) is ConstraintError
    assert message in err.message and layout in err.message
    assert (err.line, err.col) == (3, len("    z = relayout(xs, ") + 1)


# -- stored tiles: a kernel may return stores joined in DRAM ------------------------

HALF = "(4,16)/((4_MAB),(16))"
TILE_BODY = [f'a = load(x[0:4, 0:16], "{HALF}")', f'b = load(x[4:8, 0:16], "{HALF}")',
             "s0 = store(exp(a))", "s1 = store(exp(b))"]


def test_stored_tiles_joined_in_dram_are_the_kernels_output():
    import numpy as np

    from stochopt.backend.cost import cost
    from stochopt.backend.emulate import emulate
    from stochopt.leir import render

    k = parse(kernel_text(F, TILE_BODY + ["return concat([s0, s1], axis=0)"]), "small")
    assert parse(render(k), "small") == k
    x = np.arange(128, dtype=np.float32).reshape(8, 16) / 128
    assert np.allclose(emulate(k, {"x": x}), np.exp(x))
    p = cost(k, "small")
    assert p.ops[k.output].resource is None  # the join itself moves nothing
    assert p.dram_bytes == 2 * 8 * 16 * 4   # read once, written once


@pytest.mark.parametrize("body, message", [
    (["return concat([x, x], axis=0)"], "concat\\(\\) of dram values joins only stored tiles; "
     "x is a kernel input"),
    ([*TILE_BODY, "return concat([s0, a], axis=0)"], "takes a pe tensor, got s0 @ dram"),
    ([*TILE_BODY, "z = concat([a, b], axis=1)", "return z"],
     "must return store\\(...\\) of its result, or concat\\(\\[...\\], axis\\) of stored tiles"),
    ([*TILE_BODY[:3], 'c = load(x[4:8, 0:8], "(4,8)/((4_MAB),(8))")', "s1 = store(c)",
      "return concat([s0, s1], axis=0)"], "stored tile 1 is f32\\[4,8\\]"),
], ids=["inputs", "mixed", "pe-concat-returned", "tiles-do-not-fit"])
def test_only_stored_tiles_join_in_dram(body, message):
    with pytest.raises(StochoptError, match=message):
        parse(kernel_text(F, body), "small")


def test_a_spread_axis_slices_in_whole_blocks_of_its_outermost_local_factor():
    """Each PE holds the same blocks of its rows, so keeping whole blocks is a local copy:
    the piece keeps the factors inside the block."""
    import numpy as np

    from stochopt.backend.emulate import emulate

    k = parse(kernel_text(F, ['xs = load(x, "(8,16)/((2,4_MAB),(16))")', "z = xs[4:8, 2:10]",
                              "return store(z)"], out="f32[4,8]"), "small")
    z = next(n for n in k.nodes if n.op == "slice")
    assert str(z.type.layout) == "(4,8)/((4_MAB),(8))"
    x = np.arange(128, dtype=np.float32).reshape(8, 16)
    assert np.array_equal(emulate(k, {"x": x}), x[4:8, 2:10])
