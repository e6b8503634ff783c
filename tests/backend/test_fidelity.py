"""Where the cost model used to be cheaper or dearer than any hardware: each case builds
the two kernels (or ops) of the comparison and checks that the model now tells them apart
as a chip would (mncore2)."""

from dataclasses import replace
from pathlib import Path

import pytest

from stochopt.backend.bound import bound_of_kernel
from stochopt.backend.cost import cost, roofline_of_kernel
from stochopt.leir import parse
from stochopt.leir.layout import parse_layout
from stochopt.leir.ops import OPS
from stochopt.leir.types import TensorType
from stochopt.lower.catalog import spec_table
from stochopt.machine import MNCORE2

ROOT = Path(__file__).resolve().parents[2]
N = 1 << 20  # vector_add's length


def _pe(dtype: str, layout: str) -> TensorType:
    lay = parse_layout(layout)
    return TensorType(dtype, lay.shape, "pe", lay)


def _vector_add(layout: str) -> str:
    t = f"f32[{N}] @ dram"
    return (f'def k(x: "{t}", y: "{t}") -> "{t}":\n'
            f'    a = load(x, "{layout}")\n    b = load(y, "{layout}")\n'
            "    return store(a + b)\n")


def test_strided_dram_access_costs_a_request_per_run():
    """Each PE holding elements 16 KiB apart reads every 4-byte element on its own."""
    contiguous = cost(parse(_vector_add(f"({N})/((8_L2B,8_L1B,16_MAB,4_PE,256))")))
    strided = cost(parse(_vector_add(f"({N})/((256,8_L2B,8_L1B,16_MAB,4_PE))")))
    assert contiguous.cycles == 19060
    # a run per element: N / 4 groups / 2 runs per cycle per transfer, three transfers
    assert strided.ops[2].cycles >= N / 4 / MNCORE2.dma_runs_per_cycle
    assert strided.cycles > 20 * contiguous.cycles  # docs/machine.md: 393844 against 19060


def test_a_transposed_store_costs_more_than_a_streaming_one():
    """out = x.T stored straight from the row layout writes one element per 2 KiB stride;
    moving it on chip first makes the store stream again."""
    head = ('def k(x: "f32[512,512] @ dram") -> "f32[512,512] @ dram":\n'
            '    xs = load(x, "(512,512)/((8_L2B,8_L1B,8_MAB),(512))")\n'
            "    t = transpose(xs)\n")
    straight = cost(parse(head + "    return store(t)\n"))
    moved = cost(parse(head + '    r = relayout(t, "(512,512)/((8_L2B,8_L1B,8_MAB),(512))")\n'
                       "    return store(r)\n"))
    store_straight, store_moved = straight.ops[-1].cycles, moved.ops[-1].cycles
    assert store_straight >= 512 * 512 / 4 / MNCORE2.dma_runs_per_cycle  # a run per element
    assert store_straight > 10 * store_moved
    assert straight.cycles > moved.cycles


def test_dma_and_tree_traffic_share_the_l2b_links():
    """A B@[L2B] load and a tree relayout across L1Bs both need much of every L2B link:
    together they would need more than its bandwidth, so the link carries one after the
    other (before, each had a budget of its own)."""
    text = '''def k(x: "f32[64,1024] @ dram", w: "f32[64,1024] @ dram") -> "f32[64,1024] @ dram":
    xs = load(x, "(64,1024)/((8_L2B,8),(8_L1B,128))")
    ws = load(w, "(64,1024)/((8_L1B,8),(16_MAB,64)); B@[L2B]")
    xr = relayout(xs, "(64,1024)/((8_L2B,8_L1B),(16_MAB,4_PE,16))")
    return store(xr)
'''
    p = cost(parse(text))
    ops = {o.name: o for o in p.ops}
    load = {k: (a, b, w) for k, a, b, w in ops["ws"].links}["l2b"]
    move = {k: (a, b, w) for k, a, b, w in ops["xr"].links}["l2b"]
    rate = {name: w / (b - a) for name, (a, b, w) in (("load", load), ("move", move))}
    assert rate["load"] + rate["move"] > 1  # 2048 of 2080 cycles, 256 of 584
    assert move[0] >= load[1]               # so the relayout waits for the load's span
    assert p.cycles >= load[1] + (move[1] - move[0])


