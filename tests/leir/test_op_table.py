"""The op table is the one place an op is defined: every entry carries every rule a stage
needs, and an op added to the table alone parses, types, emulates, costs, renders,
tiles, mutates and screens."""

from __future__ import annotations

import inspect
import re
from functools import partial
from math import ceil
from pathlib import Path

import numpy as np
import pytest

from stochopt.backend.bound import least_op_cycles
from stochopt.backend.emulate import emulate, random_inputs
from stochopt.backend.node_work import op_work
from stochopt.errors import ConstraintError, ParseError
from stochopt.leir import parse, render, tiling_rules, typecheck
from stochopt.leir import rules as R
from stochopt.leir.cost_rules import VectorCost, Work, lanes
from stochopt.leir.ops import (
    ELEMENTWISE,
    OPS,
    SUBSCRIPT,
    TENSOR,
    Op,
    Param,
    layout_ops,
    operator_op,
    register,
    siblings,
    unary_elementwise,
    unregister,
)
from stochopt.leir.parser import _SYMBOLS, is_reserved
from stochopt.leir.tiling_rules import NotTiled
from stochopt.machine import SMALL
from stochopt.spec import spec, tensor
from stochopt.transform.tiling import tile_output
from stochopt.verify import ScreeningSet, check

# ---------------------------------------------------------------------------------
# one application of every op: adding an op to the table means adding it here
# ---------------------------------------------------------------------------------

HEADER = ('def kernel(x: "f32[8,16] @ dram", b: "bool[8,16] @ dram", '
          'y: "f32[16,8] @ dram") -> "{out} @ dram":')
PRELUDE = ['xs = load(x, "(8,16)/((2_L2B,4),(16))")',  # rows spread: a layout to follow
           'bs = load(b, "(8,16)/((2_L2B,4),(16))")',
           'xl = load(x, "(8,16)/((8),(16))")',         # all local: slices, matmul, reshape
           'ys = load(y, "(16,8)/((16),(8))")']
