"""run_facts(): what a run directory says, for a finished, a running and a killed run."""

from __future__ import annotations

import json
import os
import time

import pytest

from stochopt.errors import StochoptError
from stochopt.report.facts import run_facts, to_json
from tests.report.conftest import BEST
from tests.report.conftest import _event as _event_


def test_totals_count_every_event_and_accepted_counts_moves_the_chain_took(make_run):
    f = run_facts(make_run())
    assert f["proposals"] == 11
    assert f["outcomes"] == {"parse_error": 1, "invalid": 1, "wrong": 1, "rejected": 1,
                             "accepted": 3, "best": 4}
    assert f["accepted"] == 7  # accepted and best: the chain moved to the candidate
    assert f["acceptance"] == round(7 / 11, 4)
    assert f["tokens"] == 2000 and f["cost_usd"] == pytest.approx(0.005)
    assert f["proposers"]["llm"]["tokens"] == 2000


def test_each_step_of_the_best_is_credited_along_the_path_its_chain_took(make_run,
                                                                         best_cycles):
    f = run_facts(make_run())
    steps = [(s["proposer"], s["cycles"], s["saved"]) for s in f["improvements"]]
    # chain 1's best of 5200 came after chain 0 reached 5000: not a step
    assert steps == [("rewrite", 5000, 2652), ("llm", 3000, 2000),
                     ("mutate", best_cycles, 3000 - best_cycles)]
    # step 1: chain 0 went 7652 -> 7600 (mutate, accepted) -> 5000 (rewrite)
    # step 2: chain 1 went 7652 -> 5200 (mutate, its own best) -> 3000 (llm); the 2000
    #         cycles saved are shared 2452 : 2200 between the two moves
    # step 3: chain 0 went 5000 -> 3100 (mutate, accepted) -> best (mutate)
    assert [s["credit"] for s in f["improvements"]] == [
        {"rewrite": 2600, "mutate": 52}, {"mutate": 1054, "llm": 946},
        {"mutate": 3000 - best_cycles}]
    assert [s["path_moves"] for s in f["improvements"]] == [2, 2, 2]
    total = 7652 - best_cycles
    p = f["proposers"]
    assert p["rewrite"]["cycles_saved"] == 2600
    assert p["llm"]["cycles_saved"] == 946
    assert p["rewrite"]["improvement_share"] == round(2600 / total, 4)
    assert p["mutate"]["improvements"] == 1  # two 'best' outcomes, one step
    assert p["mutate"]["outcomes"]["best"] == 2
    assert sum(r["cycles_saved"] for r in p.values()) == total


def test_a_saving_made_by_an_accepted_move_is_credited_to_that_move(make_run):
    """The case the old credit got wrong: a mutation drops most of the work in an
    accepted move (not yet a best: the screening let it through, the full check comes
    at the next best), and a small rewrite crosses the line."""
    events = [_event_(1.0, 0, "mutate", "accepted", 3000, move="delete reduce_max"),
              _event_(2.0, 0, "rewrite", "best", 2900, move="fuse")]
    f = run_facts(make_run(events=events))
    (step,) = f["improvements"]
    assert step["saved"] == 7652 - 2900
    assert step["credit"] == {"mutate": 4652, "rewrite": 100}
    assert step["largest_moves"][0] == {"proposer": "mutate", "move": "delete reduce_max",
                                        "saved": 4652}
    assert f["proposers"]["mutate"]["improvement_share"] > 0.97


def test_a_chain_moved_to_the_global_best_starts_its_path_there(make_run):
    events = [_event_(1.0, 0, "rewrite", "best", 5000),
              _event_(1.5, 1, "mutate", "accepted", 6000),
              {**_event_(2.0, 1, "mutate", "rejected", 9000), "restarted_from_best": True},
              _event_(3.0, 1, "llm", "best", 4000)]
    f = run_facts(make_run(events=events))
    # chain 1's accepted 6000 was left behind when it restarted from the 5000 of chain 0
    assert f["improvements"][1]["credit"] == {"llm": 1000}


def test_headline_numbers_come_from_best_leir_and_run_json(make_run, best_cycles):
    f = run_facts(make_run())
    assert f["baseline_cycles"] == 7652 and f["best_cycles"] == best_cycles
    assert f["speedup"] == round(7652 / best_cycles, 4)
    assert f["roofline_share"] == round(1536 / best_cycles, 4)
    assert f["verified"] is True
    assert f["verification"]["recheck_seed"] == 104729
    assert f["profiles"]["best"]["cycles"] == best_cycles
    assert f["diff"][0] == "--- baseline.leir" and any(d.startswith("+") for d in f["diff"][2:])
    json.loads(to_json(f))  # plain values only


@pytest.mark.parametrize("finished, age_s, status", [
    (True, 3600, "finished"), (False, 1, "running"), (False, 3600, "stopped")])
def test_status_reads_the_checkpoint_and_how_recently_the_run_wrote(make_run, finished,
                                                                      age_s, status):
    f = run_facts(make_run(finished=finished, age_s=age_s))
    assert f["status"] == status
    assert (f["stopped_by"] == "budget") == (status == "finished")


def test_a_killed_run_is_read_up_to_its_cut_line(make_run, best_cycles):
    rd = make_run(finished=False, checkpoint={"elapsed_s": 2.0, "proposals": 3,
                                              "finished": False, "best_cycles": 7652})
    events = rd / "events.jsonl"
    text = events.read_text()
    events.write_text(text + text.splitlines()[0][:25])  # kill -9 in mid-write
    old = time.time() - 600
    os.utime(events, (old, old))
    os.utime(rd / "checkpoint.json", (old, old))
    f = run_facts(rd)
    assert f["status"] == "stopped"
    assert f["proposals"] == 11
    assert f["elapsed_s"] == 4.5  # the events are newer than the stale checkpoint
    assert f["best_cycles"] == best_cycles  # best.leir, not the checkpoint's 7652
    assert any("cut short" in n for n in f["notes"])
    assert any("--resume" in n for n in f["notes"])


