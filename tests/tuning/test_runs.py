"""A run's side of the database: what it starts from (a warm start, re-checked when its
proof is not this verifier's; plans from similar specs), what it writes as it goes, and
a database that fails, which never stops the run."""

import json
import time
from pathlib import Path

import pytest

from stochopt.backend.cost import cost
from stochopt.errors import StochoptError
from stochopt.leir.render import render
from stochopt.rundir import BEST_JSON, WARM_START_LEIR, atomic_write
from stochopt.search.best_kernel import write_best
from stochopt.transform.plan import plan_to_json, replay_plan
from stochopt.tuning.database import Database
from stochopt.tuning.fingerprints import machine_print, spec_print, verifier_version
from stochopt.tuning.runs import (
    RunRecorder,
    kernel_row,
    plan_from_lowering,
    prepare,
    remember_run_dir,
    start_line,
    starting_point,
)
from stochopt.tuning.store import TuningDB, uid_of
from stochopt.verify.screening import ScreeningSet

from .conftest import SMALL, remember, softmax_at

VERDICT = {"equivalent": True, "examples": 20, "seed": 0, "max_semantic_error": 0.0,
           "max_precision_error": 0.5}


def a_run(tmp_path, spec, db_path, cold=False, **settings) -> dict:
    """A run's dict as optimize() makes it, the database prepared."""
    run = {"spec": spec.name, "init": None, "budget_s": 60.0, "seed": 0, "host": "host",
           "started": time.time(), "baseline_cycles": 100, "config": {"full_examples": 5},
           **settings}
    prepare(run, spec, SMALL, db=db_path, cold=cold)
    return run


def test_prepare_names_a_database_it_cannot_use_in_one_line_and_goes_on(tmp_path, capsys):
    spec = softmax_at(16, 512)[0]
    broken = tmp_path / "broken.db"
    broken.write_text("not a database" * 100)
    run = a_run(tmp_path, spec, broken)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(broken) in err and "goes on without it" in err
    assert run["tuning"]["db"] is None and str(broken) in run["tuning"]["why"]
    off = {}
    prepare(off, spec, SMALL, use=False)
    assert off["tuning"] == {"db": None, "why": "off (--no-db)"}


def test_prepare_records_the_fingerprints_and_the_spec(tmp_path):
    spec = softmax_at(16, 512)[0]
    run = a_run(tmp_path, spec, tmp_path / "t.db")
    tuning = run["tuning"]
    assert tuning["spec_fingerprint"] == spec_print(spec).fingerprint
    assert tuning["machine_fingerprint"] == machine_print(SMALL)[0]
    assert tuning["verifier"] == verifier_version()
    with TuningDB(tmp_path / "t.db") as db:
        assert db.spec(tuning["spec_fingerprint"])["name"] == "softmax"


def start(tmp_path, run, spec, baseline):
    screening = ScreeningSet(spec, baseline, SMALL, 3, 0)
    rd = tmp_path / "run"
    rd.mkdir(exist_ok=True)
    return rd, starting_point(rd, run, spec, SMALL, baseline, screening, time.time())


def known(tmp_path, **remembered):
    """softmax 16x512 and greedy's kernel for it, which the database at tmp_path/t.db
    holds: (spec, baseline, kernel, plan, its row)."""
    spec, baseline, kernel, plan = softmax_at(16, 512)
    with TuningDB(tmp_path / "t.db") as db:
        row = remember(db, spec, kernel, plan, **remembered)
    return spec, baseline, kernel, plan, row


def test_a_run_starts_from_the_databases_best_kernel_for_its_spec(tmp_path):
    spec, baseline, kernel, plan, row = known(tmp_path, run_dir="runs/first")
    run = a_run(tmp_path, spec, tmp_path / "t.db")
    rd, found = start(tmp_path, run, spec, baseline)
    assert render(found[0], SMALL) == render(kernel, SMALL) and found[1] == row["proof"]["verdict"]
    assert run["init"] == str((rd / WARM_START_LEIR).resolve())
    warm = run["tuning"]["warm_start"]
    assert (warm["kernel"], warm["cycles"], warm["run_dir"], warm["rechecked"]) == \
        (row["uid"], cost(kernel, SMALL).cycles, "runs/first", False)
    assert warm["plan"] == plan_to_json(plan) and run["tuning"]["start"] == "database"
    assert start_line(run["tuning"]).startswith(f"warm start: {cost(kernel, SMALL).cycles} "
                                                "cycles")


def test_cold_ignores_the_database_and_init_wins_over_it(tmp_path):
    spec, baseline, *_ = known(tmp_path)
    run = a_run(tmp_path, spec, tmp_path / "t.db", cold=True)
    assert start(tmp_path, run, spec, baseline)[1] is None and run["init"] is None
    assert run["tuning"]["start"] == "lowering" and "seed_plans" not in run["config"]
    chosen = a_run(tmp_path, spec, tmp_path / "t.db", init="my.leir")
    assert start(tmp_path, chosen, spec, baseline)[1] is None
    assert chosen["init"] == "my.leir" and chosen["tuning"]["warm_start"] is None


