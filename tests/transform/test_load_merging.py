"""load_slices_together: loads of adjacent DRAM slices become one load, sliced on chip."""

import numpy as np

from stochopt.backend.cost import cost
from stochopt.backend.emulate import emulate, random_inputs
from stochopt.leir import parse
from stochopt.machine import MNCORE2
from stochopt.transform.load_merging import load_slices_together, where_load_slices_together
from stochopt.transform.rewrite import RULES

ROWS = "(256,64)/((8_L2B,8_L1B,4_MAB),(2_PE,32))"

# rotary as greedy's descent leaves it: x's two halves are two loads, each paying a
# transfer's issue cycles
ROTARY = f'''
def rotary(x: "f32[256,128] @ dram", cos: "f32[256,64] @ dram",
           sin: "f32[256,64] @ dram") -> "f32[256,128] @ dram":
    x1 = load(x[0:256, 0:64], "{ROWS}")
    c = load(cos, "{ROWS}")
    x2 = load(x[0:256, 64:128], "{ROWS}")
    s = load(sin, "{ROWS}")
    o1 = x1 * c - x2 * s
    o2 = x1 * s + x2 * c
    return concat([store(o1), store(o2)], axis=1)
'''


def test_the_halves_of_x_are_loaded_once_and_sliced_in_whole_blocks():
    kernel = parse(ROTARY, MNCORE2)
    [site] = where_load_slices_together(kernel)
    assert [kernel.nodes[i].name for i in site] == ["x1", "x2"]
    out = load_slices_together(kernel, site, MNCORE2)
    loads = [str(n.attr("layout")) for n in out.nodes if n.op == "load"]
    assert loads == ["(256,128)/((8_L2B,8_L1B,4_MAB),(2,2_PE,32))", ROWS, ROWS]
    pieces = [n for n in out.nodes if n.op == "slice" and n.type.location == "pe"]
    assert [n.attr("bounds") for n in pieces] == [((0, 256), (0, 64)), ((0, 256), (64, 128))]
    assert all(str(n.type.layout) == ROWS for n in pieces)
    inputs = random_inputs(kernel, seed=0)
    np.testing.assert_array_equal(emulate(out, inputs, exact=True),
                                  emulate(kernel, inputs, exact=True))
    # one transfer's issue cycles saved on the DMA queue, which bounds this kernel
    assert (cost(kernel, MNCORE2).cycles, cost(out, MNCORE2).cycles) == (1208, 1176)


def test_part_of_a_tensor_is_loaded_as_one_dram_slice_and_gaps_are_not_merged():
    kernel = parse('''
def k(x: "f32[64,16] @ dram") -> "f32[16,16] @ dram":
    a = load(x[0:16, 0:16], "(16,16)/((16_MAB),(16))")
    b = load(x[16:32, 0:16], "(16,16)/((16_MAB),(16))")
    c = load(x[48:64, 0:16], "(16,16)/((16_MAB),(16))")
    d = load(x[32:48, 0:16], "(16,16)/((4_MAB,4),(16))")
    return store(a + b + c + relayout(d, "(16,16)/((16_MAB),(16))"))
''', MNCORE2)
    # a and b are adjacent with one layout; c is not next to them; d has another layout
    [site] = where_load_slices_together(kernel)
    assert [kernel.nodes[i].name for i in site] == ["a", "b"]
    out = load_slices_together(kernel, site, MNCORE2)
    union = next(n for n in out.nodes if n.op == "load" and n.type.shape == (32, 16))
    assert out.nodes[union.args[0]].attr("bounds") == ((0, 32), (0, 16))
    assert str(union.attr("layout")) == "(32,16)/((2,16_MAB),(16))"
    inputs = random_inputs(kernel, seed=1)
    np.testing.assert_array_equal(emulate(out, inputs, exact=True),
                                  emulate(kernel, inputs, exact=True))


def test_the_merged_load_spreads_with_its_pieces():
    """spread_over_more_of_the_tree on a piece's layout spreads the merged load inside
    its blocks, so the pieces stay whole blocks: greedy's order (merge, then spread)
    reaches the kernel above."""
    local = "(256,64)/((8_L2B,8_L1B,4_MAB),(64))"
    kernel = parse(ROTARY.replace(ROWS, local), MNCORE2)
    merged = load_slices_together(kernel, where_load_slices_together(kernel)[0], MNCORE2)
    assert str(next(n for n in merged.nodes if n.op == "load").attr("layout")) == \
        "(256,128)/((8_L2B,8_L1B,4_MAB),(128))"
    cos = next(i for i, n in enumerate(merged.nodes) if n.name == "c")
    rule = next(r for r in RULES if r.name == "spread_over_more_of_the_tree")
    site = next(s for s in rule.find(merged) if s[0] == cos and s[1] == -1 and s[3] == "PE")
    out = rule.apply(merged, site, MNCORE2, option=2)
    assert [str(n.attr("layout")) for n in out.nodes if n.op == "load"] == \
        ["(256,128)/((8_L2B,8_L1B,4_MAB),(2,2_PE,32))", ROWS, ROWS]
    assert cost(out, MNCORE2).cycles == 1176
