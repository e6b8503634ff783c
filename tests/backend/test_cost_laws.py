"""Laws of the cost model, checked on generated kernels and layouts (hypothesis).

If one of these fails, the search can game the model: report the shrunk example."""

from dataclasses import replace

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from stochopt.backend.bound import bound_of_kernel
from stochopt.backend.cost import cost, peak_rates, roofline_of_kernel
from stochopt.errors import ConstraintError
from stochopt.leir.cost_rules import DRAM_EXTENT, LINKS, lanes
from stochopt.leir.ir import Builder, build
from stochopt.leir.layout import Factor, Layout
from stochopt.leir.ops import OPS
from stochopt.leir.rules import Const
from stochopt.leir.types import TensorType
from stochopt.machine import MNCORE2, SMALL
from tests.strategies import kernels, layouts
from tests.tiers import QUICK_AND_FULL, examples

BIG_DIMS = (8, 16, 32, 64, 128)
# examples of each law in the fast tier (the full variant: the profile's count, or the
# count the law names)
QUICK = 12


def _cost_or_none(kernel, machine):
    try:
        return cost(kernel, machine)
    except ConstraintError:  # does not fit in PE memory: not a valid program to cost
        return None


# ---------------------------------------------------------------------------------
# laws of every kernel
# ---------------------------------------------------------------------------------

def _check_laws(kernel, machine):
    profile = _cost_or_none(kernel, machine)
    if profile is None:
        return
    # no op that moves bytes or computes is free
    for o in profile.ops:
        if o.bytes or o.flops:
            assert o.cycles > 0, o
    # the makespan covers the busiest resource and the longest dependent chain
    assert profile.cycles >= max(profile.busy.values())
    assert profile.cycles >= profile.critical_path_cycles
    path = profile.critical_path
    assert all(b in kernel.nodes[a2].inputs for b, a2 in zip(path, path[1:], strict=False))
    # no kernel beats its roofline, nor the reachable bound above it
    roofline = roofline_of_kernel(kernel, machine)
    bound = bound_of_kernel(kernel, machine)
    assert profile.cycles >= bound >= roofline
    _check_links(profile)
    # memory never goes over, and the peak is the sum of values live at some time
    assert 0 <= profile.peak_local_bytes <= machine.pe_local_bytes
    # an op never starts before its inputs end
    for i, n in enumerate(kernel.nodes):
        for a in n.inputs:
            assert profile.ops[i].start >= profile.ops[a].end


def _check_links(profile):
    """No link class carries more than its bandwidth over any interval: an op carries its
    work on a link spread evenly over its moving stage, and where such spans overlap their
    rates add up to at most the link's whole bandwidth."""
    for link in LINKS:
        spans = [(a, b, work / (b - a)) for o in profile.ops
                 for name, a, b, work in o.links if name == link]
        for point in {a for a, _, _ in spans}:
            assert sum(r for a, b, r in spans if a <= point < b) <= 1 + 1e-9, (link, point)
        assert sum(r * (b - a) for a, b, r in spans) == pytest.approx(profile.link_busy[link])
    for o in profile.ops:
        for _, a, b, work in o.links:
            moving = [s for s in o.stages if s[0] in ("dma", "tree")][-1]
            assert (moving[1], moving[2]) == (a, b) and 0 < work <= b - a


def _laws_hold(full: bool, machine, count: int | None = None, **shape) -> None:
    """The cost laws on generated kernels of this shape (kernels(...)), on `machine`."""
    @examples(full, quick=QUICK, count=count)
    @given(kernels(machine=machine, **shape))
    def law(kernel):
        _check_laws(kernel, machine)

    law()


@pytest.mark.parametrize("full", QUICK_AND_FULL)
def test_laws_hold_on_small_kernels(full):
    _laws_hold(full, SMALL, max_ops=14)


@pytest.mark.parametrize("full", QUICK_AND_FULL)
def test_laws_hold_under_memory_pressure(full):
    _laws_hold(full, SMALL, count=40, max_ops=16, dims=BIG_DIMS)


@pytest.mark.parametrize("full", QUICK_AND_FULL)
def test_laws_hold_on_mncore2(full):
    _laws_hold(full, MNCORE2, count=40, max_ops=16, dims=BIG_DIMS + (256,))


