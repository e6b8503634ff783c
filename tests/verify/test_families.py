"""The input families (families.py): every family and link, for every input and pair,
inside the declared ranges and representable; masks with exactly k kept; scales down
to the smallest subnormal; queries equal, opposite and orthogonal to key rows."""

from __future__ import annotations

import numpy as np
import pytest

from stochopt import spec, tensor
from stochopt.spec import load_spec
from stochopt.verify.families import (
    BOOL_FAMILIES,
    FAMILY_LINKS,
    FLOAT_FAMILIES,
    SMALLEST,
    SPREADS,
    apply_link,
    family_tensor,
    link_pairs,
    parameters,
    product_scale,
)
from stochopt.verify.strategies import FAMILY_SHARE, Recipe, build_inputs, family_recipes
from tests.verify.test_strategies import _assert_inside_and_representable, awkward


@spec(inputs={"q": tensor("bf16", (4, 8, 16), low=-2.0, high=2.0),
              "k": tensor("bf16", (4, 32, 16), low=-1.0, high=1.0),
              "x": tensor("f32", (4, 8, 32), low=-3.0, high=3.0),
              "mask": tensor("bool", (4, 8, 32))})
def attention(q, k, x, mask):
    return np.where(mask, q @ np.swapaxes(k, 1, 2) + x, -1e30)


@pytest.mark.parametrize("s", [awkward, attention], ids=["awkward", "attention"])
def test_every_family_and_link_is_legal_for_every_input(s):
    cases = family_recipes(s, seed=0, count=1000)
    names = {(n, r.pattern) for case in cases for n, r in case.items()}
    for name, t in s.inputs.items():
        families = BOOL_FAMILIES if t.dtype == "bool" else FLOAT_FAMILIES
        assert {(name, f) for f in families} <= names  # every family on every input
    links = {r.link.partition(":")[0] for case in cases for r in case.values() if r.link}
    assert links == {link for link in FAMILY_LINKS if link_pairs(s, link)}
    for case in cases:
        _assert_inside_and_representable(s, build_inputs(s, case))


def test_a_short_budget_still_sees_every_family_once():
    cases = family_recipes(attention, seed=3, count=len(FLOAT_FAMILIES) + 2)
    patterns = {r.pattern for case in cases for r in case.values()}
    assert len(patterns - {"uniform", "random"}) >= len(FLOAT_FAMILIES) - 2
    assert FAMILY_SHARE * 200 >= 40  # room for them in a full check


def test_a_long_budget_sweeps_each_family_parameter_spread_out_first():
    one = spec_of_one_row_input()
    for seed in range(3):
        cases = family_recipes(one, seed=seed, count=1000)
        spreads = [c["x"].fraction for c in cases if c["x"].pattern == "spread"]
        assert sorted(spreads) == sorted(parameters("spread", one.inputs["x"]))
        # the first two values a short budget reaches lie half the sweep apart
        index = [SPREADS.index(v) for v in spreads[:2]]
        assert abs(index[0] - index[1]) == len(SPREADS) // 2
    masks = family_recipes(attention, seed=0, count=1000)
    dropped = {c["mask"].fraction for c in masks if c["mask"].pattern == "dropped_per_row"}
    assert dropped == set(parameters("dropped_per_row", attention.inputs["mask"]))


def spec_of_one_row_input():
    @spec(inputs={"x": tensor("f32", (4, 64), low=-5.0, high=5.0)})
    def rows(x):
        return x - x.max(axis=-1, keepdims=True)
    return rows


@pytest.mark.parametrize("k", [1, 2, 3, 31, 32])
def test_masks_keep_exactly_k_per_row_or_column(k):
    t = attention.inputs["mask"]
    rng = np.random.default_rng(k)
    rows = family_tensor(t, "kept_per_row", float(k), rng)
    assert (rows.sum(axis=-1) == k).all()
    columns = family_tensor(t, "kept_per_column", float(min(k, 8)), rng)
    assert (columns.sum(axis=-2) == min(k, 8)).all()
    dropped = family_tensor(t, "dropped_per_row", float(k), rng)
    assert (dropped.sum(axis=-1) == 32 - k).all()


def test_scales_reach_the_smallest_subnormal_of_each_dtype():
    for name in ("q", "x"):
        t = attention.inputs[name]
        scales = parameters("scaled", t)
        deepest = build_inputs(attention, {name: Recipe("scaled", 1, scales[-1])})[name]
        values = np.abs(deepest.astype(np.float64))
        tiny = SMALLEST[t.dtype]
        assert values[values > 0].min() <= 8 * tiny < np.finfo(np.float32).tiny
    mixed = build_inputs(attention, {"x": Recipe("mixed_scales", 5)})["x"].astype(np.float64)
    assert (mixed == 0).any() and (np.signbit(mixed) & (mixed == 0)).any()  # 0 and -0.0
    exponents = np.log10(np.abs(mixed[mixed != 0]))
    assert exponents.min() < -40 and exponents.max() > 0


