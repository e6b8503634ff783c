"""Settings: defaults from the nearest stochopt.toml or pyproject.toml [tool.stochopt],
flags over them, every key checked like its flag, run.json saying where each came from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from stochopt.cli import main
from stochopt.cli_settings import default_map
from stochopt.errors import StochoptError
from stochopt.settings import find_settings_file, load_settings
from tests.test_cli import RELU, _flat


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project folder with specs/relu.py; the tests work in its subfolder work/."""
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "relu.py").write_text(RELU)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    return tmp_path


def _pyproject(folder: Path, body: str) -> Path:
    path = folder / "pyproject.toml"
    path.write_text(f'[project]\nname = "mine"\n\n[tool.stochopt]\n{body}\n')
    return path


def test_the_nearest_settings_file_is_found_from_a_subfolder(project):
    assert find_settings_file() is None
    pyproject = _pyproject(project, 'machine = "small"')
    assert find_settings_file() == pyproject
    own = project / "work" / "stochopt.toml"
    own.write_text('budget = "2m"\n')
    assert find_settings_file() == own  # nearer wins
    assert load_settings().values == {"budget": "2m"}


def test_a_pyproject_without_our_table_is_not_a_settings_file(project):
    (project / "pyproject.toml").write_text('[project]\nname = "mine"\n[tool.ruff]\nx = 1\n')
    assert find_settings_file() is None


def test_a_setting_is_a_default_and_a_flag_overrides_it(project):
    _pyproject(project, 'machine = "small"')
    spec = project / "specs" / "relu.py"
    assert "# machine: small" in _run("lower", spec).stdout
    assert "# machine: mncore2" in _run("lower", spec, "--machine", "mncore2").stdout


@pytest.mark.parametrize("body, words", [
    ("chains = 4\nbudgets = \"2m\"", ["line 6", "unknown key 'budgets'", "known keys are",
                                      "budget"]),
    ("chains = 0", ["line 5", "chains = 0", "1<=x<=1024"]),
    ('budget = "soon"', ["budget = 'soon'", "bad duration", "30s, 10m"]),
    ('machine = "big"', ["machine = 'big'", "unknown machine"]),
    ('quiet = "yes"', ["quiet must be true or false", "write quiet = true"]),
    ("model = 5", ["model must be a string", 'write model = "..."']),
    ('proposer = "magic"', ["proposer = 'magic'",
                            "one of mixed, mutate, rewrite, compound, lookahead, llm"]),
    ("llm = { model = \"m\" }", ["llm must be a single value, got a table"]),
])
def test_every_key_is_checked_like_its_flag_with_the_file_and_line(project, body, words):
    path = _pyproject(project, body)
    result = _run("specs", "--json")
    assert result.exit_code == 2
    err = _flat(result.stderr)
    assert f"{path} [tool.stochopt]" in err
    for w in words:
        assert w in err


def test_a_broken_settings_file_is_a_clear_error(project):
    (project / "stochopt.toml").write_text("budget = \n")
    result = _run("specs")
    assert result.exit_code == 2 and "cannot read settings file" in result.stderr


def test_paths_in_a_settings_file_are_relative_to_it(project):
    (project / "prompts").mkdir()
    (project / "machines").mkdir()
    (project / "machines" / "wide.toml").write_text('base = "small"\n')
    (project / "stochopt.toml").write_text('prompts = "prompts"\nllm-cache = "cache"\n'
                                           'machine = "machines/wide.toml"\n')
    ctx_map = default_map(load_settings(), main)
    assert ctx_map["lower"]["machine"] == str(project / "machines" / "wide.toml")
    assert ctx_map["optimize"]["prompts"] == str(project / "prompts")
    assert ctx_map["optimize"]["cache"] == str(project / "cache")


def test_a_kernel_files_own_machine_comes_before_the_settings_machine(project):
    spec = project / "specs" / "relu.py"
    assert _run("lower", spec, "--machine", "small", "-o", "relu.leir").exit_code == 0
    _pyproject(project, 'machine = "mncore2"')
    assert json.loads(_run("run", "relu.leir", "--json").stdout)["machine"] == "small"
    Path("plain.leir").write_text("\n".join(
        line for line in Path("relu.leir").read_text().splitlines()
        if not line.startswith("# machine:")) + "\n")
    assert json.loads(_run("run", "plain.leir", "--json").stdout)["machine"] == "mncore2"


def test_keys_may_be_written_with_underscores(project):
    (project / "stochopt.toml").write_text('base_url = "http://localhost:8000/v1"\n')
    assert load_settings().values == {"base-url": "http://localhost:8000/v1"}


def test_a_flag_that_names_one_run_cannot_be_a_setting(project):
    _pyproject(project, 'run-dir = "runs/x"')
    result = _run("specs")
    assert result.exit_code == 2 and "unknown key 'run-dir'" in result.stderr


def test_settings_error_messages_are_stochopt_errors(project):
    (project / "stochopt.toml").write_text("chains = [1, 2]\n")
    with pytest.raises(StochoptError, match="chains must be a single value"):
        load_settings()


@pytest.mark.slow
def test_run_json_records_where_each_setting_came_from(project):
    settings = _pyproject(project, 'machine = "small"\nbudget = "20s"\nchains = 1\n'
                          "max-proposals = 3")
    result = _run("optimize", project / "specs" / "relu.py", "--seed", "4", "--quiet",
                  "--run-dir", project / "run")
    assert result.exit_code == 0, result.output
    recorded = json.loads((project / "run" / "run.json").read_text())["settings"]
    origin = f"{settings} [tool.stochopt]"
    assert recorded["machine"] == {"value": "small", "from": origin}
    assert recorded["budget"] == {"value": "20s", "from": origin}
    assert recorded["chains"] == {"value": 1, "from": origin}
    assert recorded["seed"] == {"value": 4, "from": "command line"}
    assert recorded["proposer"] == {"value": "mixed", "from": "default"}
    assert "run-dir" not in recorded and "resume" not in recorded
