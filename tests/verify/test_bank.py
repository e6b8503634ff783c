"""The check context (verify/bank.py): what a full check computes once per run. A warm
context changes the cost of a check, never its verdict; inputs that do not read a
kernel's cuts are shared by kernels that cut differently; the disk bank is read back;
the memory budget holds."""

import numpy as np
import pytest

from stochopt.backend.node_values import dear_values
from stochopt.errors import StochoptError
from stochopt.leir import parse
from stochopt.leir.render import render
from stochopt.verify import check
from stochopt.verify.bank import (
    CUT_FREE,
    ROW_CUTS_ONLY,
    CheckContext,
    cuts_read,
    drawn_recipes,
    memory_budgets,
    recipe_key,
)
from stochopt.verify.check import shared_inputs
from stochopt.verify.hunting import HUNT_PATTERNS
from stochopt.verify.strategies import (
    BOOL_PATTERNS,
    FLOAT_PATTERNS,
    FRACTIONS,
    Recipe,
    build_inputs,
)
from stochopt.verify.targeting import mutate, simpler_recipes

SPEC = "tests/verify/corpus/specs/masked_softmax_wide.py"
RIGHT = "tests/verify/corpus/wrong/masked_softmax_wide__dropped_filled_with_zero.leir"
EXAMPLES = 30


@pytest.fixture(scope="module")
def masked(spec_and_baseline, repo):
    spec, baseline = spec_and_baseline(SPEC)
    wrong = parse((repo / RIGHT).read_text())
    return spec, baseline, wrong


def _facts(verdict) -> dict:
    facts = verdict.to_json()
    facts.pop("elapsed_s")
    if verdict.counterexample is not None:
        facts["recipes"] = verdict.counterexample.recipes
    return facts


def test_a_warm_context_gives_the_verdicts_a_fresh_one_gives(masked):
    spec, baseline, wrong = masked
    fresh = [_facts(check(k, spec, examples=EXAMPLES, seed=3, baseline=baseline))
             for k in (baseline, wrong)]
    context = CheckContext(spec, baseline)
    for _ in range(2):  # the second time around, everything comes from the context
        warm = [_facts(check(k, spec, examples=EXAMPLES, seed=3, baseline=baseline,
                             context=context)) for k in (wrong, baseline)]
        assert warm[::-1] == fresh
    assert fresh[0]["equivalent"] and not fresh[1]["equivalent"]


def test_a_warm_context_computes_no_reference_twice(masked):
    spec, baseline, _ = masked
    context = CheckContext(spec, baseline)
    first = check(baseline, spec, examples=EXAMPLES, seed=1, baseline=baseline,
                  context=context)
    computed = context.misses
    assert computed == first.examples  # every input once
    check(baseline, spec, examples=EXAMPLES, seed=1, baseline=baseline, context=context)
    assert context.misses == computed and context.hits >= first.examples


def test_a_context_serves_only_its_spec_and_baseline(masked, spec_and_baseline):
    spec, baseline, _ = masked
    other_spec, other_baseline = spec_and_baseline("specs/softmax.py")
    context = CheckContext(spec, baseline)
    with pytest.raises(Exception, match="this check context was made for spec"):
        check(other_baseline, other_spec, examples=3, baseline=other_baseline,
              context=context)


def test_the_disk_bank_is_read_by_another_context(masked, tmp_path):
    spec, baseline, _ = masked
    # enough examples that some are drawn after the structured, hunting and family cases
    examples = 2 * EXAMPLES
    first = CheckContext(spec, baseline, directory=tmp_path)
    verdict = check(baseline, spec, examples=examples, seed=2, baseline=baseline,
                    context=first)
    second = CheckContext(spec, baseline, directory=tmp_path)
    again = check(baseline, spec, examples=examples, seed=2, baseline=baseline,
                  context=second)
    assert _facts(again) == _facts(verdict)
    # every input built from recipes was read back; the local search's steps (keyed by
    # their bytes) are not kept on disk
    assert second.hits >= verdict.examples - examples // 10
    assert second.misses == sum(1 for key in second.entries if key[0] == "arrays")
    assert list(tmp_path.rglob("*.json")) and list(tmp_path.rglob("*.npz"))


