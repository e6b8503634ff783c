"""The benchmark harness runs end to end (a smoke test: it asserts no timings)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # benchmark smoke: four searches in a subprocess
def test_compare_methods_quick_runs_every_method(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compare_methods.py"),
                           "--quick", "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "quick.json").read_text())
    runs = data["results"]["softmax"]
    assert set(runs) == {"mutate", "greedy", "rewrite", "mixed"}
    for method, results in runs.items():
        for r in results:
            # a search's budget now holds its checks: on a loaded machine the starting
            # kernel's own check may not finish in it, and the results must say so
            assert r["verified"] or r.get("start_check_unfinished"), method
            assert r["best_cycles"] <= r["baseline_cycles"]
            assert r["best_cycles"] >= r["roofline_cycles"]
    assert "| softmax | mixed |" in (tmp_path / "quick.md").read_text()


@pytest.mark.slow  # two lowerings checked against numpy (mla_decode_wide's is large)
@pytest.mark.parametrize("name", ["attention_decode_long", "mla_decode_wide"])
def test_the_transfer_measurements_specs_lower_and_verify(name):
    from stochopt import load_spec
    from stochopt.lower import lower
    from stochopt.verify.check import check

    spec = load_spec(ROOT / "benchmarks" / "specs" / f"{name}.py")
    kernel = lower(spec)
    assert check(kernel, spec, examples=20, seed=0, baseline=kernel).equivalent


# the llm settings of benchmarks/llm_yield.py's arms with a stand-in answering (no server)
STAND_IN = {"model": "stand-in", "base_url": "http://127.0.0.1:9/v1", "max_tokens": 48,
            "timeout_s": 60.0}


def _llm_yield():
    """benchmarks/llm_yield.py as a module (benchmarks/ is not a package)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import llm_yield
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return llm_yield


@pytest.mark.slow  # a chain and its full checks; no model: chance answers the plans
def test_llm_yield_runs_an_arm_from_greedys_descent():
    """``--start fixpoint`` starts the chain where greedy's descent ends (it once called
    the chain's restart with an argument missing, and failed before its first plan)."""
    llm_yield = _llm_yield()
    arms = {start: llm_yield.run_arm(
        "softmax", 0, 1, STAND_IN, start,
        lambda o: llm_yield.MenuClient(o, [2], 0, top=False))
        for start in ("lowering", "fixpoint")}
    assert arms["fixpoint"]["start_cycles"] < arms["lowering"]["start_cycles"]
    for arm in arms.values():
        (plan,) = arm["plans"]
        assert plan["length"] == 2 and arm["end_cycles"] <= arm["start_cycles"]


def test_llm_yield_stand_ins_answer_from_the_schemas_menu():
    """Chance draws from the menu the schema lists; the top arm takes its first entries."""
    from stochopt.llm.options import llm_options

    llm_yield, llm = _llm_yield(), STAND_IN

    schema = {"type": "object", "properties": {"steps": {"type": "array", "items": {
        "enum": [4, 2, 7, 1, 9]}}}}
    constraint = {"response_format": {"type": "json_object", "schema": schema}}
    top = llm_yield.MenuClient(llm_options(llm), [2, 3], 0, top=True)
    assert [json.loads(top._once([], {}, constraint).contents[0])["steps"]
            for _ in range(2)] == [[1, 2], [1, 2, 4]]
    chance = llm_yield.MenuClient(llm_options(llm), [5] * 20, 0, top=False)
    drawn = [s for _ in range(20)
             for s in json.loads(chance._once([], {}, constraint).contents[0])["steps"]]
    assert set(drawn) == {1, 2, 4, 7, 9}
