"""Warnings about specs a search cannot learn anything from."""

from __future__ import annotations

import numpy as np
import pytest

from stochopt import spec, tensor
from stochopt.lower.catalog import bundled_spec_paths
from stochopt.spec import load_spec
from stochopt.verify import degenerate_warnings


@spec(inputs={"x": tensor("f32", (8, 16)), "unused": tensor("f32", (8, 16)),
              "scale": tensor("f32", (16,))})
def ignores_one(x, unused, scale):
    return x * scale


@spec(inputs={"x": tensor("f32", (8, 16))})
def constant(x):
    return np.zeros((8, 16)) + 3.0


@spec(inputs={"x": tensor("f32", (8, 16)), "mask": tensor("bool", (8, 16))})
def uses_all(x, mask):
    return np.where(mask, x, -x)


def test_a_spec_that_ignores_an_input_is_named():
    warnings = degenerate_warnings(ignores_one)
    assert len(warnings) == 1
    assert "'unused'" in warnings[0] and "ignore" in warnings[0]


def test_a_constant_spec_is_named():
    warnings = degenerate_warnings(constant)
    assert len(warnings) == 1 and "the same for different random inputs" in warnings[0]


def test_a_spec_that_uses_every_input_gets_no_warning():
    assert degenerate_warnings(uses_all) == []


@pytest.mark.parametrize("path", bundled_spec_paths(), ids=lambda p: p.stem)
def test_bundled_specs_are_not_degenerate(path):
    assert degenerate_warnings(load_spec(path)) == []