def test_the_disk_bank_does_not_depend_on_where_the_spec_file_lies(masked, tmp_path):
    """A run's check workers read the spec where the user keeps it, `stochopt verify` the
    run directory's copy: the baselines differ in their '# spec:' line alone."""
    import dataclasses

    spec, baseline, _ = masked
    check(baseline, spec, examples=5, baseline=baseline,
          context=CheckContext(spec, baseline, directory=tmp_path))
    elsewhere = parse(render(dataclasses.replace(baseline, spec_path="run/spec.py")))
    assert render(elsewhere) != render(baseline)
    context = CheckContext(spec, elsewhere, directory=tmp_path)
    assert check(baseline, spec, examples=5, baseline=elsewhere, context=context).equivalent
    assert context.misses == 0 and context.hits == 5


def test_a_torn_disk_entry_is_computed_again(masked, tmp_path):
    spec, baseline, _ = masked
    check(baseline, spec, examples=5, baseline=baseline,
          context=CheckContext(spec, baseline, directory=tmp_path))
    for path in tmp_path.rglob("*.npz"):
        path.write_bytes(b"not an npz")
    context = CheckContext(spec, baseline, directory=tmp_path)
    assert check(baseline, spec, examples=5, baseline=baseline, context=context).equivalent
    assert context.misses == 5


def test_the_entry_budget_holds(masked):
    spec, baseline, _ = masked
    context = CheckContext(spec, baseline, entry_bytes=200_000)
    check(baseline, spec, examples=EXAMPLES, seed=4, baseline=baseline, context=context)
    assert 0 < len(context.entries) < EXAMPLES
    assert context.entry_bytes <= 200_000 or len(context.entries) == 1
    assert context.entry_bytes == sum(e.nbytes for e in context.entries.values())


def test_the_memory_budget_is_set_by_one_variable_or_refused_in_one_line(monkeypatch):
    monkeypatch.setenv("STOCHOPT_CHECK_MEMORY", "3000")
    assert memory_budgets() == (2000, 1000)
    monkeypatch.setenv("STOCHOPT_CHECK_MEMORY", "1GB")
    with pytest.raises(StochoptError, match="STOCHOPT_CHECK_MEMORY must be a number of bytes"):
        memory_budgets()


def test_drawn_recipes_depend_on_the_seed_and_count_alone(masked):
    spec, _, _ = masked
    first = drawn_recipes(spec, 20, 9)
    assert first == drawn_recipes(spec, 20, 9)
    assert first != drawn_recipes(spec, 20, 10)
    assert len({tuple(d.items()) for d in first}) == len(first)  # no input twice
    assert 15 <= len(first) <= 20


# -- inputs shared across kernels that cut differently ---------------------------------

def _cuts(spec, rows: tuple[int, ...], columns: tuple[int, ...]) -> dict:
    return {n: (rows, columns) for n in spec.inputs}


def test_cut_free_patterns_read_no_cuts(masked):
    # the whitelist the keys rest on: a pattern in CUT_FREE builds the same tensor
    # whatever the cuts
    spec, _, _ = masked
    plain, cut = _cuts(spec, (0, 31), (0, 255)), _cuts(spec, (0, 15, 16, 31), (0, 99, 100, 255))
    for x, mask in zip(FLOAT_PATTERNS, BOOL_PATTERNS * 2, strict=False):
        recipes = {"x": Recipe(x, 5, 0.25, "mask_top"), "mask": Recipe(mask, 6)}
        assert {x, mask} <= CUT_FREE
        a, b = build_inputs(spec, recipes, plain), build_inputs(spec, recipes, cut)
        assert all(np.array_equal(a[n], b[n]) for n in a), (x, mask)


def test_row_patterns_read_only_the_last_axis_cuts(masked):
    spec, _, _ = masked
    cuts = _cuts(spec, (0, 15, 16, 31), (0, 99, 100, 255))
    for pattern in HUNT_PATTERNS:
        recipes = {"x": Recipe(pattern, 8), "mask": Recipe("random", 9)}
        used = cuts_read(spec, recipes, cuts)
        built, with_used = build_inputs(spec, recipes, cuts), build_inputs(spec, recipes, used)
        if pattern in ROW_CUTS_ONLY:
            assert used["x"] == ((0, 31), (0, 99, 100, 255))
            assert np.array_equal(built["x"], with_used["x"]), pattern
        else:
            assert used["x"] == cuts["x"]


