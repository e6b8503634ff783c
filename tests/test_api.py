"""The Python API (stochopt.lower, run, verify, optimize, report): what it takes, what
it returns, the errors it raises, and that the CLI says the same."""

from __future__ import annotations

import importlib
import inspect
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import stochopt
from stochopt.errors import StochoptError
from stochopt.leir import render
from stochopt.search.chain import ChainConfig

ROOT = Path(__file__).resolve().parents[1]
SOFTMAX = ROOT / "specs" / "softmax.py"
SMALL = "small"


@pytest.fixture(scope="module")
def kernel():
    return stochopt.lower(str(SOFTMAX), machine=SMALL)


@pytest.fixture(scope="module")
def wrong_kernel(kernel):
    text = render(kernel)
    assert " / " in text
    return text.replace(" / ", " * ")  # softmax times the sum instead of over it


# ---------------------------------------------------------------------------------
# the names
# ---------------------------------------------------------------------------------

def test_all_lists_the_jobs_and_the_spec_helpers():
    for name in ("lower", "run", "verify", "optimize", "report", "load_kernel", "spec",
                 "tensor", "load_spec"):
        assert name in stochopt.__all__
        assert callable(getattr(stochopt, name)), name
    namespace: dict = {}
    exec("from stochopt import *", namespace)
    assert {"lower", "verify", "report"} <= set(namespace)


def test_lower_verify_and_report_are_both_functions_and_subpackages(kernel):
    # the subpackages imported in every way still work, and calling them still works
    import stochopt.lower.catalog
    import stochopt.report.facts as facts_module
    from stochopt.lower import lower as lower_spec
    from stochopt.verify import check
    from stochopt.verify.check import Verdict

    assert stochopt.lower.catalog.spec_summary is not None
    assert facts_module.run_facts is stochopt.report.facts.run_facts
    assert Verdict is stochopt.verify.Verdict
    assert callable(lower_spec) and callable(check)
    assert stochopt.lower(str(SOFTMAX), machine=SMALL) == kernel
    assert "examples" in inspect.signature(stochopt.verify).parameters
    assert "run_dir" in inspect.signature(stochopt.report).parameters
    importlib.import_module("stochopt.report.html")
    assert callable(stochopt.report)


def test_a_callable_subpackage_shows_the_api_function_s_signature():
    from stochopt.callable_package import CallablePackage

    for name in ("lower", "verify", "report"):
        package = getattr(stochopt, name)
        assert isinstance(package, CallablePackage)
        assert inspect.signature(package) == inspect.signature(getattr(stochopt.api, name))


