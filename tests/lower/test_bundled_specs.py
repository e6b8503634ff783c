"""Every bundled spec lowers to a kernel that round-trips, fits, runs, and computes what
its numpy reference computes."""

from __future__ import annotations

from math import prod

import pytest

from stochopt.backend.cost import cost
from stochopt.lower.catalog import bundled_spec_paths, spec_table
from stochopt.lower.roofline import spec_roofline
from stochopt.machine import load_machine
from stochopt.spec import load_spec

PATHS = bundled_spec_paths()
REQUIRED_SPECS = {"vector_add", "softmax", "rmsnorm", "layernorm", "gelu", "swiglu", "matmul",
                "matmul_bias_gelu", "attention_scores", "attention_decode", "rotary",
                "mla_decode"}


def test_every_spec_the_project_promises_is_bundled():
    assert REQUIRED_SPECS <= {p.stem for p in PATHS}


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_bundled_spec_lowers_fits_and_matches_its_reference(path, checked):
    spec = load_spec(path)
    assert spec.name == path.stem
    result = checked(spec)
    kernel = result.kernel
    assert kernel.name == spec.name and kernel.spec_path == str(path)
    assert {n: (t.dtype, t.shape) for n, t in kernel.signature().items()} == {
        n: (t.dtype, t.shape) for n, t in spec.inputs.items()}


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_bundled_baseline_is_no_faster_than_its_roofline(path):
    spec = load_spec(path)
    from stochopt.lower import lower

    machine = load_machine("mncore2")
    roof = spec_roofline(spec, machine)
    assert roof.cycles > 0 and roof.bound in ("dram", "compute")
    assert cost(lower(spec, machine), machine).cycles >= roof.cycles


def test_mla_decode_is_dram_bound_with_the_design_shapes():
    spec = load_spec(next(p for p in PATHS if p.stem == "mla_decode"))
    assert {n: t.shape for n, t in spec.inputs.items()} == {
        "q_nope": (16, 512), "q_pe": (16, 64), "c_kv": (4096, 512), "k_pe": (4096, 64)}
    assert all(t.dtype == "bf16" for t in spec.inputs.values())
    assert spec_roofline(spec).bound == "dram"


def test_spec_table_has_one_row_per_bundled_spec_with_consistent_figures():
    rows = spec_table("mncore2")
    assert [r["name"] for r in rows] == [p.stem for p in PATHS]
    for r in rows:
        assert r["baseline_cycles"] >= r["roofline_cycles"] > 0
        assert r["bytes"] > 0 and r["flops"] > 0 and r["doc"]
        spec = load_spec(r["path"])
        assert r["inputs"] == sum(prod(t.shape) for t in spec.inputs.values())


def test_bundled_specs_also_lower_on_the_small_machine(checked):
    # the small preset has 64 PEs: only the specs small enough for it must fit there
    spec = load_spec(next(p for p in PATHS if p.stem == "rotary"))
    checked(spec, machine="small", seeds=(0,))
