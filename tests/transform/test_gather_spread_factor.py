"""gather_spread_factor: a spread factor made partly local in every layout of the axis."""

import numpy as np

from stochopt.backend.cost import cost
from stochopt.backend.emulate import emulate, random_inputs
from stochopt.errors import StochoptError
from stochopt.lower import lower
from stochopt.machine import MNCORE2
from stochopt.spec import load_spec
from stochopt.transform.layout_propagation import gather_spread_factor, where_gather_spread_factor


def test_gathering_the_mask_runs_changes_the_scores_and_keys_alike_and_keeps_values():
    """attention_scores' baseline loads the mask in the matmul's output layout, whose
    positions end in 4_PE,4: runs of 4 bytes. Gathering the 4_PE factor changes the mask,
    the keys (the same axis, transposed) and nothing else, and the runs grow to 16."""
    kernel = lower(load_spec("specs/attention_scores.py"), MNCORE2)
    mask = next(i for i, n in enumerate(kernel.nodes)
                if n.op == "load" and n.type.dtype == "bool")
    axes = kernel.nodes[mask].type.layout.axes
    site = next(s for s in where_gather_spread_factor(kernel)
                if s[0] == mask and axes[s[1]][s[2]].level == "PE")
    out = gather_spread_factor(kernel, site, MNCORE2)  # no rng: all of the factor
    layouts = [str(n.type.layout) for n in out.nodes if n.op == "load"]
    assert sum("(8_L2B,16_MAB,16)" in lay for lay in layouts) == 2  # mask and k
    assert cost(out, MNCORE2).cycles < cost(kernel, MNCORE2).cycles / 2
    inputs = random_inputs(kernel, seed=0)
    np.testing.assert_array_equal(emulate(out, inputs, exact=True),
                                  emulate(kernel, inputs, exact=True))


def test_a_factor_gathered_whole_leaves_the_level_unspread():
    kernel = lower(load_spec("specs/attention_scores.py"), MNCORE2)
    for site in where_gather_spread_factor(kernel):
        i, axis, j = site
        factor = kernel.nodes[i].type.layout.axes[axis][j]
        try:
            out = gather_spread_factor(kernel, site, MNCORE2)  # no rng: g = d, all of it
        except StochoptError:  # a consumer that cannot take the layout refuses
            continue
        assert factor.level not in out.nodes[i].type.layout.axis_levels(axis)
