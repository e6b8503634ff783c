"""The list scheduler, memory over time, the profile and the run command's views of it."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from stochopt.backend.cost import cost, peak_memory, roofline_of_kernel
from stochopt.backend.machine import SMALL
from stochopt.cli import main
from stochopt.errors import ConstraintError
from stochopt.leir import parse

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
    assert o["xc"].start == o["xa"].end      # the second load runs during the first sum
    assert o["xc"].start < o["ra"].end
    assert p.cycles < sum(x.cycles for x in p.ops)


def test_a_load_waits_for_memory_to_be_freed():
    # each loaded value is 20 KiB per PE; two do not fit in 32 KiB together
    p = cost(parse(two_rows_kernel(5120), SMALL), SMALL)
    o = ops_by_name(p)
    assert o["xc"].start >= o["ra"].end
    assert p.peak_local_bytes <= SMALL.pe_local_bytes


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


@pytest.mark.parametrize("name, cycles", [("softmax_plain", 7588), ("softmax_fast", 2206)])
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
    assert facts["resources"]["dma"]["busy_cycles"] == 2 * 968
    for op in facts["ops"]:
        assert {"op", "resource", "start", "end", "cycles", "bytes", "flops", "units"} <= set(op)
    assert {"critical_path", "critical_path_cycles", "peak_local_bytes", "bottleneck",
            "dram_bytes", "flops"} <= set(facts)
    json.dumps(facts)


def test_run_json_has_cycles_ops_resources_memory_and_roofline():
    result = CliRunner().invoke(main, ["run", str(EXAMPLES / "softmax_fast.leir"), "--json"])
    assert result.exit_code == 0, result.output
    facts = json.loads(result.output)
    assert facts["cycles"] == 2206 and facts["roofline_cycles"] == 1536
    assert facts["peak_local_bytes"] == 260
    assert facts["resources"]["dma"]["busy_fraction"] == round(1936 / 2206, 4)
    assert [o["op"] for o in facts["ops"]][1:] == ["load", "reduce_max", "sub", "exp",
                                                 "reduce_sum", "reciprocal", "mul", "store"]


def test_run_profile_shows_the_op_table_and_the_resources():
    result = CliRunner().invoke(main, ["run", str(EXAMPLES / "softmax_plain.leir"),
                                       "--profile"])
    assert result.exit_code == 0, result.output
    out = result.output
    for text in ("cycles 7588", "roofline 1536", "reduce_max", "vector", "busy cycles",
                 "critical path", "5652"):
        assert text in out


def test_busy_fractions_are_busy_cycles_over_the_makespan():
    p = cost(parse((EXAMPLES / "softmax_plain.leir").read_text()))
    assert p.busy == {"dma": 1936, "tree": 0, "vector": 5652, "matrix": 0}
    assert p.busy_fraction()["vector"] == pytest.approx(5652 / 7588)
    assert p.bottleneck() == "vector"


def test_two_stage_ops_report_when_each_stage_ran():
    p = cost(parse((EXAMPLES / "softmax_fast.leir").read_text()))
    reduce_max = p.ops[2]
    assert reduce_max.resource == "vector+tree"
    assert reduce_max.stages == (("vector", 968, 988), ("tree", 988, 1046))
    assert p.ops[1].stages == (("dma", 0, 968),)
    assert p.ops[0].stages == ()
