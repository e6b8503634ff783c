"""Every rewrite rule on generated kernels: the same values, or a clear refusal."""

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from stochopt.backend.emulate import emulate, random_inputs
from stochopt.errors import ConstraintError
from stochopt.leir import parse
from stochopt.machine import SMALL
from stochopt.transform.rewrite import RULES
from tests.strategies import assert_same_exact_values, kernels

WHOLE_KERNEL_RULES = ("tile_reduction", "propagate_layout", "swap_matmul_orientation",
                      "cancel_transposes", "split_k_to_batch", "reduce_by_relayout",
                      "split_matmul_operand_hi_lo", "list_schedule", "scale_before_matmul",
                      "load_slices_together")


@pytest.mark.slow  # the full count; the fast tier runs the same property on 15 below
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kernel=kernels(max_ops=10), data=st.data())
def test_a_rule_keeps_exact_values_or_refuses_with_a_constraint_error(kernel, data):
    _rule_keeps_exact_values_or_refuses(kernel, data)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kernel=kernels(max_ops=10), data=st.data())
def test_a_rule_keeps_exact_values_or_refuses_quick(kernel, data):
    _rule_keeps_exact_values_or_refuses(kernel, data)


def _rule_keeps_exact_values_or_refuses(kernel, data) -> None:
    applicable = [r for r in RULES if r.name in WHOLE_KERNEL_RULES and r.find(kernel)]
    assume(applicable)
    rule = data.draw(st.sampled_from(applicable))
    site = data.draw(st.sampled_from(rule.find(kernel)))
    try:
        out = rule.apply(kernel, site, SMALL, random.Random(0))
    except ConstraintError:
        return
    if out is None:
        return
    # exact mode has no rounding: a rule may only reorder a sum; bf16 casts are exact
    # there too, so the lossy rules must also hold
    assert_same_exact_values(kernel, out, SMALL, 1e-9)


def test_scaling_a_matmul_operand_leaves_the_matmuls_other_readers_unscaled():
    kernel = parse('''def k(a: "bf16[16,64] @ dram",
      b: "bf16[64,16] @ dram") -> "f32[16,16] @ dram":
    t = matmul(load(a, "(16,64)/((16),(64))"), load(b, "(64,16)/((64),(16))"))
    return store(t * 2.0 + t)
''', "small")
    rule = next(r for r in RULES if r.name == "scale_before_matmul")
    out = rule.apply(kernel, rule.find(kernel)[0], SMALL)
    inputs = random_inputs(kernel, seed=1)
    np.testing.assert_allclose(emulate(out, inputs, exact=True),
                               emulate(kernel, inputs, exact=True), rtol=1e-12)
