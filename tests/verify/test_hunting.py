"""Inputs that hunt (stochopt/verify/hunting.py): per-row patterns inside the ranges,
extremes at the kernel's own cuts, correlated inputs; the memory budget and the fit
that `verify` shares with `run`."""

from __future__ import annotations

import numpy as np
import pytest

from stochopt.backend.emulate import check_emulation_memory
from stochopt.errors import StochoptError
from stochopt.leir import parse
from stochopt.spec import spec, tensor
from stochopt.verify import check
from stochopt.verify.hunting import HUNT_PATTERNS, hunt_row, kernel_boundaries, link_inputs
from stochopt.verify.strategies import Recipe, build_inputs, hunting_recipes

WIDE = "tests/verify/corpus/specs/logsumexp_wide.py"
SKIPS_LAST = "tests/verify/corpus/wrong/logsumexp_wide__max_skips_last_column.leir"


def test_the_kernels_own_cuts_are_found_through_loads(spec_and_baseline, repo):
    spec_, _ = spec_and_baseline(WIDE)
    kernel = parse((repo / SKIPS_LAST).read_text())
    cuts = kernel_boundaries(kernel, spec_)["x"]
    assert {0, 510, 511}.issubset(cuts[1]) and cuts[0] == (0, 63)


@pytest.mark.parametrize("pattern", HUNT_PATTERNS)
def test_hunting_inputs_stay_inside_the_range(pattern, spec_and_baseline):
    spec_, _ = spec_and_baseline(WIDE)
    x = build_inputs(spec_, {"x": Recipe(pattern, 7)})["x"]
    assert x.dtype == np.float32 and x.min() >= -100 and x.max() <= 100


def test_two_clusters_sit_at_both_ends_and_near_overflow_reaches_exps_edge():
    rng = np.random.default_rng(0)
    row = hunt_row("two_clusters", rng, 512, -100.0, 100.0, (0, 255, 256, 511))
    assert row.min() < -98 and row.max() > 98
    row = hunt_row("near_overflow", rng, 512, -100.0, 100.0, (0, 511))
    assert ((row >= 80) & (row <= 88.72)).any()


def test_an_extreme_at_a_cut_finds_a_max_that_skips_the_last_column(spec_and_baseline, repo):
    spec_, baseline = spec_and_baseline(WIDE)
    kernel = parse((repo / SKIPS_LAST).read_text())
    verdict = check(kernel, spec_, examples=40, baseline=baseline)
    assert not verdict.equivalent and verdict.range_refusal
    assert verdict.counterexample.mismatch.check == "non-finite"


@spec(inputs={"q": tensor("f32", (2, 4, 8), low=-2.0, high=2.0),
              "k": tensor("f32", (2, 16, 8), low=-2.0, high=2.0),
              "mask": tensor("bool", (2, 4, 16))})
def _attention(q, k, mask):
    return q


def test_aligned_inputs_make_one_score_dominate_and_masks_keep_it_or_drop_it():
    rng = np.random.default_rng(3)
    plain = build_inputs(_attention, {n: Recipe("uniform" if n != "mask" else "random", 1)
                                      for n in _attention.inputs})
    linked = link_inputs(_attention, plain, "mask_top", rng)
    scores = np.einsum("hid,hjd->hij", linked["q"], linked["k"])
    assert (linked["mask"].sum(axis=-1) == 1).all()
    assert (np.argmax(scores, axis=-1) == np.argmax(linked["mask"], axis=-1)).all()
    dropped = link_inputs(_attention, plain, "mask_bottom", np.random.default_rng(3))
    assert (dropped["mask"].sum(axis=-1) == 15).all()
    assert {r["q"].link for r in hunting_recipes(_attention)} >= {"aligned", "mask_top"}


def test_emulation_refuses_past_its_memory_budget_before_allocating():
    big = parse('def kernel(x: "f32[4096,512] @ dram") -> "f32[4096,512] @ dram":\n'
                '    return store(exp(load(x, "(4096,512)/((8_L2B,8_L1B,16_MAB,4_PE),'
                '(512))")))\n')
    with pytest.raises(StochoptError, match="emulation memory budget"):
        check_emulation_memory(big, budget=16 << 20)  # four 16 MiB float64 values
    assert check_emulation_memory(big, budget=1 << 30) > 16 << 20
