"""A kernel may add the terms of a sum in any order: emulate(order=...) adds them in a
shuffled one, and the baseline's error near an input counts those orders
(docs/verification.md, section 1, "Luck")."""

from __future__ import annotations

import numpy as np

from stochopt.backend.emulate import emulate
from stochopt.lower import lower
from stochopt.spec import spec, tensor
from stochopt.verify.compare import precision_ratio, row_worst, tolerance
from stochopt.verify.magnitude import magnitudes
from stochopt.verify.reference import baseline_error_nearby, reference_output


@spec(inputs={"a": tensor("f32", (4, 256), low=-1.0, high=1.0),
              "b": tensor("f32", (256, 3), low=-1.0, high=1.0),
              "x": tensor("f32", (4, 256), low=-1e3, high=1e3)})
def dot(a, b, x):
    return (a @ b).sum(axis=1, keepdims=True) + x.sum(axis=1, keepdims=True)


DOT = lower(dot)  # the plain kernel: a matmul and two sums


def _inputs(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"a": rng.uniform(-1, 1, (4, 256)).astype(np.float32),
            "b": rng.uniform(-1, 1, (256, 3)).astype(np.float32),
            "x": rng.uniform(-1e3, 1e3, (4, 256)).astype(np.float32)}


def test_a_shuffled_order_is_the_same_math_rounded_another_way():
    x = _inputs(0)
    plain = emulate(DOT, x)
    exact = emulate(DOT, x, exact=True)
    orders = [emulate(DOT, x, order=k) for k in range(1, 5)]
    for o in orders:  # the same sums, to float32 rounding of terms up to 1e3 * 256
        assert o.dtype == plain.dtype and np.allclose(o, exact, rtol=0, atol=1e-1)
    # float64 holds every partial sum of these float32 terms exactly: no order differs
    assert np.array_equal(emulate(DOT, x, exact=True, order=3), exact)
    assert any(not np.array_equal(o, plain) for o in orders)  # and rounded differently
    assert np.array_equal(emulate(DOT, x, order=2), orders[1])  # the seed decides it


def test_the_baseline_error_nearby_counts_other_orders_of_its_sums():
    x = _inputs(1)
    ref = reference_output(dot, x)
    tol = tolerance(ref, "f32", None, None, magnitudes(DOT, x, ref))
    here = row_worst(precision_ratio(emulate(DOT, x), ref, tol))
    reordered = max(float(row_worst(precision_ratio(emulate(DOT, x, order=k), ref,
                                                    tol)).max()) for k in range(1, 5))
    near = baseline_error_nearby(dot, DOT, x)
    assert near.shape == here.shape
    assert float(near.max()) >= reordered > 0
