"""Focused behaviour of the lowering: how it splits what does not fit, lays out reshapes,
promotes bools, and checks the spec's declared output."""

from __future__ import annotations

from collections import Counter
from math import prod

import pytest

from stochopt.backend.cost import cost
from stochopt.leir import Builder, TensorType
from stochopt.leir.cost_rules import contiguous_run
from stochopt.leir.types import itemsize
from stochopt.lower import lower
from stochopt.lower.layouts import reshape_layout, reshape_pieces
from stochopt.lower.lowering import LoweringError
from stochopt.machine import load_machine
from stochopt.spec import load_spec

MNCORE2 = load_machine("mncore2")


def _ops(kernel) -> Counter:
    return Counter(n.op for n in kernel.nodes)


def test_a_matmul_too_big_for_one_piece_sums_products_of_k_slices(load, checked):
    spec = load('''
        @spec(inputs={"a": tensor("bf16", (512, 1024), low=-1, high=1),
                      "b": tensor("bf16", (1024, 512), low=-1, high=1)})
        def f(a, b):
            return a @ b
        ''')
    result = checked(spec, seeds=(0,))
    ops = _ops(result.kernel)
    assert ops["matmul"] >= 2 and ops["add"] == ops["matmul"] - 1
    # each slice is cut from the dram input, so no PE ever holds a whole operand
    slices = [n for n in result.kernel.nodes if n.op == "slice"]
    assert slices and all(n.type.location == "dram" for n in slices)


def test_a_matmul_that_fits_in_one_piece_is_one_matmul(load):
    spec = load('''
        @spec(inputs={"a": tensor("bf16", (256, 512)), "b": tensor("bf16", (512, 256))})
        def f(a, b):
            return a @ b
        ''')
    assert _ops(lower(spec))["matmul"] == 1


def test_k_slices_of_a_transposed_input_stay_dram_slices(load, checked):
    spec = load('''
        @spec(inputs={"q": tensor("bf16", (512, 1024), low=-1, high=1),
                      "k": tensor("bf16", (512, 1024), low=-1, high=1)})
        def f(q, k):
            return q @ k.T
        ''')
    kernel = checked(spec, seeds=(0,)).kernel
    assert _ops(kernel)["matmul"] >= 2
    loads = [n for n in kernel.nodes if n.op == "load"]
    assert all(kernel.nodes[n.args[0]].op == "slice" for n in loads)


@pytest.mark.parametrize("src, dst, pieces", [
    ((384, 64), (8, 48, 64), [[(8, True), (48, True)], [(64, True)]]),
    ((2, 3, 4), (24,), [[(2, True)], [(3, True)], [(4, True)]]),
    ((6, 4), (4, 6), [[(2, True), (3, False)], [(4, False)]]),
    ((1, 37), (37,), [[], [(37, True)]]),
])
def test_reshape_pieces_are_whole_in_both_shapes(src, dst, pieces):
    assert reshape_pieces(src, dst) == pieces
    for axis, cut in zip(src, reshape_pieces(src, dst), strict=True):
        assert prod(size for size, _ in cut) == axis


@pytest.mark.parametrize("src, dst", [((384, 64), (8, 48, 64)), ((8, 48, 64), (384, 64)),
                                      ((6, 4), (4, 6)), ((4096,), (64, 64)),
                                      ((16, 1, 32), (512,))])
def test_reshape_layout_is_spread_and_reshapes_without_a_relayout(src, dst):
    layout = reshape_layout(src, dst, MNCORE2.fanout, 4, 512)
    b = Builder(MNCORE2)
    x = b.input("x", TensorType("f32", src, "dram"))
    y = b.add("reshape", [b.add("load", [x], {"layout": layout})], {"shape": dst})
    assert b.nodes[y].type.shape == dst
    if prod(src) >= 4096:
        assert layout.local_elements() * 4 <= 512


def test_reshape_back_from_a_batched_matmul_stays_spread(load, checked):
    spec = load('''
        @spec(inputs={"x": tensor("bf16", (8, 48, 64), low=-1, high=1),
                      "w": tensor("bf16", (64, 64), low=-1, high=1)})
        def f(x, w):
            return np.tanh(x) @ w.T + x
        ''')
    result = checked(spec, seeds=(0,))
    assert result.peak_bytes < 4096  # 24576 elements over 4096 PEs: no PE holds a block


def test_bool_operands_of_arithmetic_are_cast_to_f32(load, checked):
    spec = load('''
        @spec(inputs={"x": tensor("f32", (16, 16)), "m": tensor("bool", (16, 16))})
        def f(x, m):
            return x * m + (x > 0)
        ''')
    kernel = checked(spec).kernel
    casts = [n for n in kernel.nodes if n.op == "cast" and n.attr("dtype") == "f32"]
    assert {kernel.nodes[n.args[0]].type.dtype for n in casts} == {"bool"}


def test_declared_output_shape_must_match_the_reference(load):
    spec = load('''
        @spec(inputs={"x": tensor("f32", (16, 8))}, output=tensor("f32", (16, 8)))
        def f(x):
            return x.sum(axis=1)
        ''')
    with pytest.raises(LoweringError, match=r"declares output=tensor\(..., \(16, 8\)\)") as info:
        lower(spec)
    assert 'tensor("f32", (16,))' in str(info.value) and info.value.source == spec.path


def test_integer_index_is_a_slice_then_a_reshape(load, checked):
    spec = load('''
        @spec(inputs={"x": tensor("f32", (4, 8, 16))})
        def f(x):
            return x[1, :, -1] * 2.0
        ''')
    kernel = checked(spec).kernel
    assert kernel.output_type.shape == (8,)
    assert _ops(kernel)["slice"] == 1 and _ops(kernel)["reshape"] == 1


@pytest.mark.parametrize("name", ["matmul", "attention_decode", "mla_decode"])
def test_matmul_operands_are_loaded_in_runs_of_at_least_a_burst(name):
    """The matmul plan is scored with its operands' loads: a plan that deals a DRAM row to
    many PEs (runs shorter than a burst, a request per few bytes) loses to one that
    reads whole bursts (docs/machine.md, section 2)."""
    kernel = lower(load_spec(f"specs/{name}.py"), MNCORE2)
    for n in kernel.nodes:
        if n.op == "load":
            run = contiguous_run(n.type.layout, None) * itemsize(n.type.dtype)
            assert run >= min(MNCORE2.dram_burst_bytes, n.type.nbytes), (n.name, run)


def test_an_operand_is_moved_on_chip_only_when_that_is_cheaper_than_reading_it_again():
    """mla_decode reads c_kv for two matmuls in two layouts: each move of it costs less
    than a fresh load (the lowering loads it again when a relayout of its f32 copy across
    the L2Bs would cost more, as it once did: 12,384 cycles against 6,176)."""
    kernel = lower(load_spec("specs/mla_decode.py"), MNCORE2)
    profile = cost(kernel, MNCORE2)
    loads = [op.cycles for n, op in zip(kernel.nodes, profile.ops, strict=True)
             if n.op == "load" and n.type.shape == (4096, 512)]
    moves = [op.cycles for n, op in zip(kernel.nodes, profile.ops, strict=True)
             if n.op == "relayout" and n.type.shape == (4096, 512)]
    assert 1 <= len(loads) <= 2 and all(m < min(loads) for m in moves)
