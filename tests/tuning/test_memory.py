"""A memory for the LLM: slow -> fast pairs from earlier runs, the most similar to the
kernel a prompt asks about, within a character budget, in the prompt's examples field."""

import pytest

from stochopt.backend.cost import cost
from stochopt.leir.parser import parse
from stochopt.leir.render import render
from stochopt.llm.prompt import LEVELS, PromptBuilder, load_templates
from stochopt.tuning.fingerprints import machine_print, spec_print
from stochopt.tuning.memory import (
    choose,
    example_pool,
    examples_text,
    kernel_ops,
    plan_examples_text,
    similarity,
)
from stochopt.tuning.store import kernel_body

from .conftest import SMALL, remember, softmax_at

MACHINE = machine_print(SMALL)[0]


@pytest.fixture
def pool(store):
    """The pool a run of softmax at 32x512 takes from a database that knows it at two
    other shapes."""
    for rows, cols in ((256, 64), (16, 512)):
        spec, _, kernel, plan = softmax_at(rows, cols)
        remember(store, spec, kernel, plan, run_dir=f"runs/softmax-{rows}x{cols}")
    spec = softmax_at(32, 512)[0]
    store.add_spec(spec_print(spec))
    return example_pool(store, spec_print(spec).fingerprint, MACHINE, SMALL)


def test_the_pool_holds_each_runs_baseline_and_best_with_its_plan(pool):
    assert {p["run_dir"] for p in pool} == {"runs/softmax-256x64", "runs/softmax-16x512"}
    for pair in pool:
        rows, cols = (int(n) for n in pair["run_dir"].split("-")[1].split("x"))
        _, baseline, kernel, plan = softmax_at(rows, cols)
        assert pair["slow"] == render(baseline, SMALL) and pair["fast"] == render(kernel, SMALL)
        assert (pair["slow_cycles"], pair["fast_cycles"]) == (cost(baseline, SMALL).cycles,
                                                              cost(kernel, SMALL).cycles)
        assert pair["plan"] == [s.to_json() for s in plan] and not pair["same_spec"]
        assert pair["ops"] == {op: n for op, n in kernel_ops(kernel).items()}


def test_the_pool_puts_the_specs_own_runs_first_and_leaves_refuted_kernels_out(store):
    spec, _, kernel, plan = softmax_at(16, 512)
    other = remember(store, *softmax_at(256, 64)[::2], run_dir="runs/other")
    own = remember(store, spec, kernel, plan, run_dir="runs/own")
    found = example_pool(store, own["spec"], MACHINE, SMALL)
    assert [p["run_dir"] for p in found] == ["runs/own", "runs/other"]
    assert found[0]["same_spec"]
    store.mark_refuted(other["uid"], "a test")
    assert [p["run_dir"] for p in example_pool(store, own["spec"], MACHINE, SMALL)] == \
        ["runs/own"]


def test_a_prompt_shows_at_most_two_pairs_most_similar_first_within_its_budget(pool):
    _, baseline, _, _ = softmax_at(32, 512)
    text = examples_text(pool, baseline, 100_000)
    assert text.count("## Example ") == 2 and "Examples from earlier runs" in text
    for pair in pool:
        assert kernel_body(pair["fast"]) in text and kernel_body(pair["slow"]) in text
    ranked = choose(pool, baseline, 100_000)
    scores = [similarity(kernel_ops(baseline), p["ops"]) for p, _ in ranked]
    assert len(ranked) == 2 and scores == sorted(scores, reverse=True)
    one = len(examples_text(pool[:1], baseline, 100_000))
    small = examples_text(pool, baseline, one + 10)
    assert small.count("## Example ") == 1 and len(small) <= one + 10
    shorter = examples_text(pool, baseline, one - 200)   # the slow kernel gives way
    assert shorter.count("## Example ") <= 1 and "Before:" not in shorter
    assert examples_text(pool, baseline, 50) == "" and examples_text([], baseline, 10**6) == ""


def test_a_pair_whose_fast_kernel_is_the_kernel_asked_about_is_not_shown(pool):
    for pair in pool:
        shown = choose(pool, parse(pair["fast"], SMALL), 10**6)
        assert [p["run_dir"] for p, _ in shown] == [p["run_dir"] for p in pool
                                                   if p is not pair]


def test_the_prompt_builder_fills_its_examples_field_within_each_levels_room(pool):
    spec, baseline, _, _ = softmax_at(32, 512)
    builder = PromptBuilder(load_templates(), spec, SMALL, baseline, examples=pool)
    user = builder.user(baseline, cost(baseline, SMALL), [])
    assert "# Examples from earlier runs" in user and kernel_body(pool[0]["fast"]) in user
    plain = PromptBuilder(load_templates(), spec, SMALL, baseline)
    assert "Examples from earlier runs" not in plain.user(baseline, cost(baseline, SMALL),
                                                           [])
    shown = [builder.user(baseline, cost(baseline, SMALL), [], level) for level in LEVELS]
    sizes = [len(examples_text(pool, baseline, level.example_chars)) for level in LEVELS]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > 0 and sizes[-1] == 0
    assert all(("Examples from earlier runs" in text) == (size > 0)
               for text, size in zip(shown, sizes, strict=True))


def test_similarity_is_the_cosine_of_op_counts():
    assert similarity({"exp": 2}, {"exp": 5}) == pytest.approx(1.0)
    assert similarity({"exp": 1}, {"matmul": 1}) == 0.0
    assert 0 < similarity({"exp": 1, "matmul": 1}, {"exp": 1}) < 1
    assert similarity({}, {"exp": 1}) == 0.0


def test_a_plan_prompt_names_the_rules_of_earlier_runs_plans(pool):
    """Plan prompts are short (small models read slowly): a line per earlier plan, the
    rules in order, most similar first; none when no pair has a plan."""
    from stochopt.llm.plan_prompt import PlanPrompts
    from stochopt.transform.plan import plan_from_json

    spec, baseline, _, _ = softmax_at(32, 512)
    text = plan_examples_text(pool, baseline)
    lines = [line for line in text.splitlines() if line.startswith("- spec softmax")]
    assert "# Plans from earlier runs" in text and len(lines) == 2
    for pair, line in zip(choose(pool, baseline, 10**6), lines, strict=True):
        rules = [step.rule for step in plan_from_json(pair[0]["plan"])]
        assert line.endswith(": " + " -> ".join(rules))
        assert f"{pair[0]['slow_cycles']} -> {pair[0]['fast_cycles']} cycles" in line
    assert plan_examples_text([{**p, "plan": None} for p in pool], baseline) == ""
    assert plan_examples_text([], baseline) == ""
    builder = PromptBuilder(load_templates(), spec, SMALL, baseline, examples=pool)
    prompt = PlanPrompts(builder).build(baseline, [], 10**6, lambda m: 0)
    assert text.strip() in prompt.messages[1]["content"]
