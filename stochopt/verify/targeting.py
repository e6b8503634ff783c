"""Drawn and targeted inputs: the draws every kernel of a run shares, a short hill climb
over recipes that follows this kernel's errors, and the shrinking of a failure.

The draws are hypothesis's generation phase for the check's seed (bank.drawn_recipes):
with no feedback they are the same for every kernel, so a run's checks build them, and
compute their references and the baseline's outputs, once. What follows the kernel
comes after them: from the recipe-made input whose error came closest to its limit,
each targeted step changes one field of one input's recipe (a new seed, pattern,
fraction or link) and keeps the change when the error over its limit grows, as
hypothesis's target phase mutates the choices of its best example. A failing draw or
targeted input is then shrunk: one input at a time, its recipe is replaced by a simpler
one (an earlier pattern, seed 0, the first fraction, no link: the order hypothesis
shrinks in) while the kernel still fails, so the counterexample is the simplest recipe
found.
"""

from __future__ import annotations

import numpy as np

from stochopt.spec import Spec
from stochopt.verify.bank import BankInputs, CheckContext, cuts_read, recipe_key
from stochopt.verify.hunting import HUNT_PATTERNS
from stochopt.verify.strategies import (
    BOOL_PATTERNS,
    DRAWN_LINKS,
    FLOAT_PATTERNS,
    FRACTIONS,
    Recipe,
)

# inputs of a full check spent on targeted draws: a share of the examples, at most
# TARGET_STEPS (the local search over arrays, climb.py, takes as many after them)
TARGET_SHARE, TARGET_STEPS = 0.1, 20
SHRINK_TRIES = 40  # inputs a failure's shrinking may run
FIELDS = ("seed", "seed", "pattern", "fraction", "link")  # what a targeted step changes


def draw_and_target(comparison, context: CheckContext, draws: int, steps: int, seed: int,
                    cuts, pool: int) -> tuple | None:
    """Run ``draws`` of the run's drawn recipes for ``seed`` (taken in order from the
    ``pool`` the run draws, skipping any that made an input already run, such as a
    structured or family case), then ``steps`` targeted ones; (mismatch, inputs,
    recipes, found_by) for the first failure, shrunk, or None. ``comparison`` is check's
    _Comparison."""
    spec = context.spec
    ran = 0
    for recipes in context.drawn(seed, pool) if draws > 0 else []:
        if ran >= draws:
            break
        inputs = context.recipe_inputs(recipes, cuts)
        if comparison.has_run(inputs.key):
            continue
        ran += 1
        bad = comparison.run(inputs)
        if bad is not None:
            return (*shrink(comparison, context, recipes, inputs, bad, cuts), "draw")
    if comparison.best_recipes is None or steps <= 0:
        return None
    rng = np.random.default_rng(seed + 11)
    score, current = comparison.best_recipes  # the passing recipes closest to failing
    for _ in range(steps):
        trial = _unseen_mutation(spec, current, rng, comparison, cuts)
        if trial is None:
            return None
        inputs = context.recipe_inputs(trial, cuts, shared=False)
        bad = comparison.run(inputs)
        if bad is not None:
            return (*shrink(comparison, context, trial, inputs, bad, cuts), "targeted draw")
        if comparison.last_score > score:
            current, score = trial, comparison.last_score
    return None


def _unseen_mutation(spec: Spec, recipes: dict[str, Recipe], rng, comparison,
                     cuts) -> dict[str, Recipe] | None:
    for _ in range(8):  # a mutation that lands on an input already run is drawn again
        trial = mutate(spec, recipes, rng)
        if not comparison.has_run(recipe_key(trial, cuts_read(spec, trial, cuts))):
            return trial
    return None


def mutate(spec: Spec, recipes: dict[str, Recipe], rng) -> dict[str, Recipe]:
    """The recipes with one field of one input changed (FIELDS)."""
    names = list(recipes)
    name = names[rng.integers(len(names))]
    r = recipes[name]
    field = FIELDS[rng.integers(len(FIELDS))]
    if field == "seed":
        r = Recipe(r.pattern, int(rng.integers(2**32)), r.fraction, r.link)
    elif field == "pattern":
        patterns = _patterns(spec, name)
        r = Recipe(patterns[rng.integers(len(patterns))], r.seed, r.fraction, r.link)
    elif field == "fraction":
        r = Recipe(r.pattern, r.seed, FRACTIONS[rng.integers(len(FRACTIONS))], r.link)
    else:
        r = Recipe(r.pattern, r.seed, r.fraction, DRAWN_LINKS[rng.integers(len(DRAWN_LINKS))])
    return {**recipes, name: r}


def _patterns(spec: Spec, name: str) -> tuple[str, ...]:
    return BOOL_PATTERNS if spec.inputs[name].dtype == "bool" else \
        FLOAT_PATTERNS + HUNT_PATTERNS


def shrink(comparison, context: CheckContext, recipes: dict[str, Recipe],
           inputs: BankInputs, bad, cuts, tries: int = SHRINK_TRIES) -> tuple:
    """(mismatch, inputs, recipes) of the simplest failing recipes found from these:
    each input's recipe replaced by a simpler one while the kernel still fails."""
    improved = True
    while improved and tries > 0:
        improved = False
        for name in recipes:
            for simpler in simpler_recipes(context.spec, name, recipes[name]):
                if tries <= 0:
                    break
                trial = {**recipes, name: simpler}
                if comparison.has_run(recipe_key(trial, cuts_read(context.spec, trial, cuts))):
                    continue  # a passing input, or a failure already shrunk past
                tries -= 1
                trial_inputs = context.recipe_inputs(trial, cuts, shared=False)
                found = comparison.run(trial_inputs)
                if found is not None:
                    recipes, inputs, bad, improved = trial, trial_inputs, found, True
                    break
    return bad, inputs, recipes


def simpler_recipes(spec: Spec, name: str, r: Recipe) -> list[Recipe]:
    """Recipes simpler than r, simplest first: the simplest of all (the first pattern,
    seed 0, the first fraction, no link), then r with an earlier pattern, seed 0, the
    first fraction, or no link."""
    patterns = _patterns(spec, name)
    out = [Recipe(patterns[0], 0, FRACTIONS[0], "")]
    index = patterns.index(r.pattern) if r.pattern in patterns else len(patterns)
    out += [Recipe(p, r.seed, r.fraction, r.link) for p in patterns[:index]]
    if r.seed != 0:
        out.append(Recipe(r.pattern, 0, r.fraction, r.link))
    if r.fraction != FRACTIONS[0]:
        out.append(Recipe(r.pattern, r.seed, FRACTIONS[0], r.link))
    if r.link:
        out.append(Recipe(r.pattern, r.seed, r.fraction, ""))
    return [s for i, s in enumerate(out) if s != r and s not in out[:i]]