def test_kernels_that_tile_rows_share_every_input_but_edge_extremes(masked):
    spec, baseline, _ = masked
    context = CheckContext(spec, baseline)
    uncut = _cuts(spec, (0, 31), (0, 255))
    tiled = _cuts(spec, (0, 15, 16, 31), (0, 255))
    for pattern, shared in (("uniform", True), ("two_clusters", True),
                            ("mixed_rows", True), ("edge_extreme", False)):
        recipes = {"x": Recipe(pattern, 1), "mask": Recipe("random", 2)}
        a = context.recipe_inputs(recipes, uncut)
        b = context.recipe_inputs(recipes, tiled)
        assert (a.entry is b.entry) == shared, pattern


def test_a_local_search_step_is_keyed_by_where_its_tensors_came_from(masked):
    spec, baseline, _ = masked
    context = CheckContext(spec, baseline)
    built = context.recipe_inputs({"x": Recipe("uniform", 1), "mask": Recipe("random", 2)},
                                  None)
    step = dict(built)
    step["x"] = np.asarray(step["x"]).copy()
    step["x"][0, 0] = 1.0
    key = context.given_inputs(step).key
    assert key[0] == "arrays" and key[1][1] == ("mask", (built.key, "mask"))
    again = dict(step)
    again["x"] = step["x"].copy()  # the same bytes: the same input
    assert context.given_inputs(again).key == key


# -- targeted draws and shrinking ------------------------------------------------------

def test_a_targeted_step_changes_one_field_of_one_input(masked):
    spec, _, _ = masked
    rng = np.random.default_rng(0)
    start = {"x": Recipe("uniform", 1), "mask": Recipe("random", 2)}
    for _ in range(50):
        trial = mutate(spec, start, rng)
        changed = [n for n in start if trial[n] != start[n]]
        assert len(changed) <= 1
        for n in changed:
            a, b = start[n], trial[n]
            assert sum(getattr(a, f) != getattr(b, f)
                       for f in ("pattern", "seed", "fraction", "link")) == 1


def test_simpler_recipes_come_simplest_first(masked):
    spec, _, _ = masked
    r = Recipe("outlier", 77, FRACTIONS[2], "equal")
    simpler = simpler_recipes(spec, "x", r)
    assert simpler[0] == Recipe("uniform", 0)
    assert Recipe("outlier", 0, FRACTIONS[2], "equal") in simpler
    assert Recipe("outlier", 77, FRACTIONS[0], "equal") in simpler
    assert Recipe("outlier", 77, FRACTIONS[2], "") in simpler
    assert r not in simpler and len(set(simpler)) == len(simpler)


def test_dear_values_are_kept_and_cheap_ones_recomputed(spec_and_baseline):
    _, baseline = spec_and_baseline("specs/attention_decode.py")
    by_op = {t.op: t for t in baseline.terms}
    big = np.zeros(1 << 16)
    assert dear_values(by_op["matmul"], big)
    assert not dear_values(by_op["exp"], big)
    assert dear_values(by_op["exp"], np.zeros(8))  # tiny: kept whatever it is


def test_recipe_keys_name_the_cuts_they_were_built_with():
    a = {"x": Recipe("two_clusters", 1)}
    assert recipe_key(a, {"x": ((0, 3),)}) != recipe_key(a, {"x": ((0, 1, 2, 3),)})
    assert recipe_key(a, {}) != recipe_key({"x": Recipe("two_clusters", 2)}, {})


def test_a_check_worker_warms_up_for_fewer_examples_than_the_fixed_cases(masked):
    """A run with few examples (fewer than its structured, hunting and family cases)
    prepares just those: no draws, and no error (the check worker died of one)."""
    spec, baseline, _ = masked
    context = CheckContext(spec, baseline)
    assert len(list(shared_inputs(context, 5, 0))) == 5
    verdict = check(baseline, spec, examples=5, baseline=baseline, context=context)
    assert verdict.equivalent and verdict.examples == 5
