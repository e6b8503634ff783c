"""Screening: the chain's small fixed set of test inputs (STOKE's test cases).

Cheap enough to run on every candidate: a few inputs with their reference outputs and
the baseline's outputs computed once. It grows with every counterexample that a full
check finds, so the chain never again accepts a kernel that fails that way.
"""

from __future__ import annotations

import numpy as np

from stochopt.backend.emulate import emulate
from stochopt.leir.ir import Kernel
from stochopt.spec import Spec
from stochopt.verify.compare import (
    precision_allowance,
    precision_check,
    semantic_error,
    semantic_limit,
)
from stochopt.verify.magnitude import magnitudes, reduction_terms
from stochopt.verify.ranges import analyze, declared_ranges
from stochopt.verify.reference import (
    baseline_error_nearby,
    reference_output,
    typical_output_scale,
)
from stochopt.verify.strategies import build_inputs, random_spec_inputs, structured_recipes

# the cost of failing one screening input, before its size is added (see docs/search.md)
FAIL_COST = 1.0
MAX_INPUT_COST = 10.0


class ScreeningSet:
    def __init__(self, spec: Spec, baseline: Kernel, machine, count: int = 3,
                 seed: int = 0) -> None:
        self.spec, self.baseline, self.machine = spec, baseline, machine
        self.inputs: list[dict[str, np.ndarray]] = []
        self.references: list[np.ndarray] = []
        self.baseline_outputs: list[np.ndarray] = []
        self.baseline_nearby: list[np.ndarray | None] = []
        self.magnitudes: list[np.ndarray] = []
        self.limits: list[tuple | None] = []
        self.typical_scale = typical_output_scale(spec)
        self.terms = reduction_terms(baseline)  # the precision floor's sums (compare.py)
        # the static range analysis runs first on every candidate; the baseline's once
        self.ranges = declared_ranges(spec)
        self.baseline_safe = analyze(baseline, self.ranges).poison is None
        structured = structured_recipes(spec)
        picks = [random_spec_inputs(spec, seed)]
        for i in range(1, count):
            picks.append(build_inputs(spec, structured[(seed + 2 * i) % len(structured)]))
        for x in picks[:count]:
            self.add(x)

    def add(self, inputs: dict[str, np.ndarray]) -> None:
        self.inputs.append(inputs)
        self.references.append(reference_output(self.spec, inputs))
        self.baseline_outputs.append(emulate(self.baseline, inputs))
        self.magnitudes.append(magnitudes(self.baseline, inputs, self.references[-1]))
        self.baseline_nearby.append(None)  # measured the first time a candidate needs it
        self.limits.append(None)           # likewise the per-element limits below

    def _limits(self, i: int) -> tuple:
        """(reference all finite, semantic limit, per-element precision limit): a
        candidate within them passes both checks exactly as the full functions say."""
        if self.limits[i] is None:
            ref = self.references[i]
            size = self.magnitudes[i]
            tol, allowed, _ = precision_allowance(ref, self.spec.output_dtype, self.spec.rtol,
                                                  self.spec.atol, self.baseline_outputs[i],
                                                  magnitude=size, terms=self.terms)
            with np.errstate(invalid="ignore"):  # inf * 0 where ref is inf: unused then
                limit = tol * allowed
            self.limits[i] = (bool(np.isfinite(ref).all()),
                              semantic_limit(ref, self.typical_scale, size), limit)
        return self.limits[i]

    def __len__(self) -> int:
        return len(self.inputs)

    def error(self, kernel: Kernel, threshold: float = float("inf")) -> float:
        """STOKE's eq term: 0 when every input passes; each failing input adds FAIL_COST
        plus how far past the tolerance it is (capped). Stops once past the threshold.
        A kernel the static range analysis refuses fails every input, unemulated."""
        if self.range_refused(kernel):
            return (FAIL_COST + MAX_INPUT_COST) * len(self.inputs)
        total = 0.0
        for i in range(len(self.inputs)):
            total += self._one(kernel, i)
            if total > threshold:
                break
        return total

    def range_refused(self, kernel: Kernel) -> bool:
        """Whether a hazard's inf or nan can reach the kernel's output under the spec's
        ranges where none can reach the baseline's (ranges.range_refusal)."""
        return self.baseline_safe and analyze(kernel, self.ranges).poison is not None

    def output(self, kernel: Kernel, i: int, exact: bool) -> np.ndarray:
        """The kernel's output on screening input i (search/values.py caches it per node)."""
        return emulate(kernel, self.inputs[i], exact=exact)

    def _one(self, kernel, i: int) -> float:
        x, ref, base = self.inputs[i], self.references[i], self.baseline_outputs[i]
        if kernel.output_type.shape != ref.shape:
            return MAX_INPUT_COST
        finite, sem_limit, prec_limit = self._limits(i)
        size = self.magnitudes[i]
        exact = self.output(kernel, i, exact=True)
        if not (finite and _within(exact, ref, sem_limit)):
            sem, bad = semantic_error(exact, ref, self.typical_scale, size)
            if bad is not None:
                return FAIL_COST + MAX_INPUT_COST
        got = self.output(kernel, i, exact=False)
        if finite and _within(got, ref, prec_limit):
            return 0.0  # the common case, decided without building error arrays
        prec, bad = precision_check(got, ref, self.spec.output_dtype, self.spec.rtol,
                                    self.spec.atol, base, magnitude=size, terms=self.terms)
        if (bad is not None and bad.check == "precision" and self.spec.rtol is None
                and self.spec.atol is None):
            # as check() does: judge again by the baseline's worst error nearby
            if self.baseline_nearby[i] is None:
                self.baseline_nearby[i] = baseline_error_nearby(
                    self.spec, self.baseline, x, reference=ref, magnitude=size)
            prec, bad = precision_check(got, ref, self.spec.output_dtype, self.spec.rtol,
                                        self.spec.atol, base, self.baseline_nearby[i], size,
                                        terms=self.terms)
        if bad is None:
            return 0.0
        return FAIL_COST + min(MAX_INPUT_COST, float(np.log2(max(prec, 1.0))))


def _within(got: np.ndarray, ref: np.ndarray, limit) -> bool:
    """Every element finite and within its limit of a finite reference."""
    diff = np.abs(np.asarray(got, np.float64) - ref)
    return bool(np.isfinite(diff).all() and (diff <= limit).all())