def test_a_kernel_proved_under_another_verifier_is_checked_first(tmp_path):
    spec, baseline, _, _, row = known(tmp_path, verifier="0.0.1+000000000000")
    run = a_run(tmp_path, spec, tmp_path / "t.db")
    _, found = start(tmp_path, run, spec, baseline)
    assert found is not None and run["tuning"]["warm_start"]["rechecked"]
    assert found[1]["examples"] == 5 and found[1]["equivalent"]
    with TuningDB(tmp_path / "t.db") as db:
        again = db.kernel(row["uid"])
    assert again["verifier"] == verifier_version() and again["checked_here"] == 1


def test_a_kernel_that_fails_now_is_refuted_and_the_next_one_taken(tmp_path):
    spec, baseline, kernel, plan = softmax_at(16, 512)
    wrong = render(kernel, SMALL).replace("reciprocal(", "exp(")  # fast and wrong
    with TuningDB(tmp_path / "t.db") as db:
        good = remember(db, spec, kernel, plan, run_dir="runs/good")
        bad = dict(good, uid="bad", text=wrong, text_sha256="bad", cycles=good["cycles"] - 1,
                   plan=None, checked_here=0)
        db.add_kernel(bad)
    run = a_run(tmp_path, spec, tmp_path / "t.db")
    _, found = start(tmp_path, run, spec, baseline)
    assert run["tuning"]["warm_start"]["kernel"] == good["uid"]
    with TuningDB(tmp_path / "t.db") as db:
        assert db.kernel("bad")["refuted"] and db.kernel(good["uid"])["refuted"] is None


def test_a_kernel_no_faster_than_the_lowering_is_no_warm_start(tmp_path):
    spec, baseline, _, _ = softmax_at(16, 512)
    with TuningDB(tmp_path / "t.db") as db:
        row = remember(db, spec, baseline, [])   # e.g. faster once, under another cost model
    run = a_run(tmp_path, spec, tmp_path / "t.db")
    assert start(tmp_path, run, spec, baseline)[1] is None and run["init"] is None
    with TuningDB(tmp_path / "t.db") as db:
        assert db.kernel(row["uid"])["refuted"] is None   # not wrong: kept


def test_a_spec_with_no_kernel_takes_plans_and_weights_from_its_family(tmp_path):
    near, _, kernel, plan = softmax_at(256, 64)
    with TuningDB(tmp_path / "t.db") as db:
        row = remember(db, near, kernel, plan)
        db.put_rule_stats(row["run"], 1.0, spec_print(near).family,
                          {("rewrite", "tile_output"): [500, 50, 10],
                           ("rewrite", "multiply_by_reciprocal"): [500, 50, 0]})
    spec, baseline, _, _ = softmax_at(32, 512)
    run = a_run(tmp_path, spec, tmp_path / "t.db")
    run["config"]["move_weights"] = {"tile_output": 0.5}   # the user's own: kept
    assert start(tmp_path, run, spec, baseline)[1] is None and run["init"] is None
    # the steps that apply at the new shapes (list_schedule does not, here)
    applied = replay_plan(baseline, plan, SMALL).applied
    assert run["config"]["seed_plans"] == [plan_to_json(applied)] and applied != plan
    assert run["config"]["move_weights"]["tile_output"] == 0.5
    assert run["config"]["move_weights"]["multiply_by_reciprocal"] < 1
    assert run["tuning"]["start"] == "transfer"
    assert start_line(run["tuning"]).startswith("from similar specs in the tuning database: "
                                                "plans of softmax")


def finished_run(tmp_path, spec, kernel, verdict=VERDICT, **best) -> tuple:
    rd = tmp_path / "run"
    (rd / "counterexamples").mkdir(parents=True, exist_ok=True)
    atomic_write(rd / "baseline.leir", render(softmax_at(16, 512)[1], SMALL))
    write_best(rd, kernel, spec, verdict, SMALL, "search", 3.0, 1)
    if best:
        path = rd / BEST_JSON
        path.write_text(json.dumps({**json.loads(path.read_text()), **best}))
    return rd


def test_a_proved_best_becomes_a_row_with_its_proof_and_plan(tmp_path):
    spec, _, kernel, plan = softmax_at(16, 512)
    run = a_run(tmp_path, spec, tmp_path / "t.db")
    rd = finished_run(tmp_path, spec, kernel, plan=plan_to_json(plan), plan_start="lowering")
    row = kernel_row(rd, run, "run-uid")
    assert row["cycles"] == cost(kernel, SMALL).cycles and row["plan"] == plan_to_json(plan)
    assert row["proof"]["verdict"] == VERDICT and row["precision_margin"] == 0.5
    assert row["proof"]["certificate"]["seed"] == 0 and (row["t"], row["chain"]) == (3.0, 1)
    rd = finished_run(tmp_path, spec, kernel, verdict=dict(VERDICT, equivalent=False))
    assert kernel_row(rd, run, "run-uid") is None   # not proved: nothing to remember


