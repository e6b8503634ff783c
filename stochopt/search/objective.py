"""The chain's bounded cost function: eq(k) + lam * ln(cycles(k) / baseline_cycles).

eq runs the screening inputs only up to the bound the chain gives it (the rest of the
acceptance threshold), so a candidate that is already too dear stops early.
"""

from __future__ import annotations

import math

from stochopt.backend.cost import cycles as kernel_cycles
from stochopt.errors import StochoptError
from stochopt.leir.ir import Kernel
from stochopt.spec import Spec
from stochopt.verify.check import check_signature


class Objective:
    """The cost of a kernel for one chain: its cycles against the baseline, its eq."""

    def __init__(self, spec: Spec, baseline: Kernel, baseline_cycles: int, machine,
                 screening, lam: float) -> None:
        self.spec, self.baseline, self.machine = spec, baseline, machine
        self.baseline_cycles, self.screening, self.lam = baseline_cycles, screening, lam

    def check(self, kernel: Kernel) -> None:
        """A move may drop the final cast or rename nothing else: the kernel must still
        take the spec's inputs and return its dtype and shape (raises StochoptError)."""
        check_signature(kernel, self.spec)
        if kernel.output_type.shape != self.baseline.output_type.shape:
            raise StochoptError(f"kernel returns shape {kernel.output_type.shape}, the "
                                f"spec {self.baseline.output_type.shape}")

    def cycles(self, kernel: Kernel) -> int:
        return kernel_cycles(kernel, self.machine)

    def performance(self, cycles: int) -> float:
        """lam * ln(cycles / baseline): a logarithm, so beta reads as a ratio."""
        return self.lam * math.log(cycles / self.baseline_cycles)

    def error(self, kernel: Kernel, bound: float = math.inf) -> float:
        """eq: the kernel's error on the screening inputs, computed up to ``bound``."""
        return self.screening.error(kernel, bound)
