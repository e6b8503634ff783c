"""Helpers for the lowering tests: write a spec file, lower it, and check the kernel
against the spec's float64 reference on random inputs in each tensor's range."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from stochopt.backend.cost import peak_memory
from stochopt.backend.emulate import emulate
from stochopt.leir import parse, render
from stochopt.lower import lower
from stochopt.machine import load_machine
from stochopt.spec import Spec, load_spec

HEADER = "import math\n\nimport numpy as np\n\nfrom stochopt import spec, tensor\n\n"

# Native mode: f32 compute against float64, scaled by the output's magnitude.
NATIVE_TOLERANCE = {"f32": 2e-4, "bf16": 2e-2, "i32": 0.0, "bool": 0.0}
EXACT_TOLERANCE = 1e-9


@dataclass
class Checked:
    kernel: object
    peak_bytes: int
    native_error: float
    exact_error: float


def spec_inputs(spec: Spec, seed: int) -> tuple[dict, dict]:
    """Random kernel inputs in each tensor's [low, high], and the same values as the
    reference sees them (float64, or bool/int)."""
    rng = np.random.default_rng(seed)
    native, reference = {}, {}
    for name, t in spec.inputs.items():
        lo, hi = t.bounds
        if t.dtype == "bool":
            x = rng.random(t.shape) < rng.uniform(0.2, 0.8)
            native[name], reference[name] = x, x.copy()
        elif t.dtype == "i32":
            x = rng.integers(int(np.ceil(lo)), int(np.floor(hi)) + 1, t.shape).astype(np.int32)
            native[name], reference[name] = x, x.astype(np.int64)
        else:
            x = rng.uniform(lo, hi, t.shape)
            x = x.astype(ml_dtypes.bfloat16 if t.dtype == "bf16" else np.float32)
            native[name], reference[name] = x, x.astype(np.float64)
    return native, reference


def scaled_error(got: np.ndarray, want: np.ndarray) -> float:
    """Largest |got - want| over the finite reference values, relative to the reference's
    largest magnitude (at least 1); non-finite reference values must match in place."""
    got = np.asarray(got).astype(np.float64)
    want = np.asarray(want).astype(np.float64)
    assert got.shape == want.shape, f"kernel output {got.shape}, reference {want.shape}"
    finite = np.isfinite(want)
    same = (got[~finite] == want[~finite]) | (np.isnan(got[~finite]) & np.isnan(want[~finite]))
    assert same.all(), (f"{(~same).sum()} non-finite reference values not matched: "
                        f"got {got[~finite][~same][:5]}, want {want[~finite][~same][:5]}")
    if not finite.any():
        return 0.0
    assert np.isfinite(got[finite]).all(), "kernel gives inf/nan where the reference is finite"
    scale = max(1.0, float(np.abs(want[finite]).max()))
    return float(np.abs(got[finite] - want[finite]).max()) / scale


def check_spec(spec: Spec, machine=None, seeds=(0, 1), tolerance: float | None = None
               ) -> Checked:
    """Lower, round-trip, fit, run native and exact, and compare with the reference."""
    machine = load_machine(machine)
    kernel = lower(spec, machine)
    assert parse(render(kernel), machine) == kernel
    peak, _ = peak_memory(kernel, machine)
    assert 0 < peak <= machine.pe_local_bytes
    out_dtype = spec.output_dtype
    assert kernel.output_type.dtype == out_dtype
    tol = NATIVE_TOLERANCE[out_dtype] if tolerance is None else tolerance
    worst_native = worst_exact = 0.0
    for seed in seeds:
        native_in, ref_in = spec_inputs(spec, seed)
        with np.errstate(all="ignore"):
            want = np.asarray(spec.reference(**ref_in), dtype=np.float64)
        if want.ndim == 0:  # a full reduction: the kernel holds it as shape (1,)
            want = want.reshape(kernel.output_type.shape)
        got = emulate(kernel, native_in)
        exact = emulate(kernel, native_in, exact=True)
        assert got.dtype == np.dtype(ml_dtypes.bfloat16 if out_dtype == "bf16" else {
            "f32": np.float32, "i32": np.int32, "bool": np.bool_}[out_dtype])
        native_error = scaled_error(got, want)
        exact_error = scaled_error(exact, want)
        assert native_error <= tol, f"seed {seed}: native error {native_error:.3g} > {tol}"
        assert exact_error <= EXACT_TOLERANCE, f"seed {seed}: exact error {exact_error:.3g}"
        worst_native = max(worst_native, native_error)
        worst_exact = max(worst_exact, exact_error)
    return Checked(kernel, peak, worst_native, worst_exact)


@pytest.fixture
def write_spec(tmp_path: Path):
    """write_spec(body, name="spec_file") -> path of a spec file holding the body
    (dedented) after the usual imports."""
    def write(body: str, name: str = "spec_file") -> Path:
        path = tmp_path / f"{name}.py"
        path.write_text(HEADER + textwrap.dedent(body).lstrip("\n"))
        return path
    return write


@pytest.fixture
def load(write_spec):
    """load(body) -> the Spec written in body."""
    def go(body: str, name: str | None = None) -> Spec:
        return load_spec(write_spec(body), name)
    return go


@pytest.fixture
def checked():
    return check_spec
