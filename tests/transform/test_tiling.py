"""tile_output: the output cut into blocks, each loaded, computed and stored on its own."""

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from stochopt import load_spec
from stochopt.backend.cost import cost
from stochopt.backend.emulate import emulate
from stochopt.errors import ConstraintError
from stochopt.leir import parse, render, typecheck
from stochopt.lower import lower
from stochopt.machine import MNCORE2, SMALL
from stochopt.transform.tiling import (
    split_stored_tile,
    tile_output,
    where_split_stored_tile,
    where_tile_output,
)
from stochopt.verify import check
from tests.strategies import (
    assert_transform_keeps_values_or_refuses,
    kernels,
)


def lowered(name: str):
    spec = load_spec(f"specs/{name}.py")
    return spec, lower(spec)


# a full check of a big spec each: matmul (the cheapest) stays in the fast tier
BIG = pytest.mark.slow


@pytest.mark.parametrize("name, site", [pytest.param("vector_add", (0, 2), marks=BIG),
                                        pytest.param("swiglu", (1, 2), marks=BIG),
                                        pytest.param("gelu", (1, 4), marks=BIG),
                                        ("matmul", (0, 2))])
def test_tiling_keeps_meaning_and_overlaps_the_dma_with_compute(name, site):
    spec, kernel = lowered(name)
    tiled = tile_output(kernel, site, MNCORE2)
    assert typecheck(tiled, MNCORE2) == tiled and parse(render(tiled)) == tiled
    assert tiled.nodes[tiled.output].op == "concat"
    assert [n.op for n in tiled.nodes].count("store") == site[1]
    assert cost(tiled).cycles < cost(kernel).cycles
    verdict = check(tiled, spec, examples=8, baseline=kernel, seed=1)
    assert verdict.equivalent, verdict.counterexample.describe()


def test_the_next_tiles_loads_are_issued_before_this_tiles_store():
    _, kernel = lowered("vector_add")
    tiled = tile_output(kernel, (0, 4), MNCORE2)
    dma = [n.op for n in tiled.nodes if n.op in ("load", "store")]
    assert dma == ["load"] * 4 + ["store", "load", "load"] * 2 + ["store", "store"]
    slices = [n.attr("bounds") for n in tiled.nodes if n.op == "slice"]
    assert slices[:2] == [((0, 262144),), ((0, 262144),)]
    assert slices[-1] == ((786432, 1048576),)


def test_what_does_not_vary_along_the_axis_is_computed_once():
    # matmul tiled along M: the weight b is loaded once, before the tiles
    spec, kernel = lowered("matmul")
    tiled = tile_output(kernel, (0, 2), MNCORE2)
    loads = [n for n in tiled.nodes if n.op == "load"]
    assert len(loads) == 3
    first = tiled.nodes[loads[0].args[0]]
    assert first.op == "input" and first.attr("name") == "b"


@pytest.mark.parametrize("name, site, why", [
    ("softmax", (1, 2), "needed both whole and in tiles"),  # the row sum needs every column
    ("rotary", (1, 2), "joins along the tiled axis"),
])
def test_work_that_mixes_the_tiled_axis_is_refused(name, site, why):
    _, kernel = lowered(name)
    with pytest.raises(ConstraintError, match=why):
        tile_output(kernel, site, MNCORE2)


def test_reductions_tile_along_the_axes_they_keep():
    text = '''def k(x: "f32[8,64] @ dram") -> "f32[64] @ dram":
    xs = load(x, "(8,64)/((2_L2B,4_MAB),(64))")
    return store(reduce_sum(xs, axis=0))
'''
    kernel = parse(text, "small")
    tiled = tile_output(kernel, (0, 2), SMALL)  # output axis 0 is x's axis 1: columns
    assert [n.attr("bounds") for n in tiled.nodes if n.op == "slice"] == [
        ((0, 8), (0, 32)), ((0, 8), (32, 64))]
    x = {"x": np.arange(512, dtype=np.float32).reshape(8, 64)}
    assert np.array_equal(emulate(tiled, x), emulate(kernel, x))
    kept = parse(text.replace('"f32[64] @ dram"', '"f32[1,64] @ dram"')
                 .replace("axis=0)", "axis=0, keepdims=True)"), "small")
    with pytest.raises(ConstraintError, match="reduces along the tiled axis"):
        tile_output(kept, (0, 2), SMALL)


def test_only_a_single_store_is_tiled():
    _, kernel = lowered("vector_add")
    assert where_tile_output(kernel) == [(0, 2), (0, 4), (0, 8)]
    assert where_tile_output(tile_output(kernel, (0, 2), MNCORE2)) == []


def _tiling_keeps_values_or_refuses_clearly(kernel, data) -> None:
    assert_transform_keeps_values_or_refuses(kernel, data, where_tile_output, tile_output,
                                             "cannot tile the output", 1e-12)


@pytest.mark.slow  # the full count; the fast tier runs the same property on 10 below
@settings(max_examples=60, deadline=None)
@given(kernel=kernels(max_ops=10), data=st.data())
def test_tiling_any_kernel_computes_the_same_values_or_refuses_clearly(kernel, data):
    _tiling_keeps_values_or_refuses_clearly(kernel, data)


@settings(max_examples=10, deadline=None)
@given(kernel=kernels(max_ops=10), data=st.data())
def test_tiling_any_kernel_keeps_values_or_refuses_quick(kernel, data):
    _tiling_keeps_values_or_refuses_clearly(kernel, data)


def test_a_stored_tile_splits_in_two_so_tiles_may_differ_in_size():
    spec, kernel = lowered("matmul")
    two = tile_output(kernel, (0, 2), MNCORE2)
    assert where_split_stored_tile(two) == [0, 1]
    three = split_stored_tile(two, 1, MNCORE2)  # the last tile peeled into two
    stores = [three.nodes[s] for s in three.nodes[three.output].args]
    assert [s.type.shape for s in stores] == [(128, 256), (64, 256), (64, 256)]
    assert typecheck(three, MNCORE2) == three and parse(render(three)) == three
    assert check(three, spec, examples=3, seed=0, machine=MNCORE2, baseline=kernel).equivalent
    # split again: four tiles of 64 rows, the same rows tile_output gives in one step
    four = split_stored_tile(three, 0, MNCORE2)
    rows = [four.nodes[four.nodes[s].args[0]] for s in four.nodes[four.output].args]
    assert [r.type.shape for r in rows] == [(64, 256)] * 4
    direct = tile_output(kernel, (0, 4), MNCORE2)
    x = {"a": np.linspace(-2, 2, 256 * 512, dtype=np.float32).reshape(256, 512),
         "b": np.linspace(2, -2, 512 * 256, dtype=np.float32).reshape(512, 256)}
    assert np.array_equal(emulate(four, x, exact=True), emulate(direct, x, exact=True))


def _split_keeps_values_or_refuses_clearly(kernel, data) -> None:
    sites = where_tile_output(kernel)
    assume(sites)
    try:
        tiled = tile_output(kernel, data.draw(st.sampled_from(sites)), SMALL)
    except ConstraintError:
        assume(False)
    assert_transform_keeps_values_or_refuses(tiled, data, where_split_stored_tile,
                                             split_stored_tile, "cannot tile stored tile",
                                             1e-12)


@settings(max_examples=10, deadline=None)
@given(kernel=kernels(max_ops=10), data=st.data())
def test_splitting_a_stored_tile_of_any_kernel_keeps_values_or_refuses_quick(kernel, data):
    _split_keeps_values_or_refuses_clearly(kernel, data)