@pytest.mark.parametrize("full", QUICK_AND_FULL)
def test_appending_work_never_makes_a_kernel_faster(full):
    """The same kernel with one more op before its store costs at least as much."""
    @examples(full, quick=QUICK)
    @given(kernels(machine=SMALL, max_ops=10), st.data())
    def law(kernel, data):
        nodes = list(kernel.nodes[:-1])
        values = [i for i, n in enumerate(nodes) if n.type.location == "pe"]
        x = data.draw(st.sampled_from(values))
        t = nodes[x].type
        op = "neg" if t.dtype != "bool" else "eq"
        extra = Builder(SMALL)
        extra.nodes = list(nodes)
        extra.add(op, [x] if op == "neg" else [x, x], {})
        longer = build("kernel", extra.nodes + [kernel.nodes[-1]], len(extra.nodes), SMALL)
        before, after = _cost_or_none(kernel, SMALL), _cost_or_none(longer, SMALL)
        if before is not None and after is not None:
            assert after.cycles >= before.cycles

    law()


def test_cost_is_a_pure_function_of_kernel_and_machine():
    from pathlib import Path

    from stochopt.leir import parse
    text = (Path(__file__).resolve().parents[2] / "docs/examples/softmax_fast.leir").read_text()
    k = parse(text)
    assert cost(k) == cost(k) == cost(parse(text), "mncore2")


# ---------------------------------------------------------------------------------
# more bytes or elements never cost less (op by op, all else equal)
# ---------------------------------------------------------------------------------

SHAPES = st.lists(st.sampled_from((1, 2, 3, 4, 8, 16)), min_size=1, max_size=3).map(tuple)


def _grow(layout: Layout, axis: int, k: int) -> Layout:
    """The same placement with k times more local elements on one axis."""
    shape = list(layout.shape)
    shape[axis] *= k
    axes = list(layout.axes)
    axes[axis] = axes[axis] + (Factor(k),)
    return Layout(tuple(shape), tuple(axes), layout.replicated)


def _pe(dtype, layout):
    return TensorType(dtype, layout.shape, "pe", layout)


@st.composite
def grown_pairs(draw, machine=SMALL):
    shape = draw(SHAPES)
    small = draw(layouts(shape, machine))
    axis = draw(st.integers(0, len(shape) - 1))
    big = _grow(small, axis, draw(st.sampled_from((2, 3, 4))))
    assume(big.local_elements() * 4 * 3 <= machine.pe_local_bytes)  # a few values fit
    return small, big, axis


def _cycles(op, ins, out, machine=SMALL, **attrs):
    return OPS[op].cost(machine, ins, out, attrs).cycles


@pytest.mark.parametrize("full", QUICK_AND_FULL)
def test_more_local_elements_never_cost_less_elementwise(full):
    @examples(full, quick=QUICK)
    @given(grown_pairs(), st.sampled_from(("neg", "exp", "tanh", "add", "div", "gt", "cast")),
           st.sampled_from(("f32", "bf16")))
    def law(pair, op, dtype):
        small, big, _ = pair
        arity = len(OPS[op].tensor_params)
        for lay in (small, big):
            assert _cycles(op, [_pe(dtype, lay)] * arity, _pe(dtype, lay), dtype="f32") > 0
        assert (_cycles(op, [_pe(dtype, big)] * arity, _pe(dtype, big), dtype="f32")
                >= _cycles(op, [_pe(dtype, small)] * arity, _pe(dtype, small), dtype="f32"))

    law()


@pytest.mark.parametrize("full", QUICK_AND_FULL)
def test_more_elements_never_cost_less_to_load_store_reduce_or_relayout(full):
    @examples(full, quick=QUICK)
    @given(grown_pairs(), st.data())
    def law(pair, data):
        small, big, _ = pair
        costs = []
        other = data.draw(layouts(small.shape, SMALL))
        axis = data.draw(st.integers(0, len(small.shape) - 1))
        grow_axis = pair[2]
        k = big.shape[grow_axis] // small.shape[grow_axis]
        for src, dst in ((small, other), (big, _grow(other, grow_axis, k))):
            x = _pe("f32", src)
            d = TensorType("f32", x.shape, "dram")
            b = Builder(SMALL)
            i = b.input("x", d)
            xs = b.add("load", [i], {"layout": src})
            r = b.add("reduce_sum", [xs], {"axis": axis, "keepdims": True})
            rl = b.add("relayout", [xs], {"layout": dst})
            costs.append([_cycles("load", [d], x), _cycles("store", [x], d),
                          _cycles("reduce_sum", [x], b.nodes[r].type, axis=axis, keepdims=True),
                          _cycles("relayout", [x], b.nodes[rl].type)])
        assert all(big_c >= small_c for small_c, big_c in zip(*costs, strict=True)), costs

    law()