def test_the_callable_subpackages_survive_any_import_order():
    code = ("import stochopt.search.optimize, stochopt.report.facts, stochopt\n"
            "import sys; sys.path.insert(0, '.')\n"
            "k = stochopt.lower('specs/softmax.py', machine='small')\n"
            "print(type(stochopt.verify).__name__, k.name)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["CallablePackage", "softmax"]


# ---------------------------------------------------------------------------------
# kernels and specs as objects, paths or text
# ---------------------------------------------------------------------------------

def test_a_spec_as_path_text_or_object_lowers_to_the_same_kernel(kernel):
    from_text = stochopt.lower(SOFTMAX.read_text(), machine=SMALL)
    from_object = stochopt.lower(stochopt.load_spec(SOFTMAX), machine=SMALL)
    from_path = stochopt.lower(SOFTMAX, machine=SMALL)
    assert from_text == from_object == from_path == kernel
    assert from_text.spec_path is None  # the text's temporary file is not named


def test_a_kernel_as_path_text_or_object_is_the_same(kernel, tmp_path):
    path = tmp_path / "k.leir"
    path.write_text(render(kernel))
    for form in (kernel, render(kernel), path, str(path)):
        assert stochopt.load_kernel(form, machine=SMALL) == kernel


def test_a_bad_kernel_file_names_the_file_line_and_column(tmp_path):
    path = tmp_path / "bad.leir"
    path.write_text('def k(x: "f32[8] @ dram") -> "f32[8] @ dram":\n    return stor(x)\n')
    with pytest.raises(StochoptError) as e:
        stochopt.run(path, machine=SMALL)
    assert str(e.value).startswith(f"{path}: line 2")


@pytest.mark.parametrize("call,match", [
    (lambda: stochopt.lower(42), "a spec must be a Spec, a .py path or spec text"),
    (lambda: stochopt.lower(np.exp), "plain function, not a spec"),
    (lambda: stochopt.lower("no/such/spec.py"), "spec file no/such/spec.py does not exist"),
    (lambda: stochopt.lower(SOFTMAX, name="nope"), "has no spec named 'nope'"),
    (lambda: stochopt.run(3.5), "a kernel must be a Kernel"),
    (lambda: stochopt.run("missing.leir"), "kernel file missing.leir does not exist"),
    (lambda: stochopt.run("def k(:\n"), "syntax error"),
    (lambda: stochopt.lower(SOFTMAX, machine="huge"), "unknown machine 'huge'"),
    (lambda: stochopt.report(7), "report takes a run directory"),
    (lambda: stochopt.report("no/such/run"), "run directory no/such/run does not exist"),
    (lambda: stochopt.optimize(), "optimize needs a spec"),
    (lambda: stochopt.optimize(SOFTMAX, chains=0), "chains must be an integer >= 1"),
    (lambda: stochopt.optimize(SOFTMAX, budget="ten"), "bad duration 'ten'"),
    (lambda: stochopt.optimize(SOFTMAX, proposer="magic"), "unknown proposer 'magic'"),
    (lambda: stochopt.optimize(SOFTMAX, llm="gpt"), "llm must be a dict of settings"),
    (lambda: stochopt.optimize(SOFTMAX, llm={"model": "m", "colour": 1}),
     "unknown LLM setting"),
])
def test_bad_arguments_are_clear_errors(call, match):
    with pytest.raises(StochoptError, match=match.replace("(", r"\(").replace(".", r"\.")):
        call()


@pytest.mark.slow
def test_the_cli_prints_the_errors_the_api_raises(tmp_path):
    for argv, call in ((["lower", "nope.py"], lambda: stochopt.lower("nope.py")),
                       (["run", "nope.leir"], lambda: stochopt.run("nope.leir"))):
        with pytest.raises(StochoptError) as e:
            call()
        out = subprocess.run([sys.executable, "-m", "stochopt", *argv], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 2
        assert " ".join(out.stderr.split()) == f"error: {e.value}"


# ---------------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------------

def test_run_gives_outputs_cycles_and_profile(kernel):
    from stochopt.backend.cost import cost

    execution = stochopt.run(kernel, machine=SMALL, seed=3)
    x = execution.inputs["x"]
    expected = np.exp(x - x.max(axis=1, keepdims=True))
    expected /= expected.sum(axis=1, keepdims=True)
    assert np.allclose(execution.output, expected, atol=1e-5)
    assert execution.cycles == cost(kernel, SMALL).cycles == execution.profile.cycles
    assert 0 < execution.roofline_cycles <= execution.cycles
    facts = execution.to_json()
    assert facts["seed"] == 3 and facts["machine"] == SMALL
    assert facts["outputs"]["out"]["shape"] == [128, 1024]
    again = stochopt.run(kernel, {"x": x}, machine=SMALL)
    assert again.seed is None and np.array_equal(again.output, execution.output)


def test_run_draws_from_the_spec_given_and_refuses_one_that_does_not_fit(kernel):
    from stochopt import spec, tensor

    @spec(inputs={"x": tensor("f32", (128, 1024), low=0.5, high=0.75)})
    def softmax(x):
        return x

    execution = stochopt.run(kernel, machine=SMALL, spec=softmax)
    x = execution.inputs["x"]
    assert execution.inputs_from == "spec softmax's ranges"
    assert 0.5 <= x.min() and x.max() <= 0.75
    # the kernel was lowered from specs/softmax.py, which it names
    assert stochopt.run(kernel, machine=SMALL).inputs_from == "spec softmax's ranges"
    alone = "\n".join(line for line in render(kernel).splitlines()
                      if not line.startswith("# spec:"))
    assert stochopt.run(alone, machine=SMALL).inputs_from == "[-10, 10] (no spec found)"

    @spec(inputs={"x": tensor("f32", (4, 4))})
    def other(x):
        return x

    with pytest.raises(StochoptError, match="spec other does not take kernel softmax's"):
        stochopt.run(kernel, machine=SMALL, spec=other)


@pytest.mark.parametrize("inputs,match", [
    ([1, 2], "inputs must be a dict"),
    ({}, "inputs name nothing, but kernel softmax takes x"),
    ({"x": np.zeros((128, 1024)), "y": 1}, "inputs name x, y"),
    ({"x": np.zeros((2, 2))}, r"input 'x' has shape \(2, 2\)"),
    ({"x": [["a"]]}, "input 'x' is not an array of numbers"),
])
def test_run_checks_the_inputs_given(kernel, inputs, match):
    with pytest.raises(StochoptError, match=match):
        stochopt.run(kernel, inputs, machine=SMALL)


def test_run_rejects_a_negative_seed(kernel):
    with pytest.raises(StochoptError, match="seed must be an integer >= 0"):
        stochopt.run(kernel, machine=SMALL, seed=-1)


# ---------------------------------------------------------------------------------
# verify
# ---------------------------------------------------------------------------------

def test_verify_finds_the_spec_on_the_kernels_spec_line(kernel):
    verdict = stochopt.verify(kernel, examples=5, machine=SMALL)
    assert verdict.equivalent and verdict.examples >= 5


def test_verify_a_wrong_kernel_gives_a_counterexample_to_replay(wrong_kernel, tmp_path):
    saved = tmp_path / "cex.npz"
    verdict = stochopt.verify(wrong_kernel, SOFTMAX, examples=5, machine=SMALL,
                              counterexample_path=saved)
    assert not verdict.equivalent
    cex = verdict.counterexample
    assert cex.path == str(saved) and saved.is_file()
    for replay in (cex.inputs, saved):
        again = stochopt.verify(wrong_kernel, SOFTMAX, inputs=replay, machine=SMALL)
        assert not again.equivalent and again.examples == 1


def test_verify_without_a_path_saves_nothing(wrong_kernel, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    verdict = stochopt.verify(wrong_kernel, SOFTMAX, examples=3, machine=SMALL)
    assert verdict.counterexample.path is None and not list(tmp_path.iterdir())


@pytest.mark.parametrize("kwargs,match", [
    ({"examples": 0}, "examples must be an integer >= 1"),
    ({"seed": "one"}, "seed must be an integer >= 0"),
    ({"inputs": {"y": np.zeros(3)}}, "but spec softmax takes x"),
])
def test_verify_checks_its_arguments(kernel, kwargs, match):
    with pytest.raises(StochoptError, match=match):
        stochopt.verify(kernel, SOFTMAX, machine=SMALL, **kwargs)


def test_verify_a_kernel_text_without_a_spec_line_says_what_to_pass(kernel):
    text = "\n".join(line for line in render(kernel).splitlines()
                     if not line.startswith("# spec:"))
    with pytest.raises(StochoptError, match="names no spec"):
        stochopt.verify(text + "\n", machine=SMALL)


# ---------------------------------------------------------------------------------
# optimize and report
# ---------------------------------------------------------------------------------

QUICK = ChainConfig(full_examples=10, escape_kernels=300)  # escapes: tests/transform


@pytest.mark.slow
def test_optimize_a_spec_object_with_progress_then_report(tmp_path):
    from stochopt import spec, tensor

    @spec(inputs={"x": tensor("f32", (64, 256), low=-4.0, high=4.0)})
    def scaled(x):
        return np.exp(x) * 0.5

    seen: list[dict] = []
    result = stochopt.optimize(scaled, budget="60s", chains=1, machine=SMALL,
                               max_proposals=20, run_dir=tmp_path / "run", config=QUICK,
                               progress=seen.append)
    assert result.verified and result.proposals == 20 and result.spec == "scaled"
    assert seen and {"elapsed_s", "proposals", "best_cycles", "speedup"} <= set(seen[-1])
    assert all(b["elapsed_s"] >= a["elapsed_s"] for a, b in zip(seen, seen[1:], strict=False))
    written = (tmp_path / "run" / "spec.py").read_text()
    assert "def scaled(x):" in written and "from stochopt import spec, tensor" in written
    facts = stochopt.report(result.run_dir)
    assert isinstance(facts, dict) and facts["best_cycles"] == result.best_cycles
    assert facts["proposals"] == 20 and json.loads(json.dumps(facts))["spec"] == "scaled"
    best = stochopt.verify(result.best_path, scaled, examples=5, machine=SMALL)
    assert best.equivalent


def test_a_notebook_spec_that_needs_another_cell_is_refused_before_the_run(tmp_path):
    from stochopt import spec, tensor

    factor = 3.0  # a name the spec's source does not carry with it

    @spec(inputs={"x": tensor("f32", (64, 256))})
    def scaled(x):
        return x * factor

    with pytest.raises(StochoptError, match="cannot be written to a file.*factor"):
        stochopt.optimize(scaled, budget="10s", chains=1, machine=SMALL,
                          run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


INTERRUPTED = """
import json, sys
import stochopt
from stochopt.search.chain import ChainConfig
result = stochopt.optimize(sys.argv[1], budget="25s", chains=1, machine="small",
                           run_dir=sys.argv[2], config=ChainConfig(full_examples=10))
print(json.dumps(result.to_json()))
"""


@pytest.mark.slow
def test_an_interrupt_stops_the_run_cleanly_and_resume_goes_on(tmp_path):
    # Jupyter's "interrupt the kernel" is a SIGINT to the kernel's process
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", INTERRUPTED, str(SOFTMAX), str(run_dir)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 120
    events = run_dir / "events.jsonl"

    def searching_from_a_proved_start() -> bool:
        # the starting kernel's own full check runs beside the search: wait for its
        # verdict, so the interrupted run has a proved best to report
        try:
            proved = json.loads((run_dir / "best.json").read_text()).get("verdict")
        except (OSError, ValueError):
            return False
        return bool(proved) and events.is_file() and events.stat().st_size > 0

    while time.time() < deadline and not searching_from_a_proved_start():
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    result = json.loads(out)
    assert result["stopped_by"] == "interrupted" and result["verified"]
    state = json.loads((run_dir / "checkpoint.json").read_text())
    assert state["finished"] is False and state["proposals"] >= 1
    resumed = stochopt.optimize(resume=run_dir, live=False)  # the budget left, ~20 s
    assert resumed.run_dir == str(run_dir) and resumed.stopped_by == "budget"
    assert resumed.proposals >= state["proposals"] and resumed.verified


# ---------------------------------------------------------------------------------
# the CLI is a thin layer: it prints what the API returns
# ---------------------------------------------------------------------------------

def test_the_cli_prints_what_the_api_returns(kernel, tmp_path):
    from click.testing import CliRunner

    from stochopt.cli import main

    path = tmp_path / "k.leir"
    path.write_text(render(kernel))
    runner = CliRunner()
    ran = runner.invoke(main, ["run", str(path), "--json", "--machine", SMALL, "--seed", "2"])
    assert ran.exit_code == 0, ran.output
    expected = {"kernel": str(path), **stochopt.run(path, machine=SMALL, seed=2).to_json()}
    assert json.loads(ran.output) == json.loads(json.dumps(expected))
    lowered = runner.invoke(main, ["lower", str(SOFTMAX), "--machine", SMALL])
    assert lowered.exit_code == 0
    from stochopt.machine import load_machine

    assert lowered.output == render(kernel, load_machine(SMALL))
