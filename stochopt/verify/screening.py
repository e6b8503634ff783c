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
from stochopt.verify.check import (
    baseline_error_nearby,
    reference_output,
    typical_output_scale,
)
from stochopt.verify.compare import precision_check, semantic_error
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
        self.baseline_nearby: list[float | None] = []
        self.typical_scale = typical_output_scale(spec)
        structured = structured_recipes(spec)
        picks = [random_spec_inputs(spec, seed)]
        for i in range(1, count):
            picks.append(build_inputs(spec, structured[(seed + 2 * i) % len(structured)]))
        for x in picks[:count]:
            self.add(x)

    def add(self, inputs: dict[str, np.ndarray]) -> None:
        self.inputs.append(inputs)
        self.references.append(reference_output(self.spec, inputs))
        self.baseline_outputs.append(emulate(self.baseline, inputs, self.machine))
        self.baseline_nearby.append(None)  # measured the first time a candidate needs it

    def __len__(self) -> int:
        return len(self.inputs)

    def error(self, kernel: Kernel, threshold: float = float("inf")) -> float:
        """STOKE's eq term: 0 when every input passes; each failing input adds FAIL_COST
        plus how far past the tolerance it is (capped). Stops once past the threshold."""
        total = 0.0
        for i in range(len(self.inputs)):
            total += self._one(kernel, i)
            if total > threshold:
                break
        return total

    def _one(self, kernel, i: int) -> float:
        x, ref, base = self.inputs[i], self.references[i], self.baseline_outputs[i]
        if kernel.output_type.shape != ref.shape:
            return MAX_INPUT_COST
        sem, bad = semantic_error(emulate(kernel, x, self.machine, exact=True), ref,
                                  self.typical_scale)
        if bad is not None:
            return FAIL_COST + MAX_INPUT_COST
        got = emulate(kernel, x, self.machine)
        prec, bad = precision_check(got, ref, self.spec.output_dtype, self.spec.rtol,
                                    self.spec.atol, base)
        if (bad is not None and bad.check == "precision" and self.spec.rtol is None
                and self.spec.atol is None):
            # as check() does: judge again by the baseline's worst error nearby
            if self.baseline_nearby[i] is None:
                self.baseline_nearby[i] = baseline_error_nearby(self.spec, self.baseline, x,
                                                                self.machine)
            prec, bad = precision_check(got, ref, self.spec.output_dtype, self.spec.rtol,
                                        self.spec.atol, base, self.baseline_nearby[i])
        if bad is None:
            return 0.0
        return FAIL_COST + min(MAX_INPUT_COST, float(np.log2(max(prec, 1.0))))
