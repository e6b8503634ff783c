from pathlib import Path

import numpy as np

from stochopt.backend.cost import cost
from stochopt.backend.emulate import emulate, random_inputs
from stochopt.leir import parse, render

DOCS = Path(__file__).resolve().parents[2] / "docs" / "examples"


def _softmax(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_hand_written_softmax_kernels_round_trip_run_and_match_numpy():
    for name in ("softmax_plain.leir", "softmax_fast.leir"):
        kernel = parse((DOCS / name).read_text())
        assert parse(render(kernel)) == kernel
        inputs = random_inputs(kernel, seed=3)
        expected = _softmax(inputs["x"])
        np.testing.assert_allclose(emulate(kernel, inputs), expected, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(emulate(kernel, inputs, exact=True), expected,
                                   rtol=1e-12, atol=1e-15)


def test_fast_softmax_is_cheaper_than_plain():
    plain = cost(parse((DOCS / "softmax_plain.leir").read_text()))
    fast = cost(parse((DOCS / "softmax_fast.leir").read_text()))
    assert fast.cycles < plain.cycles
