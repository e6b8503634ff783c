"""check(kernel, spec) -> Verdict: is a kernel equivalent to its spec?

Structured inputs first (constant rows, extremes, zeros, an outlier, one-hot rows, ties,
all-false and all-true mask rows), then hypothesis draws; a failure is shrunk by
hypothesis and reported as the simplest input found, with the worst element.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import hypothesis
import ml_dtypes
import numpy as np
from hypothesis import HealthCheck, Phase, Verbosity, given, settings

from stochopt.backend.emulate import emulate
from stochopt.backend.machine import load_machine
from stochopt.errors import StochoptError
from stochopt.leir.ir import Kernel
from stochopt.leir.render import render
from stochopt.spec import Spec
from stochopt.verify.compare import (
    Mismatch,
    output_scale,
    precision_check,
    precision_ratio,
    semantic_error,
    tolerance,
)
from stochopt.verify.strategies import (
    Recipe,
    build_inputs,
    input_recipes,
    nearby_inputs,
    random_spec_inputs,
    structured_recipes,
)

DEFAULT_EXAMPLES = 200


class CheckInterrupted(BaseException):
    """The check ran past its deadline (a BaseException, so hypothesis lets it through)."""


@dataclass
class Counterexample:
    mismatch: Mismatch
    inputs: dict[str, np.ndarray]
    recipes: dict[str, Recipe] | None = None
    path: str | None = None  # the .npz the inputs were saved to

    def describe(self) -> str:
        text = self.mismatch.describe()
        if self.recipes:
            text += "; input " + ", ".join(f"{n}={r.pattern}(seed {r.seed})"
                                           for n, r in self.recipes.items())
        return text

    def save(self, path: str | Path) -> str:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        arrays = {n: (v.astype(np.float32) if v.dtype == ml_dtypes.bfloat16 else v)
                  for n, v in self.inputs.items()}
        np.savez(path, **arrays)
        self.path = str(path)
        return self.path


@dataclass
class Verdict:
    equivalent: bool
    examples: int
    seed: int
    max_semantic_error: float = 0.0   # in units of the semantic tolerance
    max_precision_error: float = 0.0  # as a fraction of what is allowed
    counterexample: Counterexample | None = None
    elapsed_s: float = 0.0
    warnings: list[str] = field(default_factory=list)
    interrupted: bool = False  # stopped at its deadline: neither proved nor refuted

    def to_json(self) -> dict:
        out = {"equivalent": self.equivalent, "examples": self.examples, "seed": self.seed,
               "max_semantic_error": _finite(self.max_semantic_error),
               "max_precision_error": _finite(self.max_precision_error),
               "elapsed_s": round(self.elapsed_s, 3), "warnings": self.warnings}
        if self.counterexample:
            m = self.counterexample.mismatch
            out["counterexample"] = {"check": m.check, "index": list(m.index),
                                     "expected": _finite(m.expected), "got": _finite(m.got),
                                     "detail": m.detail, "inputs_npz": self.counterexample.path,
                                     "description": self.counterexample.describe()}
        return out


def _finite(v: float):
    return v if np.isfinite(v) else str(v)


def reference_output(spec: Spec, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The spec's reference on exact float64 copies of the inputs (bool/int kept)."""
    args = {}
    for n, x in inputs.items():
        dtype = spec.inputs[n].dtype
        args[n] = x.astype(np.float64) if dtype in ("f32", "bf16") else (
            x.astype(np.int64) if dtype == "i32" else x.astype(bool))
    try:
        with np.errstate(all="ignore"):
            out = spec.reference(**args)
    except Exception as e:
        raise StochoptError(f"spec {spec.name}: the reference raised "
                            f"{type(e).__name__}: {e}") from None
    out = np.asarray(out, dtype=np.float64)
    return out


def check_signature(kernel: Kernel, spec: Spec) -> None:
    """A kernel can only be compared with a spec whose inputs and output it shares."""
    sig = kernel.signature()
    want = {n: (t.dtype, t.shape) for n, t in spec.inputs.items()}
    have = {n: (t.dtype, t.shape) for n, t in sig.items()}
    if want != have:
        raise StochoptError(
            f"kernel {kernel.name} takes {_sig(have)} but spec {spec.name} has {_sig(want)}",
            hint="the kernel's parameters must match the spec's inputs")
    if kernel.output_type.dtype != spec.output_dtype:
        raise StochoptError(f"kernel returns {kernel.output_type.dtype} but spec "
                            f"{spec.name} wants {spec.output_dtype}",
                            hint=f'cast the result: cast(y, "{spec.output_dtype}")')


def _sig(d) -> str:
    return ", ".join(f"{n}: {dt}{list(s)}" for n, (dt, s) in d.items())


class _Comparison:
    """Runs one input through kernel, baseline and reference; keeps the worst errors."""

    def __init__(self, kernel, spec, baseline, machine, deadline: float | None) -> None:
        self.kernel, self.spec, self.baseline, self.machine = kernel, spec, baseline, machine
        self.deadline = deadline
        self.semantic = 0.0
        self.precision = 0.0
        self.count = 0
        self.typical_scale = typical_output_scale(spec)

    def run(self, inputs: dict[str, np.ndarray]) -> Mismatch | None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise CheckInterrupted()
        self.count += 1
        ref = reference_output(self.spec, inputs)
        out_shape = self.kernel.output_type.shape
        if ref.shape != out_shape:
            raise StochoptError(f"the spec returns shape {ref.shape}, the kernel {out_shape}")
        sem, bad = semantic_error(emulate(self.kernel, inputs, self.machine, exact=True), ref,
                                  self.typical_scale)
        self.semantic = max(self.semantic, sem)
        if bad is not None:
            return bad
        got = emulate(self.kernel, inputs, self.machine)
        base = None if self.baseline is None else emulate(self.baseline, inputs, self.machine)
        prec, bad = precision_check(got, ref, self.spec.output_dtype, self.spec.rtol,
                                    self.spec.atol, base)
        if (bad is not None and bad.check == "precision" and base is not None
                and self.spec.rtol is None and self.spec.atol is None):
            # one input is one sample of rounding luck, for the baseline too (all of a
            # constant input is one value): before refusing, take the baseline's worst
            # error on a few inputs near this one as well
            near = baseline_error_nearby(self.spec, self.baseline, inputs, self.machine)
            prec, bad = precision_check(got, ref, self.spec.output_dtype, self.spec.rtol,
                                        self.spec.atol, base, baseline_error=near)
        self.precision = max(self.precision, prec)
        return bad


