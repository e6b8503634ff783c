"""list scheduling: a reorder the cost model finds faster, and never a changed value."""

from stochopt import load_spec
from stochopt.backend.cost import cost
from stochopt.leir import typecheck
from stochopt.lower import lower
from stochopt.machine import MNCORE2
from stochopt.transform.reduce_tiling import tile_reduction
from stochopt.transform.rewrite import RULES
from stochopt.transform.schedule import candidate_orders, schedule
from stochopt.verify import check


def _tiled_op_by_op():
    """attention_scores with its positions in eight tiles, as tile_reduction emits them:
    every tile's copy of one op next to each other, before the next op's (in four tiles
    the mask's loads fill the DRAM ports until the last one, and no order is faster)."""
    spec = load_spec("specs/attention_scores.py")
    kernel = lower(spec)
    seed = next(i for i, n in enumerate(kernel.nodes) if n.op == "reduce_max")
    return spec, kernel, tile_reduction(kernel, (seed, 8), MNCORE2)


def test_the_scheduler_finds_a_faster_order_with_the_same_meaning():
    spec, baseline, tiled = _tiled_op_by_op()
    scheduled = schedule(tiled, MNCORE2)
    assert typecheck(scheduled, MNCORE2) == scheduled
    assert sorted(n.op for n in scheduled.nodes) == sorted(n.op for n in tiled.nodes)
    assert cost(scheduled).cycles < cost(tiled).cycles
    verdict = check(scheduled, spec, examples=6, baseline=baseline, seed=2)
    assert verdict.equivalent, verdict.counterexample.describe()


def test_every_candidate_order_reads_operands_after_they_are_made():
    _, _, tiled = _tiled_op_by_op()
    for order in candidate_orders(tiled):
        position = {node: at for at, node in enumerate(order)}
        for node in order:
            assert all(position[j] < position[node] for j in tiled.nodes[node].inputs)


def test_the_rule_declines_when_no_order_is_faster():
    _, _, tiled = _tiled_op_by_op()
    rule = next(r for r in RULES if r.name == "list_schedule")
    once = rule.apply(tiled, tiled.output, MNCORE2)
    assert once is not None
    assert rule.apply(once, once.output, MNCORE2) is None