def test_a_run_killed_between_best_json_and_best_leir_reports_best_leir(make_run):
    from stochopt.backend.cost import cost
    from stochopt.leir.parser import parse

    rd = make_run()
    older = (rd / "baseline.leir").read_text()  # best.leir still holds the previous best
    (rd / "best.leir").write_text(older)
    f = run_facts(rd)
    assert f["best_cycles"] == cost(parse(older, "mncore2"), "mncore2").cycles
    assert f["verified"] is True and f["verification"] is None
    assert any("killed between the two writes" in n for n in f["notes"])


def test_a_failed_recheck_is_named(make_run, best_cycles):
    baseline = (make_run("first") / "baseline.leir").read_text()
    rd = make_run("recheck", best_text=baseline)  # the search puts the baseline back
    (rd / "counterexamples" / "recheck.npz").write_bytes(b"")
    (rd / "counterexamples" / "recheck.leir").write_text(baseline)  # the refuted kernel
    f = run_facts(rd)
    assert f["best_cycles"] == 7652
    assert f["counterexamples"] == 1  # inputs that refuted kernels, not the kernel beside
    assert f["notes"] == [f"the events record a best of {best_cycles} cycles that best.leir "
                          "does not hold: the final re-check failed (see "
                          "counterexamples/recheck.npz)"]


def test_a_run_with_no_events_yet(make_run):
    f = run_facts(make_run(events=[], finished=False, age_s=1))
    assert f["status"] == "running"
    assert f["proposals"] == 0 and f["acceptance"] == 0.0 and f["improvements"] == []
    assert f["timeline"] == []
    assert set(f["proposers"]) == {"mutate", "rewrite", "llm"}


def test_not_a_run_directory_says_what_to_pass(tmp_path):
    with pytest.raises(StochoptError, match="not a run directory"):
        run_facts(tmp_path)


@pytest.mark.slow  # a real search (the session's real_run)
def test_a_real_run_reads_as_the_search_reported_it(real_run):
    rd, result = real_run
    f = run_facts(rd)
    assert f["status"] == "finished"
    assert f["stopped_by"] == result.stopped_by == "max_proposals"
    for key in ("baseline_cycles", "best_cycles", "speedup", "roofline_cycles",
                "roofline_share", "proposals", "accepted", "verified", "budget_s"):
        assert f[key] == getattr(result, key), key
    assert f["best_path"] == result.best_path
    assert sum(b["proposals"] for b in f["timeline"]) == f["proposals"]


def test_a_run_on_a_custom_machine_is_costed_on_that_machine(make_run, best_cycles):
    from stochopt.machine import load_machine

    summary = json.loads(json.dumps(load_machine("mncore2").summary()))
    f = run_facts(make_run(machine={**summary, "name": "mine"}, machine_name="mine"))
    assert f["machine"] == "mine" and f["notes"] == []
    assert f["best_cycles"] == best_cycles


def test_a_machine_that_cannot_be_rebuilt_falls_back_to_stored_cycles(make_run, best_cycles):
    from stochopt.report.html import render_html

    f = run_facts(make_run(machine={"name": "odd", "warp": 9}, machine_name="odd"))
    assert any("cannot rebuild machine odd" in n for n in f["notes"])
    assert f["best_cycles"] == best_cycles  # from best.json
    assert f["profiles"]["baseline"] == {"cycles": 7652, "ops": [], "resources": {},
                                         "critical_path": []}
    assert render_html(f).count("<svg") == 4


NO_SHIFT = BEST.replace("""    v2 = reduce_max(v1, axis=1, keepdims=True)
    v3 = v1 - v2
    v4 = exp(v3)""", """    v4 = exp(v1)""")


def test_the_report_names_the_declared_ranges_a_best_kernel_relies_on(make_run):
    # softmax without its max shift is right for x in [-20, 20] (exp(20) * 1024 is far
    # from f32's limit) but not on a range ten times as wide, where exp overflows
    rd = make_run(best_text=NO_SHIFT)
    spec = rd / "spec.py"
    spec.write_text(spec.read_text().replace("low=-8.0, high=8.0", "low=-20.0, high=20.0"))
    facts = run_facts(rd)
    assert list(facts["relies_on"]) == ["x"] and "exp(" in facts["relies_on"]["x"][0]
    assert any("declared range of x" in n for n in facts["notes"])
    shifted = run_facts(make_run("shifted"))
    assert shifted["relies_on"] == {}
    assert not any("declared range" in n for n in shifted["notes"])


def test_a_best_kernel_untested_on_a_side_of_its_decisions_says_so(make_run):
    from stochopt.report.facts import headline

    rd = make_run()
    best = json.loads((rd / "best.json").read_text())
    side = "line 12: lt(var, 1e-07) band"
    best["verdict"]["coverage"] = {"not_reached": [side, "line 9: gt(x, 0) above"]}
    best["recheck"]["coverage"] = {"not_reached": [side]}  # the re-check reached the other
    (rd / "best.json").write_text(json.dumps(best))
    f = run_facts(rd)
    assert f["verified"] is True and f["untested"] == [side]
    assert dict(headline(f))["verified"].startswith("yes, NOT TESTED on 1 side of its")
    assert any(side in n and "--strict" in n for n in f["notes"])
    assert run_facts(make_run("plain"))["untested"] == []
