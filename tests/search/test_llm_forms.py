"""The reply forms: transform plans read and applied to the kernel shown, the form of each
request drawn by what each has yielded, the plan prompt, and an accepted plan's rules
carried into the chain's rewrite arm."""

import json
import random
import re
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from stochopt.backend.cost import cost  # noqa: E402
from stochopt.errors import ParseError  # noqa: E402
from stochopt.leir.render import render  # noqa: E402
from stochopt.llm.context import TokenCounter  # noqa: E402
from stochopt.llm.forms import (  # noqa: E402
    FLOOR,
    FORMS,
    FormYield,
    form_weights,
    forms_in_time,
    read_plan,
)
from stochopt.llm.options import llm_options  # noqa: E402
from stochopt.llm.plan_prompt import PlanPrompts  # noqa: E402
from stochopt.llm.prompt import PromptBuilder, load_templates  # noqa: E402
from stochopt.llm.steering import MAX_BOOST, RuleSteering  # noqa: E402
from stochopt.lower import lower  # noqa: E402
from stochopt.machine import load_machine  # noqa: E402
from stochopt.search.chain import ChainConfig  # noqa: E402
from stochopt.search.chain_run import ChainRun  # noqa: E402
from stochopt.search.llm_proposer import LLMProposer  # noqa: E402
from stochopt.search.llm_replies import LLMCandidate, ReplyReader  # noqa: E402
from stochopt.search.proposers import ChainProposer  # noqa: E402
from stochopt.spec import load_spec  # noqa: E402
from stochopt.transform.plan import Step, apply_plan, menu  # noqa: E402
from tests.llm_server import LLMServer, reply  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "plan_prompt_softmax.txt"


@pytest.fixture(scope="module")
def softmax():
    machine = load_machine("mncore2")
    spec = load_spec(ROOT / "specs" / "softmax.py")
    return spec, machine, lower(spec, machine)


@pytest.fixture(scope="module")
def entries(softmax):
    _, machine, baseline = softmax
    return menu(baseline, machine, limit=40)


def number_of(entries, rule: str, option=None) -> int:
    return next(e.number for e in entries if e.step.rule == rule and e.step.option == option)


# -- reading plans ----------------------------------------------------------------------------
@pytest.mark.parametrize("text, steps", [
    ('{"steps": [3, 1]}', [3, 1]),
    ('I would spread first.\n```json\n{"steps": ["2", 4]}\n```', [2, 4]),
    ('<think>maybe {"steps": [9]}</think>{"plan": [5]}', [5]),
    ("steps: [7, 8]", [7, 8]),
])
def test_a_plan_is_read_from_json_or_a_list_of_numbers(text, steps):
    assert read_plan(text) == steps


@pytest.mark.parametrize("text", ["I cannot choose.", '{"steps": []}', '{"steps": [true]}',
                                  'def softmax(x: "f32[128,1024] @ dram"): ...'])
def test_a_reply_without_a_plan_says_what_to_answer(text):
    with pytest.raises(ParseError, match="holds no plan") as e:
        read_plan(text)
    assert '{"steps"' in str(e.value)


def test_a_plan_is_applied_step_after_step_and_carries_the_shown_kernels_path(softmax,
                                                                              entries):
    spec, machine, baseline = softmax
    recip = number_of(entries, "multiply_by_reciprocal")
    spread = number_of(entries, "spread_over_more_of_the_tree", 4)
    before = [Step("tile_output", 0)]   # whatever the chain's path to the kernel shown was
    cand = ReplyReader(spec, machine).plan_candidate([spread, recip], baseline, entries,
                                                     before)
    step = {e.number: e.step for e in entries}
    expected = apply_plan(baseline, [step[spread], step[recip]], machine).kernel
    assert cand.outcome is None and render(cand.kernel) == render(expected)
    assert [s.rule for s in cand.steps] == ["spread_over_more_of_the_tree",
                                            "multiply_by_reciprocal"]
    assert cand.path == before + cand.steps and cand.plan == [spread, recip]
    assert ReplyReader(spec, machine).plan_candidate([recip], baseline, entries,
                                                     None).path is None


def test_a_step_that_no_longer_applies_ends_the_plan_with_the_steps_before(softmax, entries):
    spec, machine, baseline = softmax
    recip = number_of(entries, "multiply_by_reciprocal")   # its only site is gone after it
    cand = ReplyReader(spec, machine).plan_candidate([recip, recip], baseline, entries, None)
    assert cand.outcome is None and len(cand.steps) == 1
    assert cand.plan_stopped.startswith("step 2 (multiply_by_reciprocal)")
    assert cost(cand.kernel, machine).cycles < cost(baseline, machine).cycles


def test_a_plan_off_the_menu_is_invalid_and_says_what_the_menu_holds(softmax, entries):
    spec, machine, baseline = softmax
    cand = ReplyReader(spec, machine).plan_candidate([99], baseline, entries, None)
    assert cand.outcome == "invalid" and cand.kernel is None
    assert f"entry 99 is not on the menu (1 to {len(entries)})" in cand.error


