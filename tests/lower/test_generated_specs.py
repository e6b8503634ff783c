"""Property: any spec hypothesis writes from the lowering's numpy subset (docs/specs.md;
random shapes, including prime and 1-sized axes, and random chains of elementwise ops,
broadcasting, masks, reductions, transposes, slices and concatenations) lowers, fits, and
matches its reference."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stochopt.spec import load_spec
from tests.tiers import QUICK_AND_FULL

HEADER = "import math\n\nimport numpy as np\n\nfrom stochopt import spec, tensor\n\n"
SIZES = [1, 2, 3, 5, 7, 8, 13, 16, 32, 48, 64]

# each step rewrites v (shape S) into a value of shape S; y broadcasts to S, m is a mask
STEPS = [
    "v = np.exp(np.minimum(v, 8.0) * 0.5)",  # bounded: f32 must not overflow where f64 does not
    "v = np.tanh(v) + v",
    "v = np.abs(v) - 0.5",
    "v = -v",
    "v = np.sqrt(np.abs(v) + 1.0)",
    "v = np.log(np.abs(v) + 1.0)",
    "v = v + y",
    "v = v * y",
    "v = y - v",
    "v = np.maximum(v, y)",
    "v = np.minimum(v, 0.25)",
    "v = v / (np.abs(y) + 1.0)",
    "v = 2.0 - v * 0.5",
    "v = np.where(m, v, -v)",
    "v = np.where(v > y, v, y)",
    "v = np.where(m, v, -np.inf).max(axis={a}, keepdims=True) * 0.0 + v",
    "v = v - v.max(axis={a}, keepdims=True)",
    "v = v / (np.abs(v).sum(axis={a}, keepdims=True) + 1.0)",
    "v = v - np.mean(v, axis={a}, keepdims=True)",
    "v = np.transpose(np.tanh(v * 0.1)).T",
    "v = np.concatenate([v[{cut_lo}], v[{cut_hi}] * 2.0], axis={a})",
    "v = (v * 3.0).reshape(-1).reshape(v.shape)",
    "v = v * (v > 0) + m",
    "v = np.where(m, v, 0.0).mean(axis={a}, keepdims=True) + v",
    "v = v @ w",
    "v = np.matmul(np.tanh(v), w.T) + v",
]


@st.composite
def specs(draw):
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.sampled_from(SIZES)) for _ in range(rank))
    y_shape = tuple(s if draw(st.booleans()) else 1 for s in shape)
    y_shape = y_shape[draw(st.integers(0, rank - 1)):]  # a trailing part, numpy-style
    dtype = draw(st.sampled_from(["f32", "bf16"]))
    out = draw(st.sampled_from(["f32", "f32", "bf16"]))
    lines = ["v = x * 1.5"]
    for _ in range(draw(st.integers(1, 5))):
        step = draw(st.sampled_from(STEPS))
        a = draw(st.integers(-rank, rank - 1))
        if "{cut_lo}" in step:
            if shape[a] < 2:
                continue
            k = draw(st.integers(1, shape[a] - 1))
            lead = ":, " * (a % rank)
            step = step.format(a=a, cut_lo=f"{lead}:{k}", cut_hi=f"{lead}{k}:")
        lines.append(step.format(a=a))
    final = draw(st.sampled_from(["v", "v.sum(axis={a})", "v.max(axis={a}, keepdims=True)",
                                  "v.mean(axis=None, keepdims=True)"]))
    a = draw(st.integers(-rank, rank - 1)) % rank
    out_shape = {"v": shape, "v.sum(axis={a})": shape[:a] + shape[a + 1:] or (1,),
                 "v.max(axis={a}, keepdims=True)": shape[:a] + (1,) + shape[a + 1:],
                 "v.mean(axis=None, keepdims=True)": (1,) * rank}[final]
    lines.append("return " + final.format(a=a))
    body = "\n    ".join(lines)
    w_shape = (shape[-1], shape[-1])
    return (f'@spec(inputs={{"x": tensor("{dtype}", {shape}, low=-2.0, high=2.0),\n'
            f'              "y": tensor("f32", {y_shape}, low=-2.0, high=2.0),\n'
            f'              "w": tensor("{dtype}", {w_shape}, low=-0.5, high=0.5),\n'
            f'              "m": tensor("bool", {shape})}},\n'
            f'      output=tensor("{out}", {out_shape}))\n'
            f"def f(x, y, w, m):\n    {body}\n")


@pytest.mark.parametrize("full", QUICK_AND_FULL)
def test_generated_subset_spec_lowers_fits_and_matches(tmp_path, checked, full):
    @settings(max_examples=40 if full else 12, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(source=specs())
    def lowers_fits_and_matches(source):
        path = tmp_path / f"generated_{uuid.uuid4().hex}.py"
        path.write_text(HEADER + source)
        checked(load_spec(path), seeds=(0,))

    lowers_fits_and_matches()
