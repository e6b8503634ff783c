"""The rough edges a new user met, as they meet them: through the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from stochopt.cli import main

ROOT = Path(__file__).resolve().parents[1]
RELU = '''import numpy as np
from stochopt import spec, tensor


@spec(inputs={"x": tensor("f32", (128, 64))})
def relu(x):
    return np.maximum(x, 0.0)
'''
# the same function written with a numpy call the lowering does not support
RELU_FMAX = RELU.replace("np.maximum(x, 0.0)", "np.fmax(x, 0.0)")
WRONG = RELU.replace("np.maximum(x, 0.0)", "np.maximum(x, 1.0)")


def _run(*args, **kwargs):
    return CliRunner().invoke(main, [str(a) for a in args], **kwargs)


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def relu_kernel(tmp_path):
    """specs/relu.py and its lowered kernel at kernels/relu.leir (written by lower -o)."""
    (tmp_path / "specs").mkdir()
    spec = tmp_path / "specs" / "relu.py"
    spec.write_text(RELU)
    kernel = tmp_path / "kernels" / "relu.leir"
    kernel.parent.mkdir()
    result = _run("lower", spec, "-o", kernel, "--machine", "small")
    assert result.exit_code == 0, result.output
    return spec, kernel


# ---------------------------------------------------------------------------------
# kernel files: their spec and their machine
# ---------------------------------------------------------------------------------

def test_a_kernel_file_records_its_machine_and_run_costs_it_there(relu_kernel):
    _, kernel = relu_kernel
    assert "# machine: small" in kernel.read_text().splitlines()[:3]
    recorded = json.loads(_run("run", kernel, "--json").stdout)
    assert recorded["machine"] == "small"
    forced = json.loads(_run("run", kernel, "--json", "--machine", "mncore2").stdout)
    assert forced["machine"] == "mncore2"


def test_run_draws_inputs_in_the_ranges_of_the_spec_its_kernel_file_names(relu_kernel,
                                                                            tmp_path):
    """A softmax fed from [-10, 10] where its spec says [-1, 1] overflows: run's random
    inputs come from the kernel's spec, and it says where they came from."""
    spec, kernel = relu_kernel
    spec.write_text(RELU.replace('(128, 64))', '(128, 64), low=2.0, high=3.0)'))
    result = _run("run", kernel)
    assert result.exit_code == 0, result.output
    assert "inputs: seed 0, uniform in spec relu's ranges" in _flat(result.stdout)
    facts = json.loads(_run("run", kernel, "--json").stdout)
    assert facts["inputs_from"] == "spec relu's ranges"
    assert 2.0 <= facts["outputs"]["out"]["min"] <= facts["outputs"]["out"]["max"] <= 3.0
    alone = tmp_path / "alone.leir"  # no spec line: the default range, said so
    alone.write_text("\n".join(kernel.read_text().splitlines()[1:]))
    facts = json.loads(_run("run", alone, "--json").stdout)
    assert facts["inputs_from"] == "[-10, 10] (no spec found)"
    assert facts["outputs"]["out"]["min"] == 0.0 and facts["outputs"]["out"]["max"] > 3.0


def test_a_kernel_for_an_unknown_machine_says_to_pass_its_file(relu_kernel):
    _, kernel = relu_kernel
    kernel.write_text(kernel.read_text().replace("# machine: small", "# machine: big"))
    result = _run("run", kernel)
    assert result.exit_code == 2
    assert "written for machine 'big'" in _flat(result.stderr)
    assert "--machine" in result.stderr


