"""`stochopt verify` as a user runs it: exit 0 equivalent, 1 counterexample (saved, and
replayed by --inputs to the same failure), 2 invalid kernel, spec or arguments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from stochopt.cli import main

WRONG = "tests/verify/corpus/wrong/rotary__second_half_off_by_one.leir"
PRECISION_WRONG = "tests/verify/corpus/wrong/matmul__bf16_result.leir"
FAST = "docs/examples/softmax_fast.leir"


@pytest.fixture(autouse=True)
def _from_the_repository(repo, monkeypatch):
    # kernels name their spec relative to the repository root
    monkeypatch.chdir(repo)


def _run(*args):
    return CliRunner().invoke(main, ["verify", *map(str, args)])


def _json(result) -> dict:
    return json.loads(result.stdout)


def test_an_equivalent_kernel_exits_0_with_a_certificate():
    result = _run(FAST, "--examples", 20, "--json")
    assert result.exit_code == 0, result.output
    facts = _json(result)
    assert facts["equivalent"] is True and facts["examples"] == 20
    assert facts["certificate"]["spec"] == "softmax" and facts["warnings"] == []


def test_an_equivalent_kernel_prints_equivalent():
    result = _run(FAST, "--examples", 12)
    assert result.exit_code == 0 and "EQUIVALENT" in result.stdout


UNTESTED = "tests/verify/corpus/wrong/layernorm__flat_row_fast_path.leir"


def test_strict_exits_3_where_a_side_of_a_decision_point_went_untested():
    # three inputs never put the variance in its flat-row band: equivalent on every
    # input tried, but not tested where the fast path is taken
    plain, strict = _run(UNTESTED, "--examples", 3), _run(UNTESTED, "--examples", 3, "--strict")
    assert plain.exit_code == 0 and "NOT REACHED" in plain.stdout, plain.output
    assert strict.exit_code == 3, strict.output
    assert "lt(var, 1e-07) band" in strict.stdout and "--strict" in strict.stderr
    assert _run(FAST, "--examples", 12, "--strict").exit_code == 0


def test_a_wrong_kernel_exits_1_and_saves_a_counterexample(tmp_path):
    npz = tmp_path / "cex.npz"
    result = _run(WRONG, "--examples", 20, "--counterexample", npz)
    assert result.exit_code == 1, result.output
    text = " ".join(result.stdout.split())
    assert "NOT EQUIVALENT" in text and "semantics check failed at index" in text
    assert "expected" in text and "got" in text and f"--inputs {npz}" in text
    with np.load(npz) as saved:
        assert set(saved.files) == {"x", "cos", "sin"}


@pytest.mark.parametrize("kernel", [WRONG, PRECISION_WRONG])
def test_inputs_replays_a_saved_counterexample_to_the_same_failure(kernel, tmp_path):
    npz = tmp_path / "cex.npz"
    first = _run(kernel, "--examples", 20, "--counterexample", npz, "--json")
    assert first.exit_code == 1
    replay = _run(kernel, "--inputs", npz, "--json")
    assert replay.exit_code == 1, replay.output
    a, b = _json(first)["counterexample"], _json(replay)["counterexample"]
    for key in ("check", "index", "expected", "got"):
        assert a[key] == b[key], key
    assert _json(replay)["examples"] == 1


def test_inputs_that_pass_exit_0(tmp_path):
    npz = tmp_path / "cex.npz"
    assert _run(WRONG, "--examples", 20, "--counterexample", npz).exit_code == 1
    fixed = _kernel(tmp_path, Path(WRONG).read_text().replace("63:127", "64:128"))
    assert _run(fixed, "--inputs", npz).exit_code == 0


def _kernel(tmp_path, text: str):
    path = tmp_path / "k.leir"
    path.write_text(text)
    return path


@pytest.mark.parametrize("args, message", [
    (["--spec", "specs/rmsnorm.py"], "takes"),            # the wrong spec for the kernel
    (["--spec", "specs/no_such_spec.py"], "does not exist"),
    (["--examples", "0"], "examples"),
    (["--examples", "-3"], "examples"),
    (["--examples", "many"], "examples"),
    (["--inputs", "no_such_file.npz"], "no_such_file.npz"),
])
def test_invalid_arguments_exit_2(args, message):
    result = _run(FAST, *args)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())


def test_a_kernel_that_does_not_parse_exits_2(tmp_path):
    path = _kernel(tmp_path, "# spec: specs/softmax.py\nimport os\n")
    result = _run(path)
    assert result.exit_code == 2 and "line 2" in result.output


def test_a_kernel_without_a_spec_exits_2(tmp_path):
    text = Path(FAST).read_text().replace("# spec: specs/softmax.py\n", "")
    result = _run(_kernel(tmp_path, text))
    assert result.exit_code == 2 and "names no spec" in result.output


def test_inputs_of_the_wrong_shape_exit_2(tmp_path):
    npz = tmp_path / "bad.npz"
    np.savez(npz, x=np.zeros((4, 4), np.float32))
    result = _run(FAST, "--inputs", npz)
    assert result.exit_code == 2 and "shape" in result.output


# a layernorm whose row of 2,048 f32 values and its temporaries do not fit PE memory
# when 64 rows share one PE (8 x 8 x 4 PEs for 256 rows)
CROWDED = """# spec: specs/layernorm.py
def kernel(x: "f32[256,2048] @ dram", gamma: "f32[2048] @ dram",
           beta: "f32[2048] @ dram") -> "f32[256,2048] @ dram":
    xs = load(x, "(256,2048)/((8_L2B,8_L1B,4_MAB),(2048))")
    g = load(gamma, "(2048)/((2048)); B@[L2B,L1B,MAB]")
    b = load(beta, "(2048)/((2048)); B@[L2B,L1B,MAB]")
    d = xs - reduce_sum(xs[0:256, 0:2047], axis=1, keepdims=True) * 0.00048828125
    var = reduce_sum(d * d, axis=1, keepdims=True) * 0.00048828125
    return store(d * rsqrt(var + 1e-05) * g + b)
