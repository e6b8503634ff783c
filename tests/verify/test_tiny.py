"""Precision at tiny scales (tiny.py, compare.py): no tolerance finer than the output
grid's spacing, and the inputs' own resolution where they hold subnormals, so a
rounding order is not refused at subnormal scale; a flush to zero or a lost term is."""

from __future__ import annotations

import numpy as np

from stochopt import spec, tensor
from stochopt.leir import parse
from stochopt.verify import check
from stochopt.verify.compare import GRID_SPACINGS, SPACING, floor_ratio, tolerance
from stochopt.verify.reference import reference_output
from stochopt.verify.strategies import Recipe, build_inputs
from stochopt.verify.tiny import input_resolution, subnormal_inputs


@spec(inputs={"x": tensor("f32", (8, 64), low=-4.0, high=4.0),
              "w": tensor("f32", (64,), low=0.5, high=1.5)})
def small_rmsnorm(x, w):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w


@spec(inputs={"x": tensor("f32", (4096,)), "y": tensor("f32", (4096,))})
def small_add(x, y):
    return x + y


# rmsnorm__folded_scale's form: (x * w) first, then the folded scale sqrt(n) rsqrt(...)
FOLDED = ('def kernel(x: "f32[8,64] @ dram", w: "f32[64] @ dram") -> "f32[8,64] @ dram":\n'
          '    xs = load(x, "(8,64)/((8_L2B),(64))")\n'
          '    ws = load(w, "(64)/((64)); B@[L2B]")\n'
          "    r = 8.0 * rsqrt(reduce_sum(xs * xs, axis=1, keepdims=True) + 6.4e-05)\n"
          "    return store(xs * ws * r)\n")
ADD = ('def kernel(x: "f32[4096] @ dram", y: "f32[4096] @ dram") -> "f32[4096] @ dram":\n'
       '    a = load(x, "(4096)/((8_L2B,8_L1B,16_MAB,4_PE))")\n'
       '    b = load(y, "(4096)/((8_L2B,8_L1B,16_MAB,4_PE))")\n')


def test_no_tolerance_is_finer_than_the_grid():
    ref = np.array([0.0, 1e-44, 1.0])
    tol = tolerance(ref, "f32", None, None, magnitude=np.abs(ref))
    assert tol[0] == tol[1] == GRID_SPACINGS * SPACING["f32"] and tol[2] > 1e-5
    assert tolerance(ref, "f32", 1e-6, 0.0)[0] == GRID_SPACINGS * SPACING["f32"]
    assert (tolerance(ref, "i32", None, None) == 0).all()  # whole numbers stay exact
    # the rounding floor is at least FLOOR_ULPS spacings where results are subnormal
    assert floor_ratio(ref, "f32", tol, np.abs(ref))[0] >= 16


def _deep(s, name: str, scale: float) -> dict:
    recipes = {n: Recipe("random" if t.dtype == "bool" else "uniform", 7 + i)
               for i, (n, t) in enumerate(s.inputs.items())}
    recipes[name] = Recipe("scaled", 11, scale)
    return build_inputs(s, recipes)


def test_the_inputs_resolution_is_measured_only_where_they_are_subnormal():
    normal = _deep(small_rmsnorm, "x", 1e-30)
    assert not subnormal_inputs(small_rmsnorm, normal)
    tiny = _deep(small_rmsnorm, "x", 1e-45)
    assert subnormal_inputs(small_rmsnorm, tiny)
    ref = reference_output(small_rmsnorm, tiny)
    floor = input_resolution(small_rmsnorm, tiny, ref, reference_output)
    # a row of x of a few spacings: one spacing moves the result by tens of percent
    ref = np.abs(ref)
    assert (floor[ref > 0] > 0.1 * ref[ref > 0]).mean() > 0.5


def test_a_reordered_product_at_subnormal_scale_is_accepted():
    tiny = _deep(small_rmsnorm, "x", 1e-45)
    verdict = check(parse(FOLDED), small_rmsnorm, extra_inputs=[tiny], structured=False,
                    examples=1)
    assert verdict.equivalent, verdict.counterexample.describe()


def test_a_flush_to_zero_or_a_lost_term_is_refused():
    flush = parse(ADD + "    return store(where(abs(a + b) < 1.2e-38, 0.0, a + b))\n")
    lost = parse(ADD + "    return store(where(abs(b) < 1e-30, a, a + b))\n")
    both = {"x": Recipe("scaled", 3, 1e-40), "y": Recipe("scaled", 4, 1e-41)}
    tiny = build_inputs(small_add, both)
    for kernel in (flush, lost):
        verdict = check(kernel, small_add, extra_inputs=[tiny], structured=False,
                        examples=1)
        assert not verdict.equivalent
        assert verdict.counterexample.mismatch.check == "precision"


def test_a_scale_moved_before_a_product_is_refused_where_products_are_subnormal():
    """q * 0.25 before q @ k^T is exact as long as the products are normal numbers; where
    they fall on the subnormal grid (inputs normal, products not: no input resolution
    excuses it), scaled first they round at a quarter of their size, four times the
    baseline's error. Every full check tries that input (families.product_scale)."""
    from pathlib import Path

    from stochopt.spec import load_spec
    from stochopt.verify.families import product_scale

    root = Path(__file__).resolve().parents[2]
    s = load_spec(root / "specs" / "attention_scores.py")
    kernel = parse((root / "tests" / "verify" / "corpus" / "borderline" /
                    "attention_scores__prescaled_q.leir").read_text())
    scale = product_scale([s.inputs["q"], s.inputs["k"]])
    x = build_inputs(s, {"q": Recipe("scaled", 5910, scale), "k": Recipe("scaled", 5911, scale),
                         "mask": Recipe("random", 4200)})
    assert not subnormal_inputs(s, x)
    verdict = check(kernel, s, extra_inputs=[x], structured=False, examples=1)
    assert not verdict.equivalent
    assert verdict.counterexample.mismatch.check == "precision"
