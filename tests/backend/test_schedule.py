"""The list scheduler, memory over time, the profile and the run command's views of it."""

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from stochopt.backend.cost import cost, peak_memory, roofline_of_kernel
from stochopt.cli import main
from stochopt.errors import ConstraintError
from stochopt.leir import parse
from stochopt.machine import SMALL

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"


def two_rows_kernel(cols: int) -> str:
    t = f"f32[4,{cols}] @ dram"
    return f'''def kernel(a: "{t}", c: "{t}") -> "f32[4,1] @ dram":
    xa = load(a, "(4,{cols})/((4_PE),({cols}))")
    ra = reduce_sum(xa, axis=1, keepdims=True)
    xc = load(c, "(4,{cols})/((4_PE),({cols}))")
    rc = reduce_sum(xc, axis=1, keepdims=True)
    return store(ra + rc)
'''


def ops_by_name(profile):
    return {o.name: o for o in profile.ops}


def test_loads_overlap_compute_when_memory_allows():
    p = cost(parse(two_rows_kernel(256), SMALL), SMALL)
    o = ops_by_name(p)
    assert o["xc"].start == o["xa"].stages[0][2]  # issued once the queue is free
    assert o["xc"].start < o["xa"].end            # while the first is still in flight
    assert o["xc"].start < o["ra"].end            # and during the first sum
    assert p.cycles < sum(x.end - x.start for x in p.ops)


def test_a_transfer_is_in_flight_for_the_dma_latency_after_its_queue_time():
    p = cost(parse(two_rows_kernel(256), SMALL), SMALL)
    o = ops_by_name(p)
    _, start, queue_end = o["xa"].stages[0]
    assert queue_end - start == o["xa"].cycles
    assert o["xa"].end == queue_end + SMALL.latency["dma"]
    assert o["ra"].start >= o["xa"].end  # compute waits for the data to land


def tiles_kernel(tiles: int, order: str) -> str:
    """x + y over f32[64,256] on small, in row tiles, loads issued one tile ahead
    ("ahead") or each tile loaded, added and stored in turn ("serial")."""
    rows = 64 // tiles
    lay = f'"({rows},256)/((2_L2B,2_L1B,{rows // 16}_MAB,4_PE),(256))"'  # tiles: 1, 2
    loads = [f"    a{t} = load(x[{t * rows}:{(t + 1) * rows}, 0:256], {lay})\n"
             f"    b{t} = load(y[{t * rows}:{(t + 1) * rows}, 0:256], {lay})\n"
             for t in range(tiles)]
    work = [f"    s{t} = store(a{t} + b{t})\n" for t in range(tiles)]
    body = "".join(loads[:1] + [x for t in range(tiles) for x in
                                (loads[t + 1:t + 2] + [work[t]])]) if order == "ahead" \
        else "".join(loads[t] + work[t] for t in range(tiles))
    ret = f"concat([{', '.join(f's{t}' for t in range(tiles))}], axis=0)" if tiles > 1 \
        else "s0"
    return (f'def k(x: "f32[64,256] @ dram", y: "f32[64,256] @ dram") -> '
            f'"f32[64,256] @ dram":\n{body}    return {ret}\n')


def test_tiles_loaded_ahead_overlap_the_dma_latency_and_the_compute():
    one = cost(parse(tiles_kernel(1, "ahead"), SMALL), SMALL)
    ahead = cost(parse(tiles_kernel(2, "ahead"), SMALL), SMALL)
    serial = cost(parse(tiles_kernel(2, "serial"), SMALL), SMALL)
    assert ahead.cycles < one.cycles
    assert ahead.cycles < serial.cycles  # a store issued before the next load stalls the queue
    assert ahead.busy["dma"] == one.busy["dma"] + 3 * SMALL.dma_issue  # each tile issues
    assert ahead.dram_bytes == one.dram_bytes


def test_a_load_waits_for_memory_to_be_freed():
    # each loaded value is 20 KiB per PE; two do not fit in 32 KiB together
    p = cost(parse(two_rows_kernel(5120), SMALL), SMALL)
    o = ops_by_name(p)
    assert o["xc"].start >= o["ra"].end
    assert p.peak_local_bytes <= SMALL.pe_local_bytes


