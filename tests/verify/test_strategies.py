"""Input strategies: every value inside [low, high] and representable in its dtype; the
structured cases are all there; hypothesis draws recipes and shrinks them to the
simplest pattern that still fails."""

from __future__ import annotations

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from stochopt import spec, tensor
from stochopt.leir.types import native_dtype
from stochopt.lower.catalog import bundled_spec_paths
from stochopt.spec import load_spec
from stochopt.verify import check
from stochopt.verify.strategies import (
    build_inputs,
    input_recipes,
    nearby_inputs,
    random_spec_inputs,
    structured_recipes,
)


@spec(inputs={"x": tensor("f32", (16, 24), low=0.1, high=0.3),
              "y": tensor("bf16", (16, 24), low=-1.3, high=2.7),
              "n": tensor("i32", (16, 24), low=-5, high=5),
              "mask": tensor("bool", (16, 24)),
              "v": tensor("f32", (24,))})
def awkward(x, y, n, mask, v):
    """Bounds that no dtype represents exactly, every dtype, a 1-D input."""
    return np.where(mask, x * y + n, v)


@spec(inputs={"x": tensor("f32", (32, 64), low=-3.0, high=5.0),
              "mask": tensor("bool", (32, 64))})
def masked(x, mask):
    return np.where(mask, x, 0.0)


def _assert_inside_and_representable(s, inputs):
    assert set(inputs) == set(s.inputs)
    for name, x in inputs.items():
        t = s.inputs[name]
        assert x.shape == t.shape and x.dtype == native_dtype(t.dtype), name
        if t.dtype == "bool":
            continue
        values = x.astype(np.float64)
        lo, hi = t.bounds
        assert np.isfinite(values).all(), name
        assert values.min() >= lo and values.max() <= hi, (name, values.min(), values.max())
        # representable: the values survive a round trip through the dtype unchanged
        assert np.array_equal(values.astype(native_dtype(t.dtype)).astype(np.float64), values)


BUNDLED = [load_spec(p) for p in bundled_spec_paths()]


@pytest.mark.parametrize("s", BUNDLED + [awkward, masked], ids=lambda s: s.name)
def test_structured_inputs_are_inside_the_range_and_representable(s):
    for recipes in structured_recipes(s):
        _assert_inside_and_representable(s, build_inputs(s, recipes))


@pytest.mark.parametrize("s, full", [
    pytest.param(awkward, True, marks=pytest.mark.slow, id="awkward"),  # seconds
    pytest.param(masked, False, id="masked-quick"),
    pytest.param(masked, True, marks=pytest.mark.slow, id="masked-full")])