# -- drawing the form -------------------------------------------------------------------------
def test_before_any_reply_plans_are_drawn_most_and_every_form_keeps_a_floor():
    weights = form_weights({})
    assert weights["plan"] > 0.6 and min(weights.values()) >= FLOOR
    assert sum(weights.values()) == pytest.approx(1.0)
    assert form_weights({}, ["kernel"]) == {"kernel": 1.0}


def test_a_form_that_yields_nothing_falls_to_the_floor_and_one_that_pays_rises():
    yields = {"plan": FormYield(requests=6, tokens=6000, measured=6, well_typed=6, accepted=3),
              "kernel": FormYield(requests=6, tokens=24000, measured=6),
              "edit": FormYield()}
    weights = form_weights(yields)
    assert weights["kernel"] == pytest.approx(FLOOR, abs=0.01)
    assert weights["plan"] > 0.8
    # kernels that land, cheaply, take the lead
    yields["kernel"] = FormYield(requests=6, tokens=6000, measured=6, well_typed=6,
                                 accepted=6)
    assert max(form_weights(yields), key=form_weights(yields).get) == "kernel"


def test_a_local_server_is_asked_for_plans_until_its_first_reply():
    assert forms_in_time(("plan", "edit", "kernel"), {}, 300.0) == (("plan",), {})
    # no plan allowed: the cheapest of the rest (a tie: the first in FORMS)
    assert forms_in_time(("kernel", "edit"), {}, 300.0)[0] == ("edit",)
    assert forms_in_time(("kernel",), {}, 1.0)[0] == ("kernel",)


def test_a_form_waits_while_its_reply_cannot_come_back_in_the_time_left():
    # plans took 10 s: an edit is expected to take 4 times as long (the prior costs)
    yields = {"plan": FormYield(requests=2, answered=2, seconds=20.0)}
    assert forms_in_time(FORMS, yields, 300.0)[0] == ("plan", "edit", "kernel")
    assert forms_in_time(FORMS, yields, None)[0] == ("plan", "edit", "kernel")
    forms, waiting = forms_in_time(FORMS, yields, 60.0)
    assert forms == ("plan",) and set(waiting) == {"edit", "kernel"}
    assert "expected to take 40 s on this server, more than 50% of the 60 s left" in \
        waiting["edit"]
    # a form's own replies replace the estimate (edits took 200 s), and a form not yet
    # answered is expected to be as slow for its cost as the slowest one answered
    yields["edit"] = FormYield(requests=1, answered=1, seconds=200.0)
    forms, waiting = forms_in_time(FORMS, yields, 300.0)
    assert forms == ("plan",) and "take 200 s" in waiting["edit"]
    assert "take 200 s" in waiting["kernel"]
    assert forms_in_time(FORMS, yields, 500.0)[0] == FORMS


@pytest.mark.slow  # six candidates through a chain with full checks on its path
def test_each_request_records_its_form_in_the_transcript_and_the_events(softmax, tmp_path,
                                                                        entries):
    spec, machine, baseline = softmax
    recip = number_of(entries, "multiply_by_reciprocal")
    with LLMServer(default=reply(json.dumps({"steps": [recip]}))) as server:
        options = llm_options({"model": "local", "base_url": server.url, "concurrency": 2,
                               "backoff_s": 0.01, "timeout_s": 5.0, "structured": "off"})
        llm = LLMProposer(options, spec, machine, baseline, tmp_path, 0,
                          deadline=time.time() + 60, seed=3)
        chain = ChainRun(0, spec, baseline, cost(baseline, machine).cycles, baseline, machine,
                         ["llm"], 0, ChainConfig(full_examples=4), llm)
        events = [chain.step()[0] for _ in range(6)]
        llm.close()
    saved = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "llm").glob("chain*.json")}
    for e in events:
        if e["move"] != "no_reply":
            assert e["llm_form"] == saved[e["llm_request"]]["variant"]["form"]
    plans = [e for e in events if e.get("llm_form") == "plan"]
    assert plans and all(e["move"] == "plan" and e["outcome"] != "parse_error" for e in plans)
    assert plans[0]["llm_steps"] == [["multiply_by_reciprocal", 0]]
    entry = saved[plans[0]["llm_request"]]["candidates"][0]
    assert entry["plan"] == [recip] and entry["steps"] == [["multiply_by_reciprocal", 0]]
    assert entry["well_typed"] and entry["screened_equal"] and entry["accepted"]
    others = [e for e in events if e.get("llm_form") in ("kernel", "edit")]
    assert all(e["outcome"] == "parse_error" for e in others)  # a plan is no kernel text