def fits_from(held: list[list], t: int, nbytes: int, capacity: int) -> int | None:
    """The definition _Memory.earliest_fit computes: the earliest of t and the releases
    after it from which nbytes more fit at every later moment, given (start, release or
    None, bytes) of what is held."""
    events = sorted({h[0] for h in held} | {h[1] for h in held if h[1] is not None})
    for at in [t] + sorted({h[1] for h in held if h[1] is not None and h[1] > t}):
        moments = [at] + [e for e in events if e > at]
        if all(sum(b for start, release, b in held
                   if start <= y and (release is None or y < release)) + nbytes <= capacity
               for y in moments):
            return at
    return None


def test_memory_fits_a_value_from_the_first_moment_every_later_one_has_room():
    from stochopt.backend.cost import _Memory
    rng = random.Random(0)
    for _ in range(400):
        capacity = rng.randint(40, 160)
        memory = _Memory(capacity)
        for node in range(rng.randint(1, 10)):
            start = rng.randint(0, 12)  # few times: many events share one
            memory.hold(node, start, rng.randint(1, 40))
            if rng.random() < 0.7:
                memory.release(node, start + rng.randint(0, 8))
        t, nbytes = rng.randint(0, 20), rng.randint(1, 60)
        held = [list(h) for h in memory.held.values()]
        assert memory.earliest_fit(t, nbytes, rng.randint(0, t)) == \
            fits_from(held, t, nbytes, capacity)


def test_memory_keeps_its_answers_over_a_whole_schedule_of_holds_and_releases():
    # as the scheduler asks: values held and released in turn, a question before each
    # hold with a floor that only rises; the events are kept between the questions
    from stochopt.backend.cost import _Memory
    rng = random.Random(1)
    for _ in range(150):
        capacity = rng.randint(60, 200)
        memory = _Memory(capacity)
        floor = 0
        for node in range(rng.randint(2, 25)):
            t = floor + rng.randint(0, 10)
            nbytes = rng.randint(1, 50)
            held = [list(h) for h in memory.held.values()]
            floor = rng.randint(floor, t)
            assert memory.earliest_fit(t, nbytes, floor) == \
                fits_from(held, t, nbytes, capacity)
            memory.hold(node, t, nbytes)
            for old in rng.sample(sorted(memory.held), k=min(2, len(memory.held))):
                if rng.random() < 0.5:  # a later reader moves a release on
                    memory.release(old, memory.held[old][0] + rng.randint(0, 15))


def test_out_of_memory_names_the_op_the_level_and_the_bytes():
    text = '''def kernel(a: "f32[4,5120] @ dram") -> "f32[4,5120] @ dram":
    xa = load(a, "(4,5120)/((4_PE),(5120))")
    e = exp(xa)
    return store(e + xa)
'''
    with pytest.raises(ConstraintError) as err:
        cost(parse(text, SMALL), SMALL)
    message = str(err.value)
    assert "line 3" in message and "exp (e)" in message
    assert "PE local memory" in message
    assert "20480 bytes" in message and "32768" in message
    assert "xa" in message  # what stays live


def test_views_share_their_inputs_bytes():
    text = '''def kernel(a: "f32[4,64] @ dram") -> "f32[4,8,8] @ dram":
    xa = load(a, "(4,64)/((4_PE),(64))")
    r = reshape(xa, (4, 8, 8))
    return store(r)
'''
    k = parse(text, SMALL)
    assert peak_memory(k, SMALL) == (64 * 4, 1)
    assert cost(k, SMALL).ops[2].resource is None


