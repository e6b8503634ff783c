"""Each cost rule against numbers worked by hand from docs/machine.md (mncore2 unless
said otherwise)."""

from stochopt.leir.cost_rules import (
    FREE,
    VectorCost,
    Work,
    lanes,
    load_cost,
    matmul_cost,
    relayout_cost,
    store_cost,
    transpose_cost,
)
from stochopt.leir.ir import Builder
from stochopt.leir.layout import parse_layout
from stochopt.leir.ops import OPS
from stochopt.leir.types import TensorType
from stochopt.machine import MNCORE2, SMALL

ROWS = "(128,1024)/((8_L2B,16_MAB),(1024))"
SPREAD_ROWS = "(128,1024)/((8_L2B,16_MAB),(8_L1B,4_PE,32))"


def pe(dtype: str, layout: str) -> TensorType:
    lay = parse_layout(layout)
    return TensorType(dtype, lay.shape, "pe", lay)


def dram(dtype: str, shape) -> TensorType:
    return TensorType(dtype, tuple(shape), "dram")


def cost_of(op: str, ins, out, machine=MNCORE2, **attrs) -> Work:
    return OPS[op].cost(machine, ins, out, attrs)


def test_load_is_bound_by_the_busiest_dram_group():
    # 512 KiB over 8 L2Bs: each of 4 groups serves 2 L2Bs, 128 KiB at 170.7 B/cycle = 768
    x = pe("f32", ROWS)
    w = load_cost(MNCORE2, [dram("f32", x.shape)], x, {})
    assert w.stages == (("dma", 768 + 32),) and w.bytes == 524288 and w.units == 4
    assert w.latency == 200 and w.span == 768 + 32 + 200  # in flight after the queue


def test_load_to_one_l2b_is_served_by_one_group_through_one_l2b_link():
    # (128,1024) on L2B 0 only: the L2B link (128 B/cycle) is slower than the group
    x = pe("f32", "(128,1024)/((8_L1B,16_MAB),(1024))")
    w = load_cost(MNCORE2, [dram("f32", x.shape)], x, {})
    assert w.cycles == 524288 // 128 + 32 and w.units == 1


def test_replicated_load_reads_dram_once_but_pays_for_every_copy_it_delivers():
    x = pe("f32", "(16,512)/((16),(512)); B@[L2B,L1B,MAB,PE]")
    w = load_cost(MNCORE2, [dram("f32", x.shape)], x, {})
    assert w.bytes == 32768            # DRAM traffic counted once, not once per copy
    # every group port delivers all of it to its L2Bs (32768 / 170.67 = 192), every L2B
    # link carries it all (256), and every PE's port takes its whole copy at 8 B/cycle
    assert dict(w.links) == {"dram": 192, "l2b": 256, "l1b": 64, "pe": 4096}
    assert w.cycles == 32768 // 8 + 32
    spread = load_cost(MNCORE2, [dram("f32", x.shape)],
                       pe("f32", "(16,512)/((8_L2B,2),(4_PE,128))"), {})
    assert w.cycles > 10 * spread.cycles


def test_store_of_a_replicated_value_writes_one_copy_shared_by_its_units():
    y = pe("f32", "(16,512)/((16),(512)); B@[L2B,L1B,MAB,PE]")
    w = store_cost(MNCORE2, [y], dram("f32", y.shape), {})
    assert w.bytes == 32768
    assert w.cycles == 48 + 32  # like a store spread over all 8 L2Bs and 64 L1Bs