F = "f32[8,16]"
# op -> (the expression that applies it, the kernel's result type)
EXAMPLES = {
    **{name: (f"{name}(xs)", F)
       for name in ("abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "tanh")},
    "neg": ("-xs", F),
    "add": ("xs + 1.0", F), "sub": ("xs - xs", F), "mul": ("xs * xs", F),
    "div": ("xs / 3.0", F), "maximum": ("maximum(xs, 0.0)", F),
    "minimum": ("minimum(xs, 0.0)", F),
    "gt": ("xs > 0.0", "bool[8,16]"), "ge": ("xs >= 0.0", "bool[8,16]"),
    "lt": ("xs < 0.0", "bool[8,16]"), "le": ("xs <= 0.0", "bool[8,16]"),
    "eq": ("xs == 1.0", "bool[8,16]"),
    "where": ("where(bs, xs, 0.0)", F),
    "cast": ('cast(xs, "i32")', "i32[8,16]"),
    "reduce_sum": ("reduce_sum(xs, axis=1, keepdims=True)", "f32[8,1]"),
    "reduce_max": ("reduce_max(xs, axis=1, keepdims=True)", "f32[8,1]"),
    "reduce_min": ("reduce_min(xs, axis=0)", "f32[16]"),
    "matmul": ("xl @ ys", "f32[8,8]"),
    "load": ('load(x, "(8,16)/((2_L1B,4),(16))")', F),
    "store": ("xs", F),  # every example stores its result
    "relayout": ('relayout(xs, "(8,16)/((8),(16))")', F),
    "transpose": ("transpose(xs)", "f32[16,8]"),
    "reshape": ("reshape(xl, (128,))", "f32[128]"),
    "slice": ("xl[0:4, :]", "f32[4,16]"),
    "concat": ("concat([xl, xl], axis=1)", "f32[8,32]"),
    "broadcast_to": ("broadcast_to(reduce_sum(xl, axis=1, keepdims=True), (8, 16))", F),
    "full": ('full((8, 16), 2.0, "f32", "(8,16)/((8),(16))")', F),
}


def example_text(name: str) -> str:
    expression, out = EXAMPLES[name]
    body = PRELUDE + [f"r = {expression}", "return store(r)"]
    return "\n".join([HEADER.format(out=out)] + [f"    {line}" for line in body]) + "\n"


# ---------------------------------------------------------------------------------
# every entry holds every rule
# ---------------------------------------------------------------------------------

TILING_RULES = {f for _, f in inspect.getmembers(tiling_rules, inspect.isfunction)
                if f.__module__ == tiling_rules.__name__ and f is not tiling_rules.broadcast_axis}


def test_every_op_of_the_table_has_an_example_here():
    assert set(EXAMPLES) == set(OPS), "add the new op's one-line application to EXAMPLES"


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_entry_holds_every_rule(name):
    op = OPS[name]
    assert op.name == name and op.doc
    assert all(isinstance(p, Param) for p in op.params)
    for rule in (op.infer, op.evaluate, op.cost):
        assert callable(rule), f"{name}: a rule is missing"
    assert op.tiling in TILING_RULES, f"{name}: its tiling rule is not one of tiling_rules'"
    assert op.native is None or callable(op.native)
    if op.kind == ELEMENTWISE:  # the reachable bound reads the per-element price here
        assert isinstance(op.cost, VectorCost) and op.cost.cycles_per_elem >= 1
    if op.operator is not None:  # a spelling the parser reads, and reads as this op
        assert op.operator in set(_SYMBOLS.values()) | {SUBSCRIPT}
        assert operator_op(op.operator, len(op.tensor_params)) == name
    assert not op.written_as_operator or op.operator
    assert is_reserved(name)


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_op_parses_types_renders_emulates_costs_and_tiles(name):
    kernel = parse(example_text(name), SMALL)
    at = [i for i, n in enumerate(kernel.nodes) if n.op == name]
    assert at, f"the example of {name} does not apply it"
    assert typecheck(kernel, SMALL) == kernel and parse(render(kernel), SMALL) == kernel
    inputs = random_inputs(kernel, seed=1)
    native, exact = emulate(kernel, inputs), emulate(kernel, inputs, exact=True)
    assert native.shape == exact.shape == kernel.output_type.shape
    works = op_work(kernel, SMALL)
    for i in at:
        node = kernel.nodes[i]
        assert isinstance(works[i], Work)
        operands = [kernel.nodes[j].type for j in node.inputs]
        for axis in range(len(node.type.shape)):
            try:
                axes = OPS[name].tiling(operands, node.type, dict(node.attrs), axis)
            except NotTiled as refusal:
                assert str(refusal)
                continue
            assert len(axes) in (0, len(operands))
            assert all(a is None or 0 <= a < len(t.shape)
                       for a, t in zip(axes, operands, strict=False))
    assert least_op_cycles(name, SMALL) >= 0


def test_the_machine_docs_price_every_elementwise_op_as_its_entry_does():
    text = (Path(__file__).resolve().parents[2] / "docs" / "machine.md").read_text()
    documented = {name: int(cycles) for cycles, names in
                  re.findall(r"^\| (\d+) \| `([a-z_ ]+)` \|$", text, re.M)
                  for name in names.split()}
    assert documented == {op.name: op.cost.cycles_per_elem for op in OPS.values()
                          if op.kind == ELEMENTWISE}


def test_the_derived_sets_are_the_ones_the_transforms_kept_by_hand():
    assert unary_elementwise() == {"cast", "exp", "neg", "abs", "tanh", "sqrt", "reciprocal",
                                   "rsqrt", "log"}
    assert layout_ops() == ("load", "relayout", "full")
    assert operator_op("-", 1) == "neg" and operator_op("-", 2) == "sub"
    assert operator_op("@", 2) == "matmul" and operator_op(SUBSCRIPT, 1) == "slice"
    assert operator_op("**", 2) is None


# ---------------------------------------------------------------------------------
# a made-up op, added to the table only, goes through every stage
# ---------------------------------------------------------------------------------

CUBE_CYCLES = 2
CUBE = Op("cube", ELEMENTWISE, (Param("x", TENSOR),),
          "cube(x): x**3, elementwise; pe only; same dtype, shape and layout as x",
          partial(R.elementwise, float_only=True), lambda args, attrs: args[0] ** 3,
          VectorCost(CUBE_CYCLES), tiling_rules.broadcasting)

CUBE_KERNEL = '''def kernel(x: "f32[64,16] @ dram") -> "f32[64,16] @ dram":
    xs = load(x, "(64,16)/((2_L2B,2_L1B,16),(16))")
    return store(cube(xs) + 1.0)
'''


@pytest.fixture
def cube():
    register(CUBE)
    try:
        yield CUBE
    finally:
        unregister("cube")


@spec(inputs={"x": tensor("f32", (64, 16), low=-2.0, high=2.0)})
def cube_plus_one(x):
    return x ** 3 + 1.0


def test_a_made_up_op_is_unknown_until_it_is_registered():
    with pytest.raises(ParseError, match="'cube' is not a LEIR op"):
        parse(CUBE_KERNEL, SMALL)


def test_a_made_up_op_parses_types_renders_and_emulates(cube):
    kernel = parse(CUBE_KERNEL, SMALL)
    assert [n.op for n in kernel.nodes] == ["input", "load", "cube", "add", "store"]
    assert "cube(xs)" in render(kernel) and parse(render(kernel), SMALL) == kernel
    assert is_reserved("cube")
    with pytest.raises(ConstraintError, match=r"cube\(\) takes a float tensor"):
        parse(CUBE_KERNEL.replace("cube(xs)", 'cube(cast(xs, "i32"))').replace(
            "+ 1.0", ""), SMALL)
    x = random_inputs(kernel, seed=3)["x"]
    assert np.array_equal(emulate(kernel, {"x": x}), (x ** 3 + np.float32(1.0)))
    assert np.array_equal(emulate(kernel, {"x": x}, exact=True),
                          x.astype(np.float64) ** 3 + 1.0)


def test_a_made_up_op_costs_by_its_own_entry(cube):
    kernel = parse(CUBE_KERNEL, SMALL)
    node = kernel.nodes[2]
    local = node.type.layout.local_elements()
    want = ceil(local / lanes(SMALL, node.type)) * CUBE_CYCLES + SMALL.latency["vector"]
    assert op_work(kernel, SMALL)[2].stages == (("vector", want),)
    assert least_op_cycles("cube", SMALL) == CUBE_CYCLES + SMALL.latency["vector"]


def test_a_made_up_op_tiles_and_mutates_into_its_siblings(cube):
    kernel = parse(CUBE_KERNEL, SMALL)
    tiled = tile_output(kernel, (0, 2), SMALL)
    assert [n.op for n in tiled.nodes].count("cube") == 2
    x = random_inputs(kernel, seed=4)
    assert np.array_equal(emulate(tiled, x, exact=True), emulate(kernel, x, exact=True))
    assert "exp" in siblings("cube") and "cube" in siblings("exp")
    assert "cube" in unary_elementwise()


def test_a_made_up_op_screens_and_verifies(cube):
    kernel = parse(CUBE_KERNEL, SMALL)
    screening = ScreeningSet(cube_plus_one, kernel, SMALL)
    assert screening.error(kernel) == 0.0
    wrong = parse(CUBE_KERNEL.replace("cube(xs)", "xs * xs"), SMALL)
    assert screening.error(wrong) > 0.0
    assert check(kernel, cube_plus_one, examples=4, machine=SMALL, baseline=kernel).equivalent


def test_removing_the_made_up_op_forgets_it_everywhere(cube):
    unregister("cube")
    try:
        assert "cube" not in siblings("exp") and not is_reserved("cube")
        assert "cube" not in unary_elementwise()
    finally:
        register(CUBE)  # the fixture removes it again