def test_a_tensor_loaded_twice_is_paid_twice():
    once = '''def kernel(a: "f32[8,64] @ dram") -> "f32[8,64] @ dram":
    x = load(a, "(8,64)/((2_L2B,4_MAB),(64))")
    return store(x + x)
'''
    twice = '''def kernel(a: "f32[8,64] @ dram") -> "f32[8,64] @ dram":
    x = load(a, "(8,64)/((2_L2B,4_MAB),(64))")
    y = load(a, "(8,64)/((2_L2B,4_MAB),(64))")
    return store(x + y)
'''
    p1, p2 = cost(parse(once, SMALL), SMALL), cost(parse(twice, SMALL), SMALL)
    load = p1.ops[1].cycles
    assert p2.busy["dma"] == p1.busy["dma"] + load
    assert p2.dram_bytes == p1.dram_bytes + 8 * 64 * 4
    # the roofline counts the input once: the second read is the kernel's own waste
    assert roofline_of_kernel(parse(twice, SMALL), SMALL) == roofline_of_kernel(
        parse(once, SMALL), SMALL)


@pytest.mark.parametrize("name, cycles", [("softmax_plain", 7652), ("softmax_fast", 2264)])
def test_softmax_examples_cost_what_docs_machine_md_says(name, cycles):
    p = cost(parse((EXAMPLES / f"{name}.leir").read_text()))
    assert p.cycles == cycles
    assert p.critical_path_cycles == cycles  # a chain: every op waits for the one before
    assert p.critical_path == tuple(range(len(p.ops)))
    docs = (ROOT / "docs" / "machine.md").read_text()
    assert f"{cycles}" in docs


def test_profile_json_carries_every_fact_of_the_profile():
    p = cost(parse((EXAMPLES / "softmax_fast.leir").read_text()))
    facts = p.to_json()
    assert facts["cycles"] == p.cycles
    assert set(facts["resources"]) == {"dma", "tree", "vector", "matrix"}
    assert facts["resources"]["dma"]["busy_cycles"] == 2 * 800
    for op in facts["ops"]:
        assert {"op", "resource", "start", "end", "cycles", "bytes", "flops", "units"} <= set(op)
    assert {"critical_path", "critical_path_cycles", "peak_local_bytes", "bottleneck",
            "dram_bytes", "flops"} <= set(facts)
    json.dumps(facts)


def test_run_json_has_cycles_ops_resources_memory_and_roofline():
    result = CliRunner().invoke(main, ["run", str(EXAMPLES / "softmax_fast.leir"), "--json"])
    assert result.exit_code == 0, result.output
    facts = json.loads(result.output)
    assert facts["cycles"] == 2264 and facts["roofline_cycles"] == 1536
    assert facts["bound_cycles"] == 1800 and facts["bound_share"] == round(1800 / 2264, 4)
    assert facts["peak_local_bytes"] == 260
    assert facts["resources"]["dma"]["busy_fraction"] == round(1600 / 2264, 4)
    assert [o["op"] for o in facts["ops"]][1:] == ["load", "reduce_max", "sub", "exp",
                                                 "reduce_sum", "reciprocal", "mul", "store"]


def test_run_profile_shows_the_op_table_and_the_resources():
    result = CliRunner().invoke(main, ["run", str(EXAMPLES / "softmax_plain.leir"),
                                       "--profile"])
    assert result.exit_code == 0, result.output
    out = result.output
    for text in ("cycles 7652", "roofline 1536", "bound 1800", "reduce_max", "vector",
                 "busy cycles", "critical path", "5652"):
        assert text in out


def test_busy_fractions_are_busy_cycles_over_the_makespan():
    p = cost(parse((EXAMPLES / "softmax_plain.leir").read_text()))
    assert p.busy == {"dma": 1600, "tree": 0, "vector": 5652, "matrix": 0}
    assert p.busy_fraction()["vector"] == pytest.approx(5652 / 7652)
    assert p.bottleneck() == "vector"


def test_two_stage_ops_report_when_each_stage_ran():
    p = cost(parse((EXAMPLES / "softmax_fast.leir").read_text()))
    reduce_max = p.ops[2]
    assert reduce_max.resource == "vector+tree"
    assert reduce_max.stages == (("vector", 1000, 1020), ("tree", 1020, 1075))
    assert p.ops[1].stages == (("dma", 0, 800),) and p.ops[1].end == 1000
    assert p.ops[0].stages == ()
