"""Warnings about specs that a search cannot learn anything from."""

from __future__ import annotations

import numpy as np

from stochopt.spec import Spec
from stochopt.verify.reference import reference_output
from stochopt.verify.strategies import random_spec_inputs


def degenerate_warnings(spec: Spec, trials: int = 3) -> list[str]:
    """Say so when the output is constant, or does not change when one input changes."""
    warnings = []
    base = [random_spec_inputs(spec, 7 * t) for t in range(trials)]
    outs = [reference_output(spec, x) for x in base]
    if all(_same(outs[0], o) for o in outs[1:]):
        warnings.append(f"spec {spec.name}: the output is the same for different random "
                        "inputs; a kernel that ignores its inputs would pass")
        return warnings
    for name in spec.inputs:
        changed = False
        for t, x in enumerate(base):
            other = random_spec_inputs(spec, 1000 + 7 * t)
            y = dict(x, **{name: other[name]})
            if not _same(outs[t], reference_output(spec, y)):
                changed = True
                break
        if not changed:
            warnings.append(f"spec {spec.name}: the output does not change when input "
                            f"{name!r} changes; a kernel may ignore it and still pass")
    return warnings


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))