"""
FITS = "tests/verify/corpus/wrong/layernorm__beta_dropped.leir"


def test_a_kernel_that_does_not_fit_exits_2_with_runs_one_line(tmp_path):
    path = _kernel(tmp_path, CROWDED)
    result, ran = _run(path), CliRunner().invoke(main, ["run", str(path)])
    assert result.exit_code == 2 and ran.exit_code == 2
    assert "out of PE local memory" in result.output and len(result.output.splitlines()) == 1
    assert result.output == ran.output  # the same ConstraintError, word for word


def test_a_kernel_past_the_emulation_memory_budget_exits_2_with_one_line(monkeypatch):
    monkeypatch.setenv("STOCHOPT_EMULATION_MEMORY", "1000")
    result = _run(FITS)
    assert result.exit_code == 2 and "emulation memory budget" in result.output
    assert "Traceback" not in result.output and len(result.output.splitlines()) == 1


@pytest.mark.slow
@pytest.mark.parametrize("kernel, budget, message", [
    ("crowded", None, "out of PE local memory"),
    (FITS, "1000", "past the emulation memory budget of"),
])
def test_python_m_stochopt_verify_exits_2_with_one_line_on_stderr(kernel, budget, message,
                                                                  repo, tmp_path):
    # the real entry point, in its own process: exit status, stderr, no traceback
    path = _kernel(tmp_path, CROWDED) if kernel == "crowded" else kernel
    env = dict(os.environ)
    env.pop("STOCHOPT_EMULATION_MEMORY", None)
    if budget:
        env["STOCHOPT_EMULATION_MEMORY"] = budget
    done = subprocess.run([sys.executable, "-m", "stochopt", "verify", str(path)], cwd=repo,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr


def test_a_side_reached_only_by_an_uncompared_probe_is_not_counted_as_tested():
    # one example leaves the directed search no compared input: its sort move reaches
    # the sorted rows' side in a probe, which tested nothing there
    path = "tests/verify/corpus/wrong/softmax__sorted_rows_tail_sum_by_where.leir"
    result = _run(path, "--examples", 1, "--strict", "--json")
    facts = _json(result)
    assert result.exit_code == 3 and facts["equivalent"] is True, result.output
    assert any("above" in side for side in facts["coverage"]["not_reached"])
