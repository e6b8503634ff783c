"""`stochopt db`: list, show, export, import, prune, each with --json; the database
named by --db, the settings file's db, or the default file."""

import json

import pytest
from click.testing import CliRunner

from stochopt.cli import main
from stochopt.cli_db import db as db_group
from stochopt.cli_settings import default_map
from stochopt.settings import load_settings
from stochopt.tuning.store import TuningDB, default_path
from stochopt.tuning.views import history

from .conftest import remember, softmax_at


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def filled(tmp_path):
    path = tmp_path / "t.db"
    with TuningDB(path) as db:
        spec, baseline, kernel, plan = softmax_at(16, 512)
        first = remember(db, spec, kernel, plan, run_dir="runs/one", started=100.0)
        remember(db, spec, baseline, [], run_dir="runs/two", started=200.0)
    return path, first


def test_list_without_a_database_says_where_it_will_be_and_makes_none(tmp_path):
    assert main.commands["db"] is db_group  # stochopt/cli_db.py, under the main group
    result = run("db", "list")
    assert result.exit_code == 0 and "no tuning database at" in result.output
    assert str(default_path()) in result.output.replace("\n", "")
    assert not default_path().exists()
    result = run("db", "list", "--json", "--db", tmp_path / "none.db")
    assert json.loads(result.output) == {"db": str(tmp_path / "none.db"), "specs": []}


def test_list_and_show_tell_the_same_history(filled):
    path, first = filled
    listed = json.loads(run("db", "list", "--json", "--db", path).output)["specs"]
    assert [(r["spec"], r["machine"], r["runs"], r["kernels"], r["best_cycles"])
            for r in listed] == [("softmax", "small", 2, 2, first["cycles"])]
    shown = json.loads(run("db", "show", "softmax", "--json", "--db", path).output)
    (entry,) = shown["entries"]
    with TuningDB(path) as db:
        assert history(db, "softmax") == shown
    assert [r["run_dir"] for r in entry["runs"]] == ["runs/one", "runs/two"]
    assert entry["best"]["cycles"] == first["cycles"] and entry["best"]["plan"] == \
        first["plan"]
    text = run("db", "show", "softmax", "--db", path).output
    assert " one " in text and " two " in text and "multiply_by_reciprocal" in text
    table = run("db", "list", "--db", path).output
    assert "softmax" in table and str(first["cycles"]) in table


def test_show_of_a_spec_it_lacks_is_one_line_and_exit_2(filled):
    path, _ = filled
    result = run("db", "show", "nope", "--db", path)
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: the tuning database {path} has no spec 'nope'; it has softmax"]


def test_export_import_and_prune_say_what_they_did(filled, tmp_path):
    path, _ = filled
    out = tmp_path / "all.json.gz"
    written = json.loads(run("db", "export", out, "--json", "--db", path).output)
    assert written["written"]["kernels"] == 2
    result = run("db", "import", out, "--db", tmp_path / "other.db")
    assert result.exit_code == 0 and "2 kernels" in result.output
    again = json.loads(run("db", "import", out, "--json", "--db", tmp_path / "other.db")
                       .output)
    assert again["added"] == {"specs": 0, "machines": 0, "runs": 0, "kernels": 0,
                              "rule_stats": 0}
    pruned = json.loads(run("db", "prune", "--keep", "1", "--json", "--db", path).output)
    assert pruned["removed"]["kernels"] == 1
    bad = run("db", "prune", "--older-than", "soon", "--db", path)
    assert bad.exit_code == 2 and "bad duration" in bad.output


def test_a_damaged_database_is_one_line_and_exit_2(tmp_path):
    path = tmp_path / "t.db"
    path.write_text("junk" * 1000)
    result = run("db", "show", "softmax", "--db", path)
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "not a database" in result.output


def test_the_settings_files_db_is_relative_to_it_for_optimize_and_db(tmp_path, monkeypatch,
                                                                       filled):
    path, _ = filled
    (tmp_path / "work").mkdir()
    (tmp_path / "stochopt.toml").write_text('db = "t.db"\ncold = true\n')
    monkeypatch.chdir(tmp_path / "work")
    assert default_map(load_settings(), main)["optimize"]["db_path"] == str(path)
    listed = json.loads(run("db", "list", "--json").output)
    assert listed["db"] == str(path) and listed["specs"][0]["spec"] == "softmax"


def test_resume_takes_no_database_flags(tmp_path):
    for flag in (["--no-db"], ["--cold"], ["--db", "x.db"]):
        result = run("optimize", "--resume", tmp_path, *flag)
        assert result.exit_code == 2 and flag[0] in result.output