def typical_output_scale(spec: Spec) -> float:
    """The output's scale (largest finite magnitude) on a plain uniform input."""
    return output_scale(reference_output(spec, random_spec_inputs(spec, 0)))


NEARBY_INPUTS = 4


def baseline_error_nearby(spec: Spec, baseline: Kernel, inputs: dict[str, np.ndarray],
                          machine, count: int = NEARBY_INPUTS) -> float:
    """The baseline's worst precision error (a fraction of the tolerance) on `count`
    inputs near these (strategies.nearby_inputs): the error level of the spec's own
    formula around this input, which the input alone measures by luck of rounding."""
    worst = 0.0
    for i in range(count):
        x = nearby_inputs(spec, inputs, seed=i)
        ref = reference_output(spec, x)
        tol = tolerance(ref, spec.output_dtype, spec.rtol, spec.atol)
        ratio = precision_ratio(emulate(baseline, x, machine), ref, tol)
        worst = max(worst, float(ratio.max()) if ratio.size else 0.0)
    return worst


def check(kernel: Kernel, spec: Spec, *, examples: int = DEFAULT_EXAMPLES, seed: int = 0,
          machine=None, baseline: Kernel | None = None,
          extra_inputs: list[dict[str, np.ndarray]] | None = None,
          structured: bool = True, deadline: float | None = None) -> Verdict:
    """Full equivalence check: structured cases, extra inputs, then hypothesis draws.

    ``deadline`` (time.monotonic) stops the check early with ``interrupted`` set."""
    if not isinstance(examples, int) or isinstance(examples, bool) or examples < 1:
        raise StochoptError(f"examples must be a positive integer, got {examples!r}")
    machine = load_machine(machine)
    check_signature(kernel, spec)
    if baseline is None:
        from stochopt.lower import lower
        baseline = lower(spec, machine)
    start = time.perf_counter()
    cmp = _Comparison(kernel, spec, baseline, machine, deadline)
    try:
        return _check(cmp, kernel, spec, examples, seed, extra_inputs, structured, start)
    except CheckInterrupted:
        return Verdict(False, cmp.count, seed, cmp.semantic, cmp.precision, None,
                       time.perf_counter() - start, interrupted=True)


def _check(cmp, kernel, spec, examples, seed, extra_inputs, structured, start) -> Verdict:

    def verdict(bad: Counterexample | None) -> Verdict:
        return Verdict(bad is None, cmp.count, seed, cmp.semantic, cmp.precision, bad,
                       time.perf_counter() - start)

    fixed = [(r, build_inputs(spec, r)) for r in structured_recipes(spec)][:examples] \
        if structured else []
    fixed += [(None, x) for x in extra_inputs or []]
    for recipes, inputs in fixed:
        bad = cmp.run(inputs)
        if bad is not None:
            return verdict(Counterexample(bad, inputs, recipes))
    remaining = examples - len(fixed)
    if remaining <= 0:
        return verdict(None)
    failures: list[Counterexample] = []

    @settings(max_examples=remaining, database=None, deadline=None, derandomize=False,
              suppress_health_check=list(HealthCheck), print_blob=False, report_multiple_bugs=False,
              verbosity=Verbosity.quiet,
              phases=(Phase.generate, Phase.shrink))
    @hypothesis.seed(seed)
    @given(input_recipes(spec))
    def property_(recipes):
        inputs = build_inputs(spec, recipes)
        bad = cmp.run(inputs)
        if bad is not None:
            failures.append(Counterexample(bad, inputs, recipes))
            raise AssertionError(bad.describe())

    try:
        property_()
    except AssertionError:
        pass
    except hypothesis.errors.HypothesisException as e:
        raise StochoptError(f"the input generator failed: {e}") from None
    return verdict(failures[-1] if failures else None)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def certificate(kernel: Kernel, spec: Spec, verdict: Verdict, machine=None) -> dict:
    """The record that a kernel was checked: what, against what, how hard, how close."""
    from stochopt import __version__
    machine = load_machine(machine)
    return {
        "spec": spec.name, "spec_sha256": sha256_text(spec.source),
        "kernel_sha256": sha256_text(render(kernel, machine)), "machine": machine.name,
        "equivalent": verdict.equivalent, "seed": verdict.seed, "examples": verdict.examples,
        "max_semantic_error": _finite(verdict.max_semantic_error),
        "max_precision_error": _finite(verdict.max_precision_error),
        "checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "versions": {"stochopt": __version__, "numpy": np.__version__,
                     "hypothesis": hypothesis.__version__,
                     "ml_dtypes": ml_dtypes.__version__},
    }


def write_json(path: str | Path, data: dict) -> None:
    Path(path).write_text(json.dumps(data, indent=2) + "\n")