def test_lower_o_records_the_spec_relative_to_the_kernel_so_verify_works_anywhere(
        relu_kernel, tmp_path, monkeypatch):
    _, kernel = relu_kernel
    assert kernel.read_text().startswith("# spec: ../specs/relu.py\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    result = _run("verify", kernel, "--examples", "5")
    assert result.exit_code == 0, result.output
    assert "EQUIVALENT" in result.stdout


def test_verify_of_a_run_best_uses_the_runs_spec_from_any_folder(relu_kernel, tmp_path,
                                                                 monkeypatch):
    spec, kernel = relu_kernel
    run = tmp_path / "runs" / "relu-1"
    run.mkdir(parents=True)
    (run / "spec.py").write_text(spec.read_text())
    (run / "run.json").write_text(json.dumps({"name": None, "machine_name": "small",
                                              "machine": {"name": "small"}}))
    # as the search writes it: the spec path as typed where the run started
    (run / "best.leir").write_text(kernel.read_text().replace("../specs/relu.py",
                                                              "specs/relu.py"))
    monkeypatch.chdir(run.parent)
    result = _run("verify", "relu-1/best.leir", "--examples", "5")
    assert result.exit_code == 0, result.output
    # checked with the run's check bank: what it computed is there for the next check
    assert list((run / "check_bank").rglob("*.npz"))


def test_a_spec_line_that_resolves_nowhere_suggests_spec(relu_kernel, tmp_path, monkeypatch):
    _, kernel = relu_kernel
    kernel.write_text(kernel.read_text().replace("../specs/relu.py", "gone/relu.py"))
    monkeypatch.chdir(tmp_path)
    result = _run("verify", kernel)
    assert result.exit_code == 2
    assert "names spec gone/relu.py" in _flat(result.stderr)
    assert "pass --spec SPEC.py" in _flat(result.stderr)


def test_run_of_a_spec_file_says_it_is_a_spec_and_how_to_lower_it():
    result = _run("run", ROOT / "specs" / "softmax.py")
    assert result.exit_code == 2
    err = _flat(result.stderr)
    assert "is a spec (numpy), not a LEIR kernel" in err and "stochopt lower" in err


def test_run_of_a_missing_kernel_says_it_does_not_exist(tmp_path):
    result = _run("run", tmp_path / "nope.leir")
    assert result.exit_code == 2 and "does not exist" in result.stderr


# ---------------------------------------------------------------------------------
# verify: the verdict first; unsupported numpy
# ---------------------------------------------------------------------------------

def test_verify_prints_the_verdict_even_where_it_cannot_save_the_input(relu_kernel,
                                                                       tmp_path):
    spec, kernel = relu_kernel
    wrong = tmp_path / "wrong.py"
    wrong.write_text(WRONG)
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    # a folder that cannot be written (root ignores permissions, so: a file in the path)
    result = _run("verify", kernel, "--spec", wrong, "--counterexample",
                  blocked / "cex.npz")
    assert result.exit_code == 1
    out = _flat(result.stdout)
    assert out.startswith("NOT EQUIVALENT")
    assert f"could not save the input to {blocked / 'cex.npz'}" in out
    assert "--counterexample PATH" in out


def test_verify_saves_the_counterexample_where_it_can(relu_kernel, tmp_path, monkeypatch):
    _, kernel = relu_kernel
    wrong = tmp_path / "wrong.py"
    wrong.write_text(WRONG)
    monkeypatch.chdir(tmp_path)
    result = _run("verify", kernel, "--spec", wrong)
    assert result.exit_code == 1
    assert (tmp_path / "relu.counterexample.npz").is_file()
    assert "replay with --inputs" in _flat(result.stdout)


def test_a_spec_the_lowering_cannot_take_names_np_linalg_and_says_what_works(tmp_path):
    spec = tmp_path / "inv.py"
    spec.write_text(RELU.replace("np.maximum(x, 0.0)", "np.linalg.inv(x[:64])"))
    result = _run("lower", spec)
    err = _flat(result.stderr)
    assert result.exit_code == 2
    assert "np.linalg.inv" in err and "np.inv " not in err
    assert "stochopt optimize SPEC.py --init kernel.leir" in err


def test_verify_checks_a_hand_written_kernel_against_a_spec_that_does_not_lower(
        relu_kernel, tmp_path):
    """What the --init hint promises: the kernel is checked against the spec's numpy."""
    _, kernel = relu_kernel
    spec = tmp_path / "fmax.py"
    spec.write_text(RELU_FMAX)
    result = _run("verify", kernel, "--spec", spec, "--examples", "5")
    assert result.exit_code == 0, result.output
    assert "does not lower" in _flat(result.stderr) and "tolerance alone" in result.stderr


# ---------------------------------------------------------------------------------
# optimize: --run-dir, --resume
# ---------------------------------------------------------------------------------

def test_run_dir_that_is_a_file_is_a_clear_error(relu_kernel, tmp_path):
    spec, _ = relu_kernel
    existing = tmp_path / "notes.txt"
    existing.write_text("mine")
    result = _run("optimize", spec, "--run-dir", existing, "--budget", "5s", "--quiet",
                  "--machine", "small", "--chains", "1")
    assert result.exit_code == 2
    assert "is a file, not a directory" in result.stderr
    assert existing.read_text() == "mine"


def _finished_run(tmp_path: Path, finished: bool) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"budget_s": 60}))
    (run / "checkpoint.json").write_text(json.dumps({"finished": finished, "elapsed_s": 60}))
    return run