def test_traffic_between_l2bs_is_charged_to_the_dram_group_ports():
    """A 4 MiB all-to-all relayout across the L2Bs runs no faster than the chip's DRAM
    ports, which are the only path between L2Bs, and holds them against the DMA."""
    text = '''def k(x: "f32[1024,1024] @ dram") -> "f32[1024,1024] @ dram":
    xs = load(x, "(1024,1024)/((8_L2B,8_L1B,16_MAB),(4_PE,256))")
    xt = relayout(xs, "(1024,1024)/((8_L1B,16_MAB,8),(8_L2B,4_PE,32))")
    return store(xt)
'''
    p = cost(parse(text))
    relayout = p.ops[2]
    assert relayout.bytes / relayout.cycles <= MNCORE2.dram_bytes_per_cycle
    assert {k: w for k, _, _, w in relayout.links}["dram"] == 6144


def test_replicate_then_pick_locally_pays_for_the_copies():
    """Loading every row onto all 64 PEs of an L1B and then keeping one's own part (a local
    copy) costs more than loading each PE its part."""
    rows = "(1024,256)/((8_L2B,8_L1B,16),(256))"
    direct = '''def k(x: "f32[1024,256] @ dram") -> "f32[1024,256] @ dram":
    xs = load(x, "(1024,256)/((8_L2B,8_L1B,16_MAB),(4_PE,64))")
    return store(xs)
'''
    picked = f'''def k(x: "f32[1024,256] @ dram") -> "f32[1024,256] @ dram":
    xs = load(x, "{rows}; B@[MAB,PE]")
    xp = relayout(xs, "(1024,256)/((8_L2B,8_L1B,16_MAB),(4_PE,64))")
    return store(xp)
'''
    d, r = cost(parse(direct)), cost(parse(picked))
    assert r.ops[2].resource == "vector"  # picking is a local copy
    copy = 16 * 256 * 4 // MNCORE2.pe_port_bytes  # each PE's 16-row copy at 8 B/cycle
    assert r.ops[1].cycles >= copy + MNCORE2.dma_issue > d.ops[1].cycles
    assert r.cycles > d.cycles


REDUCE_HEAD = ('def k(x: "f32[4096] @ dram") -> "f32[1] @ dram":\n'
               '    xs = load(x, "(4096)/((8_L2B,8_L1B,16_MAB,4_PE))")\n')


def test_a_reduction_whose_result_is_only_stored_does_not_pay_the_way_back():
    """16 KB summed over the whole chip: the tree result goes straight to the store, so
    reduce_sum is no dearer than gathering the data onto one PE and summing there."""
    tree = cost(parse(REDUCE_HEAD + "    return store(reduce_sum(xs, axis=0, keepdims=True))\n"))
    gathered = cost(parse(REDUCE_HEAD + '    g = relayout(xs, "(4096)/((4096))")\n'
                          "    return store(reduce_sum(g, axis=0, keepdims=True))\n"))
    used = cost(parse(REDUCE_HEAD + "    s = reduce_sum(xs, axis=0, keepdims=True)\n"
                      "    return store(s + 1.0)\n"))
    assert tree.cycles <= gathered.cycles
    tree_stage = next(s for s in tree.ops[2].stages if s[0] == "tree")
    used_stage = next(s for s in used.ops[2].stages if s[0] == "tree")
    assert tree_stage[2] - tree_stage[1] < used_stage[2] - used_stage[1]


# ---------------------------------------------------------------------------------
# the reachable bound
# ---------------------------------------------------------------------------------

def test_the_bound_adds_the_issue_and_flights_no_schedule_hides():
    """softmax: 1536 cycles of DRAM bandwidth, 2 transfers of 32 issue cycles, and the
    last store's 200-cycle flight."""
    row = next(r for r in spec_table("mncore2") if r["name"] == "softmax")
    assert row["roofline_cycles"] == 1536
    assert row["bound_cycles"] == 1536 + 2 * MNCORE2.dma_issue + MNCORE2.latency["dma"]


