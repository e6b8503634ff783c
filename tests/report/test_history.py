"""The report's history: every run of the spec on the machine in the tuning database the
run used, in the terminal, --json and --html; a database that is gone is a note."""

import json

from click.testing import CliRunner

from stochopt.cli import main
from stochopt.lower import lower
from stochopt.machine import MNCORE2
from stochopt.report.facts import run_facts
from stochopt.report.history import history_facts, history_html
from stochopt.spec import load_spec
from stochopt.tuning.fingerprints import machine_print, spec_print
from stochopt.tuning.store import TuningDB
from tests.tuning.conftest import remember

from .conftest import SOFTMAX


def test_the_history_lists_earlier_runs_and_marks_this_one(make_run, tmp_path):
    spec = load_spec(SOFTMAX)
    baseline = lower(spec, MNCORE2)
    rd = tmp_path / "run"
    with TuningDB(tmp_path / "t.db") as db:
        earlier = remember(db, spec, baseline, [], machine=MNCORE2, run_dir="runs/earlier",
                           started=1000.0)
        mine = remember(db, spec, baseline, [], machine=MNCORE2, run_dir=str(rd.resolve()),
                        started=2000.0)
    tuning = {"db": str(tmp_path / "t.db"), "spec_fingerprint": spec_print(spec).fingerprint,
              "machine_fingerprint": machine_print(MNCORE2)[0], "start": "lowering"}
    make_run("run", tuning=tuning)
    facts = run_facts(rd)
    history = facts["history"]
    assert history == history_facts(json.loads((rd / "run.json").read_text()), rd)
    assert [(r["run_dir"], r["this_run"]) for r in history["runs"]] == \
        [("runs/earlier", False), (str(rd.resolve()), True)]
    assert history["runs"][1]["uid"] == mine["run"] != earlier["run"]
    text = CliRunner().invoke(main, ["report", str(rd)], terminal_width=100).output
    assert "history in the tuning database: 2 runs" in text and "run *" in text
    data = json.loads(CliRunner().invoke(main, ["report", str(rd), "--json"]).output)
    assert data["history"]["runs"][0]["run_dir"] == "runs/earlier"
    section = history_html(history)   # the page's section (the page draws it last)
    assert 'data-chart="history"' in section and "runs/earlier" in section


def test_a_run_without_a_database_has_no_history_and_a_gone_one_a_note(make_run, tmp_path):
    assert run_facts(make_run("plain"))["history"] is None
    gone = {"db": str(tmp_path / "gone.db"), "spec_fingerprint": "x",
            "machine_fingerprint": "y"}
    facts = run_facts(make_run("gone", tuning=gone))
    assert "no tuning database" in facts["history"]["error"]
    text = CliRunner().invoke(main, ["report", str(tmp_path / "gone")]).output
    assert "note: " in text and "gone.db" in text