def test_resume_refuses_flags_it_would_ignore(tmp_path):
    run = _finished_run(tmp_path, finished=False)
    result = _run("optimize", "--resume", run, "specs/softmax.py", "--budget", "5m",
                  "--chains", "2", "--seed", "3")
    assert result.exit_code == 2
    err = _flat(result.stderr)
    assert "does not take SPEC.py, --budget, --chains, --seed" in err
    assert f"--init {run / 'best.leir'}" in err


def test_resume_of_a_finished_run_suggests_starting_from_its_best(tmp_path):
    run = _finished_run(tmp_path, finished=True)
    result = _run("optimize", "--resume", run, "--quiet")
    assert result.exit_code == 2
    err = _flat(result.stderr)
    assert "already finished" in err
    assert f"stochopt optimize {run / 'spec.py'} --init {run / 'best.leir'}" in err


# ---------------------------------------------------------------------------------
# report and specs
# ---------------------------------------------------------------------------------

def test_report_of_a_missing_folder_says_it_does_not_exist(tmp_path):
    result = _run("report", tmp_path / "nonexistent")
    assert result.exit_code == 2
    assert "does not exist" in result.stderr and "no run.json" not in result.stderr


def test_specs_json_is_one_object_as_its_help_says():
    assert "one JSON object" in _flat(_run("specs", "--help").stdout)
    data = json.loads(_run("specs", "--json").stdout)
    assert set(data) == {"machine", "specs"} and data["machine"] == "mncore2"
    assert {r["name"] for r in data["specs"]} >= {"softmax", "attention_scores",
                                                  "attention_decode"}


@pytest.mark.slow
def test_specs_at_80_columns_shows_every_name_whole():
    result = subprocess.run([sys.executable, "-m", "stochopt", "specs"], cwd=ROOT,
                            capture_output=True, text=True, env={"COLUMNS": "80",
                                                                 "PATH": "/usr/bin:/bin"},
                            timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(map(len, lines)) <= 80
    names = [line.split()[0] for line in lines[3:] if line.strip()]
    assert len(names) == len(set(names))
    assert {"attention_scores", "attention_decode", "matmul_bias_gelu"} <= set(names)


def test_python_m_stochopt_runs_the_cli():
    """`python -m stochopt` (stochopt/__main__.py) is the same CLI, in a real process; the
    other tests call main in-process, and the slow tier runs real commands this way."""
    result = subprocess.run([sys.executable, "-m", "stochopt", "--help"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    for command in ("optimize", "verify", "report", "lower", "run"):
        assert command in result.stdout, command


def test_the_version_is_the_one_pyproject_states():
    import tomllib

    from stochopt.version import __version__
    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml")
                            .read_text())["project"]
    assert __version__ == project["version"]