def test_every_bundled_baseline_is_at_or_above_its_bound():
    for row in spec_table("mncore2"):
        assert row["baseline_cycles"] >= row["bound_cycles"] >= row["roofline_cycles"], row


@pytest.mark.parametrize("name", ["softmax_plain", "softmax_fast"])
def test_the_docs_examples_are_at_or_above_their_bound(name):
    k = parse((ROOT / "docs" / "examples" / f"{name}.leir").read_text())
    assert cost(k).cycles >= bound_of_kernel(k) >= roofline_of_kernel(k)


def test_the_bound_is_reachable_on_a_streaming_kernel():
    """vector_add over every PE lands within 2% of its bound (the roofline is 3.4% off)."""
    k = parse(_vector_add(f"({N})/((8_L2B,8_L1B,16_MAB,4_PE,256))"))
    assert cost(k).cycles <= 1.02 * bound_of_kernel(k)


# ---------------------------------------------------------------------------------
# finite DMA descriptors, and pipelining that pays
# ---------------------------------------------------------------------------------

def _many_small_loads(count: int) -> str:
    """``count`` 16 KiB inputs loaded back to back, then summed: every load could be in
    flight at once if nothing bounded the descriptors."""
    t = '"f32[4096] @ dram"'
    lay = '"(4096)/((8_L2B,8_L1B,64))"'
    params = ", ".join(f"x{i}: {t}" for i in range(count))
    loads = "".join(f"    a{i} = load(x{i}, {lay})\n" for i in range(count))
    total = " + ".join(f"a{i}" for i in range(count))
    return f"def k({params}) -> {t}:\n{loads}    return store({total})\n"


def test_a_kernel_issuing_every_load_at_once_waits_for_free_descriptors():
    kernel = parse(_many_small_loads(8))
    limited = cost(kernel)
    unlimited = cost(kernel, replace(MNCORE2, dma_descriptors=1000, name="unlimited"))
    loads = [o for o in limited.ops if o.op == "load"]
    limit = MNCORE2.dma_descriptors
    # the fifth load is issued only once the first has landed, and so on
    for early, late in zip(loads, loads[limit:], strict=False):
        assert late.stages[0][1] >= early.end
    assert loads[limit].stages[0][1] > loads[limit - 1].stages[0][2]  # the queue idled
    assert limited.cycles > unlimited.cycles
    # a kernel with no more transfers than descriptors is not charged anything
    few = parse(_many_small_loads(limit - 1))
    assert cost(few).cycles == cost(few, replace(MNCORE2, dma_descriptors=1000,
                                                 name="unlimited")).cycles


def _tanh_stream(tiles: int) -> str:
    """tanh applied 16 times to f32[4096,256] on every PE, cut into column tiles whose
    loads are issued one tile ahead: compute and DMA of similar size."""
    lay = "(4096,{c})/((8_L2B,8_L1B,16_MAB,4_PE),({c}))"
    cols = 256 // tiles
    body = []
    for t in range(tiles + 1):
        if t < tiles:
            body.append(f'    x{t} = load(x[:, {t * cols}:{(t + 1) * cols}], '
                        f'"{lay.format(c=cols)}")\n')
        if t:
            value = f"x{t - 1}"
            for _ in range(16):
                value = f"tanh({value})"
            body.append(f"    s{t - 1} = store({value})\n")
    joined = ", ".join(f"s{t}" for t in range(tiles))
    ret = f"concat([{joined}], axis=1)" if tiles > 1 else "s0"
    return ('def k(x: "f32[4096,256] @ dram") -> "f32[4096,256] @ dram":\n'
            + "".join(body) + f"    return {ret}\n")


def test_tiling_finer_than_two_tiles_pays_on_a_stream_of_loads_and_compute():
    """With as much compute as DMA per element, the first tile's load and the last
    tile's compute and store are what stays exposed: four tiles expose half of what two
    do, and eight less again, for a few more issue cycles (and descriptors, which a
    stream one tile ahead never runs out of)."""
    cycles = {t: cost(parse(_tanh_stream(t))).cycles for t in (1, 2, 4, 8)}
    assert cycles[1] > cycles[2] > cycles[4] > cycles[8]


# ---------------------------------------------------------------------------------
# small local moves pay their issue
# ---------------------------------------------------------------------------------