def test_a_plan_from_the_warm_start_is_joined_to_the_warm_starts_own():
    warm = {"tuning": {"warm_start": {"plan": [["tile_output", 0]]}}}
    tail = [["multiply_by_reciprocal", 0]]
    assert plan_from_lowering({"plan": tail, "plan_start": "lowering"}, {}) == tail
    assert plan_from_lowering({"plan": tail, "plan_start": "init"}, warm) == \
        [["tile_output", 0]] + tail
    assert plan_from_lowering({"plan": tail, "plan_start": "init"}, {}) is None
    assert plan_from_lowering({"plan": None, "plan_start": "lowering"}, warm) is None
    assert plan_from_lowering({"plan": [["x"]], "plan_start": "lowering"}, {}) is None


def recording(tmp_path, notes=None):
    """A run of softmax 16x512 that proved greedy's kernel, its recorder on
    tmp_path/t.db: (run, run directory, recorder)."""
    spec, _, kernel, _ = softmax_at(16, 512)
    run = a_run(tmp_path, spec, tmp_path / "t.db")
    rd = finished_run(tmp_path, spec, kernel)
    return run, rd, RunRecorder(rd, run, notes)


def test_the_recorder_writes_bests_statistics_and_the_end(tmp_path):
    run, rd, recorder = recording(tmp_path)
    kernel = softmax_at(16, 512)[2]
    recorder.best(rd)
    recorder.stats({("rewrite", "tile_output"): [3, 1, 1]})
    recorder.end(rd, "budget")
    with TuningDB(tmp_path / "t.db") as db:
        (row,) = db.runs_of(run["tuning"]["spec_fingerprint"], run["tuning"]["machine_fingerprint"])
        assert (row["best_cycles"], row["stopped_by"], row["start"]) == \
            (cost(kernel, SMALL).cycles, "budget", "lowering")
        assert len(db.kernels_of_run(row["uid"])) == 1
        assert db.rule_totals([run["tuning"]["family"]]) == {("rewrite", "tile_output"):
                                                             [3, 1, 1]}


def test_a_best_that_failed_the_final_recheck_is_refuted(tmp_path):
    spec, baseline, kernel, _ = softmax_at(16, 512)
    _, rd, recorder = recording(tmp_path)
    recorder.best(rd)
    # the re-check failed: best.leir went back to the baseline, a counterexample was kept
    write_best(rd, baseline, spec, VERDICT, SMALL, "start")
    (rd / "counterexamples" / "recheck.npz").write_bytes(b"inputs")
    recorder.end(rd, "budget")
    with TuningDB(tmp_path / "t.db") as db:
        fast = db.kernel(uid_of(recorder.uid, kernel_sha(kernel)))
        assert fast["refuted"] == "failed the run's final re-check"


def kernel_sha(kernel):
    from stochopt.tuning.store import kernel_sha256
    return kernel_sha256(render(kernel, SMALL))


def test_a_database_that_fails_during_the_run_is_said_once_and_dropped(tmp_path, capsys):
    notes = []
    _, rd, recorder = recording(tmp_path, notes)
    recorder.store.connection.close()   # as if the file went away under the run
    recorder.best(rd)
    recorder.stats({("mutate", "swap"): [1, 0, 0]})
    recorder.end(rd, "budget")
    err = capsys.readouterr().err
    assert err.count("stopped taking writes") == 1 and len(notes) == 1
    assert f"stochopt db import {rd}" in notes[0] and recorder.store is None


def test_a_run_directory_is_added_once_with_its_best_and_earlier_bests(tmp_path):
    spec, baseline, kernel, _ = softmax_at(16, 512)
    rd = finished_run(tmp_path, spec, kernel)
    (rd / "spec.py").write_text(Path(spec.path).read_text())
    (rd / "run.json").write_text(json.dumps({
        "spec": "softmax", "machine": SMALL.summary(), "machine_name": "small",
        "host": "elsewhere", "started": 1000.0, "seed": 0, "budget_s": 60.0, "init": None,
        "baseline_cycles": cost(baseline, SMALL).cycles}, default=list))
    (rd / "checkpoint.json").write_text(json.dumps({"stopped_by": "budget", "bests": [
        {"cycles": cost(baseline, SMALL).cycles, "text": render(baseline), "verdict": VERDICT,
         "t": 1.0, "chain": 0}]}))
    with Database(tmp_path / "t.db") as db:
        assert remember_run_dir(db, rd) == {"runs": 1, "kernels": 2}
        assert remember_run_dir(db, rd) == {"runs": 0, "kernels": 0}
        (row,) = db.list()
        assert (row["spec"], row["machine"], row["kernels"], row["best_cycles"]) == \
            ("softmax", "small", 2, cost(kernel, SMALL).cycles)
        with pytest.raises(StochoptError, match="not a run directory"):
            remember_run_dir(db, tmp_path)
