"""Exact mode sees casts where they matter (counts.py): whole-number quantities held in
f32 or bf16 are computed as the hardware holds them, so a count that bf16 cannot hold
is a semantic error, however loose the output's tolerance; everything else stays exact.
traced.py's emulation, which counts.py runs on, computes what emulate() does."""

from __future__ import annotations

import numpy as np
import pytest

from stochopt import spec, tensor
from stochopt.backend.emulate import emulate, random_inputs
from stochopt.leir import parse
from stochopt.verify import check, traced
from stochopt.verify.counts import counted_nodes, exact_output, rounding_counts
from stochopt.verify.strategies import random_spec_inputs


@spec(inputs={"x": tensor("f32", (32, 1024), low=-4.0, high=4.0),
              "mask": tensor("bool", (32, 1024))},
      output=tensor("bf16", (32, 1)))
def masked_mean(x, mask):
    total = np.where(mask, x, 0.0).sum(axis=1, keepdims=True)
    return total / np.maximum(mask.sum(axis=1, keepdims=True), 1)


def _kernel(count_dtype: str) -> str:
    return ('def kernel(x: "f32[32,1024] @ dram", mask: "bool[32,1024] @ dram") '
            '-> "bf16[32,1] @ dram":\n'
            '    m = load(mask, "(32,1024)/((8_L2B,4_L1B),(1024))")\n'
            '    xs = load(x, "(32,1024)/((8_L2B,4_L1B),(1024))")\n'
            "    total = reduce_sum(where(m, xs, 0.0), axis=1, keepdims=True)\n"
            f'    count = cast(reduce_sum(cast(m, "{count_dtype}"), axis=1, keepdims=True), '
            '"f32")\n'
            '    return store(cast(total / maximum(count, 1.0), "bf16"))\n')


def test_counted_values_are_the_whole_number_quantities_in_float_types():
    kernel = parse(_kernel("bf16"))
    names = {kernel.nodes[i].name or kernel.nodes[i].op for i in counted_nodes(kernel)}
    # cast(m), its sum, the f32 count and the clamp at 1: not the masked sum of x
    assert "count" in names and "total" not in names
    assert not any(kernel.nodes[i].op == "div" for i in counted_nodes(kernel))


def test_a_literal_its_dtype_cannot_hold_is_a_magnitude_not_a_count():
    kernel = parse('def kernel(mask: "bool[32,1024] @ dram") -> "f32[32,1024] @ dram":\n'
                   '    m = load(mask, "(32,1024)/((8_L2B,4_L1B),(1024))")\n'
                   "    keep = where(m, 1.0, 0.0)\n"
                   "    bias = where(m, 0.0, -1e+30)\n"
                   '    wide = where(m, 0.0, cast(full((32, 1024), 257.0, "f32", '
                   '"(32,1024)/((8_L2B,4_L1B),(1024))"), "bf16"))\n'
                   "    return store(keep + bias + cast(wide, \"f32\"))\n")
    names = {kernel.nodes[i].name for i in counted_nodes(kernel)}
    # 1 and 0 are counts; -1e30 is not a whole number f32 holds (a sentinel); 257 is a
    # count f32 holds, whose cast to bf16 rounds as the hardware rounds it
    assert "keep" in names and "bias" not in names and "wide" in names


def test_a_count_past_bf16s_whole_numbers_is_a_semantic_error():
    refused = check(parse(_kernel("bf16")), masked_mean, examples=20, seed=0)
    assert not refused.equivalent and refused.counterexample.mismatch.check == "semantics"
    assert check(parse(_kernel("f32")), masked_mean, examples=20, seed=0).equivalent


def test_exact_output_is_exact_except_for_counted_values():
    x = random_spec_inputs(masked_mean, 0)
    f32_count = parse(_kernel("f32"))
    assert np.array_equal(exact_output(f32_count, x), emulate(f32_count, x, exact=True))
    rows = x["mask"].sum(axis=1)
    odd = (rows > 256) & (rows % 2 == 1)
    assert odd.any()  # 1024 coin flips: counts near 512, odd ones round in bf16
    bf16 = exact_output(parse(_kernel("bf16")), x)
    plain = emulate(parse(_kernel("bf16")), x, exact=True)
    assert not np.array_equal(bf16, plain)


@pytest.mark.parametrize("exact", [True, False])
def test_traced_values_are_emulates_own(exact, spec_and_baseline):
    spec_, baseline = spec_and_baseline("specs/softmax.py")
    x = random_spec_inputs(spec_, 3)
    wanted = [baseline.output, 3]
    values = traced.run(baseline, x, wanted, exact=exact)
    assert np.array_equal(values[baseline.output], emulate(baseline, x, exact=exact))
    assert set(values) == set(wanted)
    need = traced.needed(baseline, [3])
    assert need[3] and not need[baseline.output]


def test_counts_that_cannot_round_leave_the_kernel_in_plain_exact_mode():
    # a zero-filled accumulator and a clamp are counted, and exact in any dtype: only
    # the counted nodes that can round are computed natively (and a kernel with none
    # shares its exact values with the other kernels of a full check)
    kernel = parse('def kernel(x: "f32[32,1024] @ dram") -> "f32[32,1] @ dram":\n'
                   '    xs = load(x, "(32,1024)/((8_L2B,4_L1B),(1024))")\n'
                   '    acc = full((32, 1), 0.0, "f32", "(32,1)/((8_L2B,4_L1B),(1))")\n'
                   "    acc = acc + reduce_sum(xs, axis=1, keepdims=True)\n"
                   "    return store(acc)\n")
    assert counted_nodes(kernel) and not rounding_counts(kernel)
    inputs = random_inputs(kernel, seed=0)
    assert np.array_equal(exact_output(kernel, inputs), emulate(kernel, inputs, exact=True))
    count = parse(_kernel("bf16"))
    rounding = {count.nodes[i].op for i in rounding_counts(count)}
    assert rounding and rounding <= {"cast", "reduce_sum"}
