"""The yield of the LLM's requests, per form and per prompt focus (stochopt/llm/yields.py),
as the report, run.json, the summary and the live view show it."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402

from stochopt.llm.yields import FUNNEL, LiveYield, yield_table  # noqa: E402
from stochopt.search.display import llm_yield_lines, progress_view  # noqa: E402
from stochopt.search.llm_replies import judged  # noqa: E402
from stochopt.search.stats import RunStats  # noqa: E402


def transcript(rid, form, focus, candidates, status="ok", tokens=(900, 10), cost=0.0):
    return {"id": rid, "variant": {"form": form, "focus": focus}, "status": status,
            "usage": {"prompt_tokens": tokens[0], "completion_tokens": tokens[1]},
            "cost_usd": cost, "candidates": candidates}


def verdict(outcome, **event):
    return {"outcome": outcome, **judged({"outcome": outcome, **event})}


TRANSCRIPTS = [
    transcript("chain0-00001", "plan", "open", [verdict("checking", error=0.0)], cost=0.01),
    transcript("chain0-00002", "plan", "fusion", [verdict("rejected", error=None,
                                                          cycles=9000)], cost=0.01),
    transcript("chain0-00003", "kernel", "open",
               [{"move": "no_code", "read_as": "parse_error", "outcome": "parse_error"},
                {"move": "kernel", "read_as": "invalid", "outcome": "invalid"},
                verdict("wrong", error=0.5)], tokens=(3000, 400), cost=0.03),
    transcript("chain0-00004", "edit", "open", [{"move": "request_failed"}],
               status="failed", tokens=(0, 0)),
]


def test_the_funnel_counts_each_stage_per_form_and_per_focus():
    table = yield_table(TRANSCRIPTS, proved={("chain0-00001", 0)})
    forms = {r["name"]: r for r in table["forms"]}
    assert [r["name"] for r in table["forms"]] == ["plan", "edit", "kernel"]
    assert {k: forms["plan"][k] for k in FUNNEL} == {
        "requests": 2, "replies": 2, "candidates": 2, "parsed": 2, "well_typed": 2,
        "screened_equal": 1, "accepted": 1, "new_bests": 1, "proved": 1}
    assert {k: forms["kernel"][k] for k in FUNNEL} == {
        "requests": 1, "replies": 1, "candidates": 3, "parsed": 2, "well_typed": 1,
        "screened_equal": 0, "accepted": 0, "new_bests": 0, "proved": 0}
    assert forms["edit"]["requests"] == 1 and forms["edit"]["replies"] == 0
    assert forms["plan"]["tokens_per_accepted"] == 1820
    assert forms["plan"]["usd_per_accepted"] == 0.02 and forms["kernel"]["usd_per_accepted"] \
        is None
    focus = {r["name"]: r for r in table["variants"]}
    assert table["variants"][0]["name"] == "open" and focus["open"]["requests"] == 3
    assert table["total"]["requests"] == 4 and table["total"]["proved"] == 1


def test_a_chain_verdict_is_counted_as_the_yield_reads_it():
    assert judged({"outcome": "rejected", "error": None}) == {
        "well_typed": True, "screened_equal": False, "accepted": False, "new_best": False}
    assert judged({"outcome": "rejected", "error": 0.0})["screened_equal"]   # slower, equal
    refuted = judged({"outcome": "wrong", "error": "mismatch", "counterexample": True})
    assert refuted == {"well_typed": True, "screened_equal": True, "accepted": True,
                       "new_best": True}
    assert not judged({"outcome": "invalid"})["well_typed"]


def test_the_live_view_shows_one_line_of_the_yield_and_the_summary_one_per_form():
    stats = RunStats({"spec": "softmax", "budget_s": 60.0, "baseline_cycles": 7652,
                      "roofline_cycles": 1536, "arms": ["llm"]}, {}, 0.0)
    for e in ({"llm_candidate": 0, "outcome": "accepted", "move": "plan"},
              {"llm_candidate": 0, "outcome": "best", "move": "plan", "llm_request": "r2"},
              {"llm_candidate": 0, "outcome": "parse_error", "move": "kernel",
               "llm_form": "kernel"}):
        stats.add({"proposer": "llm", "error": None, "llm_form": "plan", **e})
    line = stats.snapshot()["llm_yield"]
    assert line == ("LLM yield: kernel 1 asked, 0 well-typed, 0 accepted, 0 best; "
                    "plan 2 asked, 2 well-typed, 2 accepted, 1 best")
    console = Console(record=True, width=200)
    console.print(progress_view(stats.snapshot()))
    assert line in console.export_text()
    assert stats.llm_yield.proved == {("r2", 0)}
    lines = llm_yield_lines(yield_table(TRANSCRIPTS, set()))
    assert lines[0].startswith("LLM yield (plan): 2 asked, 2 answered, 2 well-typed of 2, "
                               "1 equal on screening, 1 accepted, 1 new bests, 0 proved; "
                               "1820 tokens per accepted candidate ($0.0200)")
    assert len(lines) == 3 and LiveYield().line() is None


def test_a_line_about_constrained_decoding_reaches_the_summary_once():
    stats = RunStats({"spec": "softmax", "budget_s": 60.0, "baseline_cycles": 7652,
                      "roofline_cycles": 1536, "arms": ["llm"]}, {}, 0.0)
    note = "the endpoint refused a GBNF grammar (HTTP 400): kernels are read from free text"
    for _ in range(2):
        stats.add({"proposer": "llm", "move": "kernel", "outcome": "invalid", "error": "x",
                   "llm_form": "kernel", "llm_candidate": 0, "llm_note": note})
    assert stats.notes == [note]