@pytest.mark.parametrize("full", QUICK_AND_FULL)
def test_f32_never_costs_less_than_bf16(full):
    @examples(full, quick=QUICK)
    @given(grown_pairs(), st.sampled_from(("exp", "add", "reduce_max")))
    def law(pair, op):
        _, lay, _ = pair
        attrs = {"axis": 0, "keepdims": True} if op == "reduce_max" else {}
        out = lay if op != "reduce_max" else None
        for_dtype = {}
        for dtype in ("bf16", "f32"):
            x = _pe(dtype, lay)
            b = Builder(SMALL)
            i = b.input("x", TensorType(dtype, lay.shape, "dram"))
            xs = b.add("load", [i], {"layout": lay})
            args = [xs] * len(OPS[op].tensor_params)
            o = b.nodes[b.add(op, args, attrs)].type if out is None else x
            for_dtype[dtype] = (_cycles(op, [x] * len(args), o, **attrs),
                                _cycles("load", [b.nodes[i].type], x))
        assert all(f >= h for f, h in zip(for_dtype["f32"], for_dtype["bf16"], strict=True))

    law()


def _matmul_kernel(dtype, m, k, n, machine=MNCORE2):
    """(m, k) @ (k, n): rows of a over the L2Bs, columns of b over the L1Bs, K local."""
    b = Builder(machine)
    a_in = b.input("a", TensorType(dtype, (m, k), "dram"))
    b_in = b.input("b", TensorType(dtype, (k, n), "dram"))
    a_lay = Layout((m, k), ((Factor(8, "L2B"), Factor(m // 8)), (Factor(k),)),
                   frozenset({"L1B"}))
    b_lay = Layout((k, n), ((Factor(k),), (Factor(8, "L1B"), Factor(n // 8))),
                   frozenset({"L2B"}))
    a = b.add("load", [a_in], {"layout": a_lay})
    bb = b.add("load", [b_in], {"layout": b_lay})
    c = b.add("matmul", [a, bb], {})
    return b.finish("kernel", b.add("store", [c], {}))


def _matmul_cycles(dtype, m, k, n):
    p = cost(_matmul_kernel(dtype, m, k, n))
    return p.ops[4].cycles, p.cycles


@pytest.mark.parametrize("m, k, n", [(128, 16, 128), (256, 32, 256), (512, 16, 256)])
def test_bf16_matmul_is_faster_than_f32_of_the_same_shape(m, k, n):
    assert _matmul_cycles("bf16", m, k, n) < _matmul_cycles("f32", m, k, n)


@pytest.mark.parametrize("full", QUICK_AND_FULL)
def test_bf16_matmul_is_never_slower_than_f32(full):
    @examples(full, quick=QUICK)
    @given(st.sampled_from((8, 16, 64, 128)), st.sampled_from((1, 16, 64)),
           st.sampled_from((8, 16, 64, 128)))
    def law(m, k, n):
        bf16, f32 = _matmul_cycles("bf16", m, k, n), _matmul_cycles("f32", m, k, n)
        assert bf16[0] <= f32[0] and bf16[1] <= f32[1]

    law()


@pytest.mark.parametrize("full", QUICK_AND_FULL)
def test_matmul_never_gets_cheaper_with_a_bigger_operand(full):
    @examples(full, quick=QUICK)
    @given(st.sampled_from((16, 32, 64)), st.sampled_from((16, 32, 64)),
           st.sampled_from((16, 32, 64)), st.sampled_from(("bf16", "f32")))
    def law(m, k, n, dtype):
        base = _matmul_cycles(dtype, m, k, n)
        for bigger in ((2 * m, k, n), (m, 2 * k, n), (m, k, 2 * n)):
            grown = _matmul_cycles(dtype, *bigger)
            assert grown[0] >= base[0] and grown[1] >= base[1]

    law()


# ---------------------------------------------------------------------------------
# spreading over more PEs
# ---------------------------------------------------------------------------------

def _exp_kernel(rows: int, cols: int, levels: list[tuple[str, int]], dtype: str = "f32"):
    b = Builder(MNCORE2)
    x = b.input("x", TensorType(dtype, (rows, cols), "dram"))
    used = 1
    for _, n in levels:
        used *= n
    factors = tuple(Factor(n, lv) for lv, n in levels) + ((Factor(rows // used),)
                                                          if rows > used else ())
    lay = Layout((rows, cols), (factors, (Factor(cols),)))
    e = b.add("exp", [b.add("load", [x], {"layout": lay})], {})
    return b.finish("kernel", b.add("store", [e], {}))


SPREADS = [[], [("PE", 4)], [("MAB", 16), ("PE", 4)], [("L1B", 8), ("MAB", 16), ("PE", 4)],
           [("L2B", 8), ("L1B", 8), ("MAB", 16), ("PE", 4)]]


@pytest.mark.parametrize("cols, dtype", [(1, "f32"), (1, "bf16"), (2, "bf16")])
def test_spreading_elementwise_work_helps_until_overheads_dominate(cols, dtype):
    rows = 4096
    exp_cycles, kernel_cycles = [], []
    for levels in SPREADS:
        k = _exp_kernel(rows, cols, levels, dtype)
        p = cost(k)
        exp_cycles.append(p.ops[2].cycles)
        kernel_cycles.append(p.cycles)
        local = k.nodes[2].type.local_bytes() // (4 if dtype == "f32" else 2)
        if local <= lanes(MNCORE2, k.nodes[2].type):  # one ALU word: only overhead left
            assert p.ops[2].cycles == OPS["exp"].cost.cycles_per_elem + MNCORE2.latency["vector"]
    assert exp_cycles == sorted(exp_cycles, reverse=True)
    assert exp_cycles[0] > 100 * exp_cycles[-1]
    assert kernel_cycles[:3] == sorted(kernel_cycles[:3], reverse=True)
    # one row per PE is a run shorter than a DRAM burst: scattering a row to every PE
    # costs a DRAM request per row, more than the spread compute saves
    spread = cost(_exp_kernel(rows, cols, SPREADS[-1], dtype))
    assert spread.ops[1].cycles >= rows / MNCORE2.dram_groups / MNCORE2.dma_runs_per_cycle
    assert kernel_cycles[-1] > min(kernel_cycles)


def test_idle_pes_do_not_help():
    """Replicating a value over idle levels leaves every PE the same local work, and
    broadcasting it there costs more than spreading it."""
    cols = 16
    spread = _exp_kernel(4096, cols, SPREADS[2])
    b = Builder(MNCORE2)
    x = b.input("x", TensorType("f32", (4096, cols), "dram"))
    lay = Layout((4096, cols), ((Factor(16, "MAB"), Factor(4, "PE"), Factor(64)),
                                (Factor(cols),)), frozenset({"L2B", "L1B"}))
    e = b.add("exp", [b.add("load", [x], {"layout": lay})], {})
    replicated = b.finish("kernel", b.add("store", [e], {}))
    assert cost(replicated).ops[2].cycles == cost(spread).ops[2].cycles
    assert cost(replicated).ops[1].cycles >= cost(spread).ops[1].cycles
    assert cost(_exp_kernel(4096, cols, SPREADS[-1])).cycles < cost(replicated).cycles


# ---------------------------------------------------------------------------------
# the roofline
# ---------------------------------------------------------------------------------

@pytest.mark.parametrize("full", QUICK_AND_FULL)
def test_compute_bound_chains_never_beat_the_roofline(full):
    """The hardest case for the vector peak: every PE busy, the narrowest lanes."""
    @examples(full, quick=QUICK, count=30)
    @given(st.sampled_from(("add", "mul", "maximum", "exp", "eq")), st.integers(1, 12),
           st.sampled_from(("bf16", "f32", "bool")), st.sampled_from((1, 2, 8, 64)))
    def law(op, length, dtype, local):
        if dtype == "bool" and op != "eq" or dtype != "bool" and op == "eq" and length > 1:
            op = "eq" if dtype == "bool" else "add"
        rows = MNCORE2.pes
        lay = Layout((rows, local), ((Factor(8, "L2B"), Factor(8, "L1B"), Factor(16, "MAB"),
                                      Factor(4, "PE")), (Factor(local),)))
        b = Builder(MNCORE2)
        x = b.input("x", TensorType(dtype, (rows, local), "dram"))
        v = b.add("load", [x], {"layout": lay})
        for _ in range(length):
            args = [v, v] if OPS[op].tensor_params[1:] else [v]
            if op not in ("eq", "exp") and dtype != "bool":
                args = [v, Const(1.0)]
            v = b.add(op, args, {})
        k = b.finish("kernel", b.add("store", [v], {}))
        assert cost(k).cycles >= roofline_of_kernel(k)

    law()


def test_the_roofline_is_reachable_within_a_small_factor():
    """A fully spread, DRAM-bound kernel lands near its roofline: the bound is not vacuous."""
    k = _exp_kernel(4096, 64, SPREADS[-1])
    assert cost(k).cycles <= 1.5 * roofline_of_kernel(k)


def test_peak_rates_are_the_fastest_any_op_can_go():
    peak = peak_rates(MNCORE2)
    assert peak["vector"] == 4096 * 4
    assert peak["matrix"] == 2 * 1024 * 256
    small = replace(SMALL, mau_f32=(32, 32))  # a machine whose f32 tile is the larger
    assert peak_rates(small)["matrix"] == 2 * small.mabs * 1024


# ---------------------------------------------------------------------------------
# access patterns and replication
# ---------------------------------------------------------------------------------

def _transfer_cycles(layout: Layout, machine=SMALL, whole=None, dtype="f32") -> tuple[int, int]:
    x = _pe(dtype, layout)
    d = TensorType(dtype, layout.shape, "dram")
    attrs = {} if whole is None else {DRAM_EXTENT: whole}
    return (OPS["load"].cost(machine, [d], x, attrs).cycles,
            OPS["store"].cost(machine, [x], d, attrs).cycles)


def _innermost_spread(layout: Layout) -> Layout | None:
    """The same units and local elements, with a spread factor of the last axis moved
    to its innermost place: consecutive elements then go to different PEs."""
    last = list(layout.axes[-1])
    spread = [f for f in last if f.level]
    if not spread or last[-1].level:
        return None
    last.remove(spread[0])
    axes = layout.axes[:-1] + (tuple(last + [spread[0]]),)
    return Layout(layout.shape, axes, layout.replicated)


@pytest.mark.parametrize("full", QUICK_AND_FULL)
def test_strided_never_cheaper_than_contiguous(full):
    """Shorter contiguous runs (a spread factor innermost, or a slice that cuts rows)
    never make a load or store cheaper, all else equal."""
    @examples(full, quick=QUICK)
    @given(SHAPES.filter(lambda s: s[-1] > 1), st.data(), st.sampled_from(("f32", "bf16")))
    def law(shape, data, dtype):
        layout = data.draw(layouts(shape, SMALL))
        whole = _transfer_cycles(layout, dtype=dtype)
        cut = tuple(data.draw(st.lists(st.booleans(), min_size=len(shape), max_size=len(shape))))
        sliced = _transfer_cycles(layout, whole=cut, dtype=dtype)
        assert all(s >= w for s, w in zip(sliced, whole, strict=True))
        strided = _innermost_spread(layout)
        if strided is not None:
            assert all(s >= w for s, w in zip(_transfer_cycles(strided, dtype=dtype), whole,
                                              strict=True))

    law()


@pytest.mark.parametrize("full", QUICK_AND_FULL)
def test_more_replication_never_cheaper(full):
    """Adding a B@ level to a layout (the same spread) never makes loading it, or moving
    a value to it, cheaper."""
    @examples(full, quick=QUICK)
    @given(SHAPES, st.data())
    def law(shape, data):
        layout = data.draw(layouts(shape, SMALL, replicate=True))
        free = [lv for lv in ("L2B", "L1B", "MAB", "PE")
                if lv not in layout.spread() and lv not in layout.replicated]
        assume(free)
        level = data.draw(st.sampled_from(free))
        more = Layout(layout.shape, layout.axes, layout.replicated | {level})
        assert _transfer_cycles(more)[0] >= _transfer_cycles(layout)[0]
        source = data.draw(layouts(shape, SMALL, replicate=False))
        x = _pe("f32", source)
        assert (_cycles("relayout", [x], _pe("f32", more))
                >= _cycles("relayout", [x], _pe("f32", layout)))

    law()