def test_queries_are_equal_opposite_or_orthogonal_to_key_rows():
    base = build_inputs(attention, {n: Recipe("random" if t.dtype == "bool" else "uniform", i)
                                    for i, (n, t) in enumerate(attention.inputs.items())})
    rng = np.random.default_rng(0)
    wide = {n: np.asarray(x, np.float64) for n, x in base.items()}
    pairs = link_pairs(attention, "query_equal")
    assert ("k", "q") in pairs
    for link, sign in (("query_equal", 1.0), ("query_opposite", -1.0), ("query_orthogonal", 0)):
        out = apply_link(attention, wide, f"{link}:{pairs.index(('k', 'q'))}", rng)
        q, k = out["q"], wide["k"]
        cos = (q @ np.swapaxes(k, 1, 2)) / np.outer(np.linalg.norm(q, axis=-1),
                                                    np.linalg.norm(k, axis=-1)).reshape(
            4, 8, 4, 32).diagonal(axis1=0, axis2=2).transpose(2, 0, 1)
        best = cos.max(axis=-1) if sign >= 0 else cos.min(axis=-1)
        if sign:
            assert np.allclose(best, sign)  # each q row is (minus) some k row, scaled
        else:
            assert np.allclose(np.abs(cos).min(axis=-1), 0, atol=1e-9)
        assert np.abs(q).max() <= 2.0


def test_a_mask_from_its_values_order_keeps_the_top_k():
    x = np.arange(4 * 8 * 32, dtype=np.float64).reshape(4, 8, 32)
    out = apply_link(attention, {"q": None, "k": None, "x": x, "mask": None}, "mask_top_k:0",
                     np.random.default_rng(2))
    kept = out["mask"].sum(axis=-1)
    assert (kept == kept.flat[0]).all() and out["mask"][..., -1].all()


def test_the_bundled_specs_build_their_family_cases():
    mla = load_spec("specs/mla_decode.py")
    cases = family_recipes(mla, seed=1, count=int(FAMILY_SHARE * 200))
    every = family_recipes(mla, seed=1, count=1000)
    assert len(cases) == min(len(every), int(FAMILY_SHARE * 200)) and len(every) > 40
    assert {r.link.partition(":")[0] for c in cases for r in c.values() if r.link} >= {
        "query_equal", "query_opposite", "query_orthogonal"}


def test_every_seed_puts_products_of_inputs_on_the_subnormal_grid_in_a_full_check():
    """Every float input at the scale where their products are a few spacings of f32's
    subnormal grid, on every seed within a full check's family cases: a scale moved
    before a product (q * 0.25 before q @ k^T) rounds there, exact as the scale is."""
    s = load_spec("specs/attention_scores.py")
    scale = product_scale([s.inputs["q"], s.inputs["k"]])
    for seed in range(5):
        cases = family_recipes(s, seed=seed, count=int(FAMILY_SHARE * 200))
        tiny = [c for c in cases if c["q"].pattern == c["k"].pattern == "scaled"
                and c["q"].fraction == c["k"].fraction == scale]
        assert len(tiny) == 1
        x = build_inputs(s, tiny[0])
        products = np.abs(np.asarray(x["q"], np.float64)[:, :, None, :]
                          * np.asarray(x["k"], np.float64)[:, None, :, :])
        typical = float(np.median(products[products > 0]))
        smallest_normal = float(np.finfo(np.float32).tiny)
        spacing = float(np.finfo(np.float32).smallest_subnormal)
        assert 2 * spacing < typical < smallest_normal / 2**16


@pytest.mark.parametrize("suffix", [0.0, 1.0])
def test_prefix_masks_keep_a_prefix_of_its_own_length_per_row(suffix):
    shape = (6, 40, 64)
    t = tensor("bool", shape)
    m = family_tensor(t, "prefix_per_row", suffix, np.random.default_rng(3))
    rows = m.reshape(-1, shape[-1])
    if suffix:
        rows = rows[:, ::-1]
    lengths = rows.sum(axis=1)
    assert lengths.min() >= 1 and lengths.max() <= shape[-1] and len(set(lengths)) > 20
    assert (rows == (np.arange(shape[-1])[None, :] < lengths[:, None])).all()


def test_the_rotation_link_makes_a_rotary_table_of_two_inputs():
    @spec(inputs={"x": tensor("f32", (16, 8), low=-4.0, high=4.0),
                  "c": tensor("f32", (16, 4), low=-1.0, high=1.0),
                  "s": tensor("f32", (16, 4), low=-1.0, high=1.0),
                  "w": tensor("f32", (16, 4), low=0.0, high=1.0)})
    def rot(x, c, s, w):
        return x

    assert link_pairs(rot, "rotation") == [("c", "s"), ("s", "c")]  # w cannot hold -1
    out = build_inputs(rot, {"x": Recipe("uniform", 1), "c": Recipe("uniform", 2,
                                                                     link="rotation:0"),
                             "s": Recipe("uniform", 3), "w": Recipe("uniform", 4)})
    c, s = out["c"].astype(np.float64), out["s"].astype(np.float64)
    assert np.abs(c * c + s * s - 1).max() < 1e-6
    assert (c[0] == 1).all() and (s[0] == 0).all()  # position 0: the identity
    assert len(np.unique(np.round(c, 4))) > 20