def test_drawn_inputs_are_inside_the_range_and_representable(s, full):
    @settings(max_examples=60 if full else 15, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(input_recipes(s))
    def drawn(recipes):
        _assert_inside_and_representable(s, build_inputs(s, recipes))

    drawn()


def test_bf16_inputs_are_bf16_values():
    x = build_inputs(awkward, structured_recipes(awkward)[0])["y"]
    assert x.dtype == ml_dtypes.bfloat16


def _rows(x):
    return x.reshape(x.shape[0], -1)


def test_every_structured_case_is_present():
    cases = [build_inputs(masked, r) for r in structured_recipes(masked)]
    xs, masks = [c["x"].astype(np.float64) for c in cases], [c["mask"] for c in cases]
    lo, hi = masked.inputs["x"].bounds

    def any_case(predicate, arrays):
        return any(predicate(a) for a in arrays)

    row_constant = lambda a: (np.ptp(_rows(a), axis=1) == 0)  # noqa: E731
    assert any_case(lambda a: row_constant(a).any() and not row_constant(a).all(), xs)
    assert any_case(lambda a: set(np.unique(a)) == {lo, hi}, xs)             # extremes
    assert any_case(lambda a: (a == 0).all(), xs)                             # zeros
    assert any_case(lambda a: ((a == lo) | (a == hi)).sum() == 1               # outlier
                    and np.abs(a[(a != lo) & (a != hi)]).max() <= 0.01 * (hi - lo), xs)
    assert any_case(lambda a: ((a != 0).sum(axis=1) == 1).all()                # one-hot
                    and set(np.unique(a)) == {0.0, hi}, xs)
    assert any_case(lambda a: 1 < np.unique(a).size <= 3, xs)                 # ties
    assert any_case(lambda a: np.unique(a).size == 1 and a.flat[0] != 0, xs)  # constant
    assert any_case(lambda a: set(np.unique(a)) <= set(range(-3, 4)) and np.unique(a).size > 1,
                    xs)                                                       # small ints
    assert any_case(lambda m: (~m).all(axis=1).any() and m.any(), masks)      # false rows
    assert any_case(lambda m: m.all(axis=1).any() and not m.all(), masks)     # true rows
    assert any_case(lambda m: m.all(), masks) and any_case(lambda m: not m.any(), masks)
    assert any_case(lambda m: (m.sum(axis=1) == 1).all(), masks)              # one true


def test_structured_inputs_of_one_shape_differ():
    # k and v, cos and sin: a kernel that swaps them must not pass every structured case
    rotary = next(s for s in BUNDLED if s.name == "rotary")
    for recipes in structured_recipes(rotary):
        x = build_inputs(rotary, recipes)
        if np.unique(x["cos"]).size > 1:
            assert not np.array_equal(x["cos"], x["sin"])


def test_random_inputs_are_reproducible_and_seeded():
    a, b = random_spec_inputs(masked, 3), random_spec_inputs(masked, 3)
    c = random_spec_inputs(masked, 4)
    assert all(np.array_equal(a[n], b[n]) for n in a)
    assert not np.array_equal(a["x"], c["x"])


def test_nearby_inputs_move_floats_a_little_and_stay_inside():
    x = build_inputs(awkward, structured_recipes(awkward)[0])
    near = nearby_inputs(awkward, x, seed=1)
    _assert_inside_and_representable(awkward, near)
    assert np.array_equal(near["n"], x["n"]) and np.array_equal(near["mask"], x["mask"])
    for name, bound in (("x", 2.0**-16), ("y", 2 * 2.0**-7)):
        a, b = x[name].astype(np.float64), near[name].astype(np.float64)
        assert not np.array_equal(a, b)
        ulp = 2.0**-23 if name == "x" else 2.0**-7
        # moved by the bound, plus the rounding back into the dtype
        assert (np.abs(b - a) <= (bound + ulp) * np.abs(a)).all()


@pytest.mark.slow  # full checks of corpus kernels
def test_a_failure_shrinks_to_the_simplest_recipe(read_corpus, repo):
    # every input but zeros shows the swapped halves: hypothesis shrinks to the first
    # pattern (uniform), seed 0 and the first fraction
    entry = read_corpus(repo / "tests/verify/corpus/wrong/rotary__concat_swapped.leir")
    verdict = check(entry.kernel, entry.spec, examples=20, structured=False,
                    baseline=entry.baseline)
    recipes = verdict.counterexample.recipes
    assert {r.pattern for r in recipes.values()} == {"uniform"}
    assert max(r.seed for r in recipes.values()) <= 1
    assert {r.fraction for r in recipes.values()} == {0.5}


@pytest.mark.slow  # full checks of corpus kernels
def test_the_same_seed_finds_the_same_counterexample(read_corpus, repo):
    entry = read_corpus(repo / "tests/verify/corpus/wrong/swiglu__sigmoid_sign.leir")
    first, second = (check(entry.kernel, entry.spec, examples=10, structured=False, seed=5,
                           baseline=entry.baseline) for _ in range(2))
    assert first.counterexample.recipes == second.counterexample.recipes
    assert first.counterexample.mismatch == second.counterexample.mismatch


DRAWS = """
import sys
sys.path.insert(0, sys.argv[1])
if sys.argv[2] == "yes":
    import many_literals  # noqa: F401
import stochopt.verify
from stochopt.lower import lower
from stochopt.spec import load_spec
bank = sys.modules["stochopt.verify.bank"]
drawn = []
build = bank.build_inputs
def record(spec, recipes, *cuts):
    drawn.append(recipes)
    return build(spec, recipes, *cuts)
bank.build_inputs = record
spec = load_spec("specs/softmax.py")
kernel = lower(spec)
stochopt.verify.check(kernel, spec, examples=200, seed=11, structured=False, baseline=kernel)
print(len(drawn), [r["x"] for r in drawn])
"""


@pytest.mark.slow
def test_the_same_seed_draws_the_same_inputs_whatever_was_imported(repo, tmp_path):
    # hypothesis mixes literals from every module loaded before its first draw into
    # integer draws; the inputs of a check must not depend on them, or a seed would not
    # reproduce a verdict from one process to another
    (tmp_path / "many_literals.py").write_text(
        "".join(f"C{i} = {7919 * i + 104729}\n" for i in range(400)))
    runs = [subprocess.run([sys.executable, "-c", DRAWS, str(tmp_path), imported],
                           cwd=repo, capture_output=True, text=True, check=True).stdout
            for imported in ("no", "yes")]
    assert int(runs[0].split()[0]) > 150 and runs[0] == runs[1]


def test_skipping_a_discarded_draw_leaves_the_generator_where_drawing_it_would():
    """build_tensor and family_tensor skip the uniform tensor a pattern never reads with
    bit_generator.advance: one 64-bit output per float64 drawn. Were that to change, the
    inputs of every pattern drawn after it would change with it."""
    drawn, skipped = np.random.default_rng(7), np.random.default_rng(7)
    drawn.uniform(-1.0, 1.0, (3, 5))
    skipped.bit_generator.advance(15)
    assert np.array_equal(drawn.uniform(-1.0, 1.0, 4), skipped.uniform(-1.0, 1.0, 4))
    assert np.array_equal(drawn.random(3), skipped.random(3))
