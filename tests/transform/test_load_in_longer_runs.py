"""load_in_longer_runs: one load reads DRAM in longer runs, a relayout restores its layout."""

import numpy as np

from stochopt.backend.cost import cost
from stochopt.backend.emulate import emulate, random_inputs
from stochopt.leir import parse
from stochopt.machine import MNCORE2
from stochopt.transform.layout_propagation import load_in_longer_runs, where_load_in_longer_runs
from stochopt.transform.rewrite import LOCAL

# attention_scores as the search left it: the masks are loaded in the scores' layout,
# positions (8_L2B,8_MAB,32), so each DRAM run is 32 bytes of bool (half a burst)
SCORES = '''
def attention_scores(q: "bf16[2,32,16] @ dram", k: "bf16[2,2048,16] @ dram",
                     mask: "bool[2,32,2048] @ dram") -> "f32[2,32,1] @ dram":
    v5 = load(k, "(2,2048,16)/((2),(8_L2B,8_MAB,32),(16)); B@[L1B,PE]")
    v5_1 = q[0:2, 0:16, 0:16]
    v7 = mask[0:2, 0:16, 0:2048]
    v3_0 = load(v5_1, "(2,16,16)/((2),(2_PE,8_L1B),(16)); B@[L2B,MAB]")
    v7_1 = transpose(v3_0, perm=(0, 2, 1))
    v9 = q[0:2, 16:32, 0:16]
    v9_1 = matmul(v5, v7_1)
    v10_0 = load(v7, "(2,16,2048)/((2),(2_PE,8_L1B),(8_L2B,8_MAB,32))")
    v11 = transpose(v9_1, perm=(0, 2, 1))
    v9_0 = v11 * 0.25
    v11_1 = mask[0:2, 16:32, 0:2048]
    v11_0 = where(v10_0, v9_0, (-inf))
    v3_1 = load(v9, "(2,16,16)/((2),(2_PE,8_L1B),(16)); B@[L2B,MAB]")
    v10_1 = load(v11_1, "(2,16,2048)/((2),(2_PE,8_L1B),(8_L2B,8_MAB,32))")
    v17 = transpose(v3_1, perm=(0, 2, 1))
    v12_0 = reduce_max(v11_0, axis=2, keepdims=True)
    v19 = matmul(v5, v17)
    v20 = transpose(v19, perm=(0, 2, 1))
    t1_0 = store(v12_0)
    v9_1_1 = v20 * 0.25
    v11_1_1 = where(v10_1, v9_1_1, (-inf))
    v12_1 = reduce_max(v11_1_1, axis=2, keepdims=True)
    t1_1 = store(v12_1)
    return concat([t1_0, t1_1], axis=1)
'''


def _mask_site(kernel):
    """A mask load whose run still ends at the MAB factor."""
    return next(s for s in where_load_in_longer_runs(kernel)
                if kernel.nodes[s[0]].type.dtype == "bool"
                and kernel.nodes[s[0]].type.layout.axes[s[1]][s[2]].level == "MAB")


def test_the_mask_is_read_in_256_byte_runs_and_only_its_load_changes():
    kernel = parse(SCORES, MNCORE2)
    site = _mask_site(kernel)
    out = load_in_longer_runs(kernel, site, MNCORE2)  # no rng: all of the factor
    loads = [str(n.attr("layout")) for n in out.nodes if n.op == "load"]
    assert "(2,16,2048)/((2),(2_PE,8_L1B),(8_L2B,256))" in loads
    relayouts = [n for n in out.nodes if n.op == "relayout"]
    assert [str(n.type.layout) for n in relayouts] == \
        ["(2,16,2048)/((2),(2_PE,8_L1B),(8_L2B,8_MAB,32))"]
    # every value but the new load keeps its layout
    before = sorted(str(n.type.layout) for n in kernel.nodes if n.op not in ("input", "load"))
    after = sorted(str(n.type.layout) for n in out.nodes
                   if n.op not in ("input", "load", "relayout"))
    assert before == after
    inputs = random_inputs(kernel, seed=0)
    np.testing.assert_array_equal(emulate(out, inputs, exact=True),
                                  emulate(kernel, inputs, exact=True))


def test_both_masks_in_long_runs_make_the_kernel_faster():
    """The mask load drops from 288 to 128 DMA cycles; the relayout runs on the tree
    beside the matmuls. Both masks: 1,496 -> 1,288 cycles under mncore2."""
    kernel = parse(SCORES, MNCORE2)
    once = load_in_longer_runs(kernel, _mask_site(kernel), MNCORE2)
    twice = load_in_longer_runs(once, _mask_site(once), MNCORE2)
    assert [cost(k, MNCORE2).cycles for k in (kernel, once, twice)] == [1496, 1336, 1288]
    assert sum(n.op == "relayout" for n in twice.nodes) == 2


def test_the_option_makes_part_of_the_factor_local():
    kernel = parse(SCORES, MNCORE2)
    out = load_in_longer_runs(kernel, _mask_site(kernel), MNCORE2, option=2)
    assert "(8_L2B,4_MAB,64)" in str(next(n for n in out.nodes if n.op == "load"
                                          and n.type.dtype == "bool").attr("layout"))


def test_a_load_only_relayouts_read_is_not_stacked_and_a_relayout_pair_folds():
    """Applied twice to one load, the rule would stack relayout(relayout(load)), and a
    chain would drift into kernels that only grow: on the load it made it changes the
    load in place, and a pair that does arise (a mutation, propagate_layout) folds into
    one relayout."""
    kernel = parse(SCORES, MNCORE2)
    site = _mask_site(kernel)
    half = load_in_longer_runs(kernel, site, MNCORE2, option=2)
    (made,) = [i for i, n in enumerate(half.nodes) if n.op == "relayout"]
    (again,) = [s for s in where_load_in_longer_runs(half)
                if s[0] == half.nodes[made].args[0]]
    out = load_in_longer_runs(half, again, MNCORE2, option=2)
    assert sum(n.op == "relayout" for n in out.nodes) == 1
    loads = [str(n.attr("layout")) for n in out.nodes if n.op == "load"]
    assert "(2,16,2048)/((2),(2_PE,8_L1B),(8_L2B,2_MAB,128))" in loads, loads
    inputs = random_inputs(kernel, seed=0)
    np.testing.assert_array_equal(emulate(out, inputs, exact=True),
                                  emulate(kernel, inputs, exact=True))
    load = kernel.nodes[site[0]]
    text = SCORES.replace(
        'v10_0 = load(v7, "(2,16,2048)/((2),(2_PE,8_L1B),(8_L2B,8_MAB,32))")',
        'v10_a = load(v7, "(2,16,2048)/((2),(2_PE,8_L1B),(8_L2B,256))")\n'
        '    v10_b = relayout(v10_a, "(2,16,2048)/((2),(2_PE,8_L1B),(2_L2B,4_MAB,256))")\n'
        '    v10_0 = relayout(v10_b, "(2,16,2048)/((2),(2_PE,8_L1B),(8_L2B,8_MAB,32))")')
    assert load.name == "v10_0" and text != SCORES
    pair = parse(text, MNCORE2)
    rule = LOCAL["fold_relayout_pair"]
    (found,) = rule.find(pair)
    folded = rule.apply(pair, found, MNCORE2, None)
    assert sum(n.op == "relayout" for n in folded.nodes) == 1
    inputs = random_inputs(pair, seed=0)
    np.testing.assert_array_equal(emulate(folded, inputs, exact=True),
                                  emulate(pair, inputs, exact=True))
    assert cost(folded, MNCORE2).cycles <= cost(pair, MNCORE2).cycles
