"""spread_group_by_relayout: an epilogue's work spread over the units that held copies."""

import numpy as np

from stochopt.backend.cost import cost
from stochopt.backend.emulate import emulate, random_inputs
from stochopt.lower import lower
from stochopt.machine import MNCORE2
from stochopt.spec import load_spec
from stochopt.transform.layout_propagation import (
    group_spread_divisors,
    spread_group_by_relayout,
    where_spread_group_by_relayout,
)
from stochopt.transform.plan import Step, apply_step


def _row_tiles():
    """matmul_bias_gelu in four row tiles (greedy's structure before this rule): each
    tile's product is replicated over the MABs, so each MAB computes the whole gelu."""
    kernel = lower(load_spec("specs/matmul_bias_gelu.py"), MNCORE2)
    for step in (Step("bf16_matmul_operands", 0), Step("tile_output", 1),
                 Step("list_schedule", 0)):
        kernel = apply_step(kernel, step, MNCORE2)
    return kernel


def test_the_row_tiles_epilogues_move_together_and_run_four_times_faster():
    kernel = _row_tiles()
    products = [i for i, n in enumerate(kernel.nodes) if n.op == "matmul"]
    assert len(products) == 4
    assert all("MAB" in kernel.nodes[i].type.layout.replicated for i in products)
    sites = where_spread_group_by_relayout(kernel)
    # the four tiles read one bias, so they are one site: the first tile's product
    assert {s[0] for s in sites} == {products[0]}
    site = next(s for s in sites if s[3] == "MAB")
    assert group_spread_divisors(kernel, site, MNCORE2) == [2, 4, 8, 16]
    out = spread_group_by_relayout(kernel, site, MNCORE2, option=4)
    relayouts = [n for n in out.nodes if n.op == "relayout"]
    assert len(relayouts) == 4
    assert all(out.nodes[n.args[0]].op == "matmul" for n in relayouts)
    bias = next(n for n in out.nodes if n.op == "load" and n.type.shape == (512,))
    assert "MAB" in bias.type.layout.spread() and "MAB" not in bias.type.layout.replicated
    assert cost(out, MNCORE2).cycles < 0.85 * cost(kernel, MNCORE2).cycles
    inputs = random_inputs(kernel, seed=0)
    np.testing.assert_array_equal(emulate(out, inputs, exact=True),
                                  emulate(kernel, inputs, exact=True))


def test_no_site_where_no_group_is_entered_by_a_computed_value():
    """vector_add's one group starts at loads, whose layouts the other rules choose."""
    kernel = lower(load_spec("specs/vector_add.py"), MNCORE2)
    assert where_spread_group_by_relayout(kernel) == []