def test_stacking_and_slicing_small_tensors_costs_issue_time():
    """Eight (16,2) pieces stacked into (16,16) and one sliced back out: every row of a
    piece is a run of its own, which costs an instruction besides its word; a lane-rated
    pass over the result (132 and 20 cycles) is what they cost when moves were free."""
    pieces = [_pe("f32", "(16,2)/((16),(2))")] * 8
    stacked = _pe("f32", "(16,16)/((16),(16))")
    lat, issue = MNCORE2.latency["vector"], MNCORE2.copy_run_issue
    run = min(2, issue + 1)  # two elements: one word and its issue, or two lane inserts
    concat = OPS["concat"].cost(MNCORE2, pieces, stacked, {"axis": 1})
    assert concat.cycles == 8 * 16 * run + lat > 16 * 16 // 2 + lat
    piece = OPS["slice"].cost(MNCORE2, [stacked], pieces[0], {"bounds": ((0, 16), (4, 6))})
    assert piece.cycles == 16 * run + lat > 16 * 2 // 2 + lat
    # a whole row is one run: slicing rows off costs little more than their words
    rows = OPS["slice"].cost(MNCORE2, [stacked], _pe("f32", "(4,16)/((4),(16))"),
                             {"bounds": ((0, 4), (0, 16))})
    assert rows.cycles == issue + 4 * 16 // 2 + lat


# ---------------------------------------------------------------------------------
# tree reductions: views, and the way down only as far as needed
# ---------------------------------------------------------------------------------

def _tree_cycles(profile, i: int) -> int:
    return next(end - start for r, start, end in profile.ops[i].stages if r == "tree")


def test_a_view_between_a_reduction_and_its_store_does_not_pay_the_way_down():
    stored = cost(parse(REDUCE_HEAD + "    return store(reduce_sum(xs, axis=0, keepdims=True))\n"))
    viewed = cost(parse(REDUCE_HEAD + "    s = reduce_sum(xs, axis=0, keepdims=True)\n"
                        "    return store(reshape(s, (1,)))\n"))
    assert _tree_cycles(viewed, 2) == _tree_cycles(stored, 2)


ROW_SUMS = 'def k(x: "f32[256,64] @ dram") -> "f32[256,1] @ dram":\n    xs = load(x, "{}")\n'


@pytest.mark.parametrize("spread, gathered", [
    ("(256,64)/((256),(16_MAB,4_PE))", "(256,64)/((16_MAB,4_PE,4),(64))"),
    ("(256,64)/((256),(16_MAB,2_PE,2))", "(256,64)/((16_MAB,2_PE,8),(64))"),
    ("(256,64)/((256),(8_L1B,8))", "(256,64)/((8_L1B,32),(64))"),
    ("(256,64)/((256),(8_L2B,8))", "(256,64)/((8_L2B,32),(64))"),
])
def test_a_tree_reduction_fed_to_a_vector_op_is_not_dearer_than_a_relayout_and_a_sum(
        spread, gathered):
    """Row sums whose columns are spread, scaled and stored: the tree sends every partial
    up and each PE gets back its share of the sums (a reduce-scatter), which is never
    dearer than moving the rows onto PEs of their own and summing there."""
    head = ROW_SUMS.format(spread)
    tree = cost(parse(head + "    s = reduce_sum(xs, axis=1, keepdims=True)\n"
                      "    return store(s * 2.0)\n"))
    moved = cost(parse(head + f'    r = relayout(xs, "{gathered}")\n'
                       "    s = reduce_sum(r, axis=1, keepdims=True)\n"
                       "    return store(s * 2.0)\n"))
    assert tree.ops[2].cycles <= moved.ops[2].cycles + moved.ops[3].cycles
    # a consumer that needs the sums on every PE (the rows minus their sums) pays the
    # whole way down, an all-reduce, which costs more than the reduce-scatter
    centred = cost(parse(head + "    s = reduce_sum(xs, axis=1, keepdims=True)\n"
                         "    return store(reduce_max(xs - s, axis=1, keepdims=True))\n"))
    assert _tree_cycles(centred, 2) > _tree_cycles(tree, 2)
