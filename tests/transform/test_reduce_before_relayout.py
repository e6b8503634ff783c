"""reduce_before_relayout: reduce the wide value where it lies, move the narrow result."""

import numpy as np
import pytest

from stochopt.backend.cost import cost
from stochopt.backend.emulate import emulate
from stochopt.leir import parse
from stochopt.machine import MNCORE2
from stochopt.transform.rewrite import LOCAL

RULE = LOCAL["reduce_before_relayout"]

# a split-K product (16 partial sums of a 32x512 tile, one per MAB) moved whole before
# its sum, as a search left a tile of matmul_bias_gelu
SPLIT_K = """
def k(x: "f32[16,32,512] @ dram") -> "f32[{out}] @ dram":
    a = load(x, "(16,32,512)/((16_MAB),(8_L1B,4_PE),(8_L2B,64))")
    r = relayout(a, "(16,32,512)/((16),(8_L1B,4_PE),(8_L2B,8_MAB,8))")
    s = {op}(r, axis=0{keep})
    return store(s)
"""


def rewritten(text: str):
    kernel = parse(text)
    sites = RULE.find(kernel)
    assert len(sites) == 1
    return kernel, RULE.apply(kernel, sites[0], MNCORE2, None)


@pytest.mark.parametrize("op", ["reduce_sum", "reduce_max", "reduce_min"])
@pytest.mark.parametrize("keep", ["", ", keepdims=True"])
def test_the_reduction_runs_before_the_move_and_the_values_stay(op, keep):
    shape = "1,32,512" if keep else "32,512"
    kernel, out = rewritten(SPLIT_K.format(op=op, keep=keep, out=shape))
    ops = [n.op for n in out.nodes]
    assert ops.index(op) < ops.index("relayout")  # the narrow result is what moves
    reduced = next(n for n in out.nodes if n.op == op)
    assert reduced.inputs == (next(i for i, n in enumerate(out.nodes) if n.op == "load"),)
    # the output keeps the layout the reduction had
    assert out.nodes[out.nodes[out.output].inputs[0]].type == \
        kernel.nodes[kernel.nodes[kernel.output].inputs[0]].type
    # a sixteenth of the bytes moves: 2,436 -> 2,323 cycles for the sum
    assert cost(out, MNCORE2).cycles < cost(kernel, MNCORE2).cycles
    x = {"x": np.random.default_rng(0).standard_normal((16, 32, 512)).astype(np.float32)}
    np.testing.assert_array_equal(emulate(out, x, exact=True), emulate(kernel, x, exact=True))
    # natively only the order of addition may change (maxima and minima not at all)
    np.testing.assert_allclose(emulate(out, x, exact=False), emulate(kernel, x, exact=False),
                               rtol=1e-5, atol=1e-5)


def test_a_reduction_of_a_value_not_relayouted_is_no_site():
    kernel = parse(SPLIT_K.format(op="reduce_sum", keep="", out="32,512").replace(
        "s = reduce_sum(r, axis=0)", "s = reduce_sum(a, axis=0)").replace(
        '    r = relayout(a, "(16,32,512)/((16),(8_L1B,4_PE),(8_L2B,8_MAB,8))")\n', ""))
    assert RULE.find(kernel) == []