# -- the model's judgement in the rewrite arm -------------------------------------------------
def test_an_accepted_plan_raises_its_rules_in_the_rewrite_arm_bounded_and_decaying(softmax):
    _, machine, _ = softmax
    steering = RuleSteering()

    class Model:  # what the chain's proposer asks of the llm proposer
        rule_weights = staticmethod(steering.weights)

    proposer = ChainProposer(["rewrite", "llm"], machine, {"tile_output": 2.0}, Model())
    assert proposer._weights("rewrite") == {"tile_output": 2.0}   # nothing accepted yet
    for _ in range(10):
        steering.reinforce(["multiply_by_reciprocal", "tile_output"])
    weights = proposer._weights("rewrite")
    assert weights["multiply_by_reciprocal"] == pytest.approx(1 + MAX_BOOST)
    assert weights["tile_output"] == pytest.approx(2.0 * (1 + MAX_BOOST))
    assert proposer._weights("mutate") == {"tile_output": 2.0}  # mutations are not steered
    for _ in range(6000):
        proposer._weights("rewrite")
    assert proposer._weights("rewrite") == {"tile_output": 2.0}  # back to the table's


def test_accepted_plans_steer_the_chain_that_accepted_them(softmax, tmp_path, entries):
    spec, machine, baseline = softmax
    recip = number_of(entries, "multiply_by_reciprocal")
    with LLMServer(default=reply(json.dumps({"steps": [recip]}))) as server:
        options = llm_options({"model": "local", "base_url": server.url, "concurrency": 1,
                               "timeout_s": 5.0, "structured": "off", "forms": ["plan"]})
        llm = LLMProposer(options, spec, machine, baseline, tmp_path, 0,
                          deadline=time.time() + 60)
        chain = ChainRun(0, spec, baseline, cost(baseline, machine).cycles, baseline, machine,
                         ["llm"], 0, ChainConfig(full_examples=4), llm)
        event = chain.step()[0]
        llm.close()
    assert event["outcome"] in ("accepted", "best")
    assert llm.steering.describe() == {"multiply_by_reciprocal": 1.0}
    assert chain.proposer._weights("rewrite")["multiply_by_reciprocal"] > 1.9


def test_only_a_plan_faster_than_the_kernel_it_was_shown_steers(softmax, tmp_path, entries):
    spec, machine, baseline = softmax
    step = next(e.step for e in entries if e.step.rule == "multiply_by_reciprocal")
    with LLMServer(default=reply("{}")) as server:
        options = llm_options({"model": "local", "base_url": server.url, "concurrency": 1,
                               "timeout_s": 5.0, "structured": "off", "forms": ["plan"]})
        llm = LLMProposer(options, spec, machine, baseline, tmp_path, 0,
                          deadline=time.time() + 60)
        for cycles in (1200, 1000):   # accepted uphill (Metropolis), then equal: no lead
            cand = LLMCandidate("llm", "plan", baseline, request="r", form="plan",
                                steps=[step], shown_cycles=1000)
            llm.record({"outcome": "accepted", "cycles": cycles}, cand)
        assert llm.steering.describe() == {}
        cand = LLMCandidate("llm", "plan", baseline, request="r", form="plan", steps=[step],
                            shown_cycles=1000)
        llm.record({"outcome": "accepted", "cycles": 900}, cand)
        llm.close()
    assert llm.steering.describe() == {"multiply_by_reciprocal": 1.0}


# -- the plan prompt --------------------------------------------------------------------------
def plan_prompt(softmax, context_tokens: int) -> str:
    spec, machine, baseline = softmax
    builder = PromptBuilder(load_templates(), spec, machine, baseline)
    prompt = PlanPrompts(builder).build(baseline, [], context_tokens, TokenCounter().estimate,
                                        "bottleneck")
    return prompt, "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in prompt.messages)


def test_the_plan_prompt_a_large_model_is_sent_is_reviewed_as_text(softmax):
    """The fixture is the prompt a large coder model gets for softmax (its context holds
    the richest level). Numbers are masked: a cost model change moves them, not the
    text. After changing the templates, rewrite it with STOCHOPT_WRITE_FIXTURES=1."""
    import os

    prompt, text = plan_prompt(softmax, 100_000)
    assert prompt.level_name == "full" and prompt.fits
    if os.environ.get("STOCHOPT_WRITE_FIXTURES"):
        FIXTURE.parent.mkdir(exist_ok=True)
        FIXTURE.write_text(text)
    masked = [re.sub(r"\d+", "#", t) for t in (text, FIXTURE.read_text())]
    assert masked[0] == masked[1]


def test_a_small_context_gets_a_shorter_menu_and_no_reference(softmax):
    big, _ = plan_prompt(softmax, 100_000)
    small, text = plan_prompt(softmax, 1100)  # menu only: ~1,040 tokens
    assert small.level_name == "menu only" and small.fits
    assert small.estimate_tokens < big.estimate_tokens < 2500
    assert "```leir" not in text and "1. " in text
    assert len(small.entries) <= 12


def test_variants_draw_forms_by_weight_and_stay_reproducible():
    from stochopt.llm.variants import draw_variants

    draws = [v.form for v in draw_variants(random.Random(1), 200, set(), None,
                                           {"plan": 0.8, "edit": 0.1, "kernel": 0.1})]
    again = [v.form for v in draw_variants(random.Random(1), 200, set(), None,
                                           {"plan": 0.8, "edit": 0.1, "kernel": 0.1})]
    assert draws == again and 0.7 < draws.count("plan") / 200 < 0.9
    assert {v.form for v in draw_variants(random.Random(1), 5, set(), None)} == {"kernel"}