def test_elementwise_works_through_local_elements_by_lanes():
    x = pe("f32", ROWS)
    assert cost_of("exp", [x], x).stages == (("vector", 1024 // 2 * 4 + 4),)
    assert cost_of("add", [x, x], x).cycles == 512 + 4
    xb = pe("bf16", ROWS)
    assert cost_of("add", [xb, xb], xb).cycles == 256 + 4


def test_lanes_are_two_for_32_bit_and_four_for_16_bit_and_bool():
    assert lanes(MNCORE2, pe("f32", ROWS)) == 2
    assert lanes(MNCORE2, pe("i32", ROWS)) == 2
    assert lanes(MNCORE2, pe("bf16", ROWS)) == 4
    assert lanes(MNCORE2, pe("bool", ROWS)) == 4      # never faster than the 16-bit peak
    assert lanes(MNCORE2, pe("bool", ROWS), pe("f32", ROWS)) == 2


def test_transcendentals_cost_more_per_element_than_arithmetic():
    x = pe("f32", ROWS)
    mul = cost_of("mul", [x, x], x).cycles
    for op in ("exp", "log", "tanh", "div", "sqrt", "rsqrt", "reciprocal"):
        assert cost_of(op, [x] * len(OPS[op].tensor_params), x).cycles > mul


def test_local_reduction_is_one_vector_pass():
    x = pe("f32", ROWS)
    out = pe("f32", "(128,1)/((8_L2B,16_MAB),(1))")
    w = cost_of("reduce_max", [x], out, axis=1, keepdims=True)
    assert w.stages == (("vector", 512 + 4),) and w.flops == 128 * 1024


def test_spread_reduction_is_a_local_pass_then_the_tree():
    x = pe("f32", SPREAD_ROWS)
    out = pe("f32", "(128,1)/((8_L2B,16_MAB),(1)); B@[L1B,PE]")
    w = cost_of("reduce_sum", [x], out, axis=1, keepdims=True)
    # local: 32/2 + 4; up: under each L1B 64 PEs x 4 B = 256 B at 512 B/cycle = 1, then
    # the 8 L1Bs of an L2B: 8 x 16 partials x 4 B = 512 B at 128 B/cycle = 4; down: the 16
    # combined results per L1B (64 B) and per L2B (64 B) broadcast back, 1 + 1; two levels
    # of a round trip (L1B, PE): 2 x 24
    assert w.stages == (("vector", 20), ("tree", 1 + 4 + 1 + 1 + 48))
    assert w.resource == "vector+tree" and w.cycles == 75
    assert dict(w.links) == {"l2b": 5, "l1b": 2, "pe": 2}


def test_a_stored_only_reduction_does_not_come_back_down():
    x = pe("f32", SPREAD_ROWS)
    out = pe("f32", "(128,1)/((8_L2B,16_MAB),(1)); B@[L1B,PE]")
    w = cost_of("reduce_sum", [x], out, axis=1, keepdims=True, _delivery="none")
    # the up trip only (1 + 4) and half the round trip's latency
    assert w.stages == (("vector", 20), ("tree", 1 + 4 + 24))


def test_matmul_pads_m_and_n_to_the_mau_tile_and_streams_k():
    a = pe("bf16", "(128,64)/((8_L2B,16_MAB),(64))")
    b = pe("bf16", "(64,64)/((64),(64)); B@[L2B,MAB]")
    out = pe("f32", "(128,64)/((8_L2B,16_MAB),(64))")
    # each MAU sees m=1 (padded to 16), n=64 (4 tiles), k=64
    assert matmul_cost(MNCORE2, [a, b], out, {}).stages == (("matrix", 4 * 64 + 16),)
    a32, b32 = (TensorType("f32", t.shape, "pe", t.layout) for t in (a, b))
    # f32 tile 8x4: ceil(1/8) * ceil(64/4) * 64
    assert matmul_cost(MNCORE2, [a32, b32], out, {}).stages == (("matrix", 16 * 64 + 16),)


def test_matmul_with_k_spread_sums_partials_in_the_tree():
    a = pe("bf16", "(16,64)/((16),(8_L1B,8))")
    b = pe("bf16", "(64,16)/((8_L1B,8),(16))")
    out = pe("f32", "(16,16)/((16),(16)); B@[L1B]")
    w = matmul_cost(MNCORE2, [a, b], out, {})
    # up: 8 partials of 1 KiB through each L2B link (128 B/cycle) = 64, but each MAU's
    # PE port sends its 1 KiB at 8 B/cycle = 128; down: the 1 KiB sum, 8 on the link and
    # 128 on every receiving port; + 24 for the level
    assert w.stages == (("matrix", 8 + 16), ("tree", 128 + 128 + 24))
    assert w.flops == 2 * 16 * 16 * 64


def test_relayout_crosses_the_links_of_the_highest_level_that_changes():
    src, dst = pe("f32", ROWS), pe("f32", SPREAD_ROWS)
    w = relayout_cost(MNCORE2, [src], dst, {})
    # rows move among the L1Bs of each L2B: 64 KiB through each L2B link at 128 B/cycle
    # (and each sending PE's 4 KiB through its port at 8 B/cycle, as long), crossing
    # three levels (L1B, MAB, PE)
    assert w.stages == (("tree", 65536 // 128 + 3 * 24),)
    assert dict(w.links) == {"l2b": 512, "l1b": 128, "pe": 512}


def test_relayout_across_l2bs_goes_through_the_dram_group_ports():
    # 4 MiB, all to all across the L2Bs: rows over the L2Bs to columns over them
    src = pe("f32", "(1024,1024)/((8_L2B,8_L1B,16_MAB),(4_PE,256))")
    dst = pe("f32", "(1024,1024)/((8_L1B,16_MAB,8),(8_L2B,4_PE,32))")
    w = relayout_cost(MNCORE2, [src], dst, {})
    # each group port carries its two L2Bs' 1 MiB: 1048576 / 170.67 = 6144 cycles, more
    # than the L2B links' 512 KiB at 128 B/cycle (4096); four levels crossed
    assert dict(w.links) == {"dram": 6144, "l2b": 4096, "l1b": 128, "pe": 128}
    assert w.cycles == 6144 + 4 * 24
    # so the chip moves it no faster than its DRAM bandwidth
    assert w.bytes / w.cycles <= MNCORE2.dram_bytes_per_cycle


def test_relayout_from_a_replicated_value_is_a_local_copy():
    src = pe("f32", "(16,512)/((16),(512)); B@[L2B,L1B,MAB,PE]")
    dst = pe("f32", "(16,512)/((8_L2B,2),(8_L1B,64))")
    w = relayout_cost(MNCORE2, [src], dst, {})
    # one run of 128 local elements: its issue cycle, 64 words, the latency
    assert w.stages == (("vector", 1 + 2 * 64 // 2 + 4),) and w.flops == 0


def test_transpose_is_free_unless_local_data_is_reordered():
    x = pe("f32", "(128,1024)/((8_L2B,16_MAB),(1024))")
    out = pe("f32", "(1024,128)/((1024),(8_L2B,16_MAB))")
    assert transpose_cost(MNCORE2, [x], out, {"perm": None}) is FREE
    y = pe("f32", "(16,32)/((16),(32))")
    w = transpose_cost(MNCORE2, [y], pe("f32", "(32,16)/((32),(16))"), {"perm": (1, 0)})
    # every element is a run of its own: one lane insert each
    assert w.resource == "vector" and w.cycles == 512 + 4


def test_free_ops_are_the_relabellings_only():
    b = Builder(SMALL)
    x = b.input("x", dram("f32", (8, 16)))
    xs = b.add("load", [x], {"layout": parse_layout("(8,16)/((2_L2B,4),(16))")})
    r = b.add("reshape", [xs], {"shape": (8, 4, 4)})
    s = b.add("slice", [x], {"bounds": ((0, 4), (0, 16))})
    assert VectorCost(1)(SMALL, [b.nodes[xs].type], b.nodes[xs].type, {}).cycles > 0
    for i in (r, s):
        n = b.nodes[i]
        ins = [b.nodes[a].type for a in n.args]
        assert OPS[n.op].cost(SMALL, ins, n.type, dict(n.attrs)) is FREE
