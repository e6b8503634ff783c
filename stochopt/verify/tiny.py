"""Precision at tiny scales: what the inputs' own resolution leaves to judge.

Below a dtype's smallest normal number its grid is even (one spacing, the smallest
subnormal): an input element of k spacings holds about log2(k) bits. Where a kernel
rounds an intermediate at that scale (x * w before the scale that brings it up, for
a subnormal x), its result can be off by as much as moving the inputs by one spacing
moves the exact output; the baseline, rounding elsewhere, may be exact there by luck.
That error is the inputs' resolution, not a loss the kernel chose, so the precision
check lets through, per element, RESOLUTION_FACTOR times the largest change of the
reference when every subnormal input element moves by one spacing (two draws of
signs). Zeros and normal values do not move: they are exact. A flush to zero of a
result many spacings large, or a lost term, is larger than that and still refused.

It runs only when a precision failure is about to be reported on an input that holds
subnormal values, so ordinary inputs cost nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np

from stochopt.spec import Spec
from stochopt.verify.compare import SPACING

SMALLEST_NORMAL = {"f32": float(np.finfo(np.float32).smallest_normal),
                   "bf16": float(ml_dtypes.finfo(ml_dtypes.bfloat16).smallest_normal)}
RESOLUTION_FACTOR = 2.0
DRAWS = 2


def subnormal_inputs(spec: Spec, inputs: dict[str, np.ndarray]) -> bool:
    """Whether some float input holds a nonzero value below its dtype's smallest
    normal number."""
    for name, t in spec.inputs.items():
        if t.dtype in SMALLEST_NORMAL:
            x = np.abs(np.asarray(inputs[name], np.float64))
            if ((x > 0) & (x < SMALLEST_NORMAL[t.dtype])).any():
                return True
    return False


def input_resolution(spec: Spec, inputs: dict[str, np.ndarray], ref: np.ndarray,
                     reference: Callable, seed: int = 0) -> np.ndarray:
    """Per output element, RESOLUTION_FACTOR times the largest |change| of the
    reference when each subnormal input element moves by one grid spacing (module
    doc); 0 where nothing moves."""
    rng = np.random.default_rng(seed)
    worst = np.zeros(np.shape(ref))
    for _ in range(DRAWS):
        moved = {}
        for name, x in inputs.items():
            t = spec.inputs[name]
            if t.dtype not in SMALLEST_NORMAL:
                moved[name] = x
                continue
            wide = np.asarray(x, np.float64)
            tiny = (wide != 0) & (np.abs(wide) < SMALLEST_NORMAL[t.dtype])
            step = np.where(rng.random(wide.shape) < 0.5, -1.0, 1.0) * SPACING[t.dtype]
            lo, hi = t.bounds
            moved[name] = np.where(tiny, np.clip(wide + step, lo, hi), wide).astype(x.dtype)
        with np.errstate(invalid="ignore"):
            change = np.abs(np.asarray(reference(spec, moved), np.float64) - ref)
        worst = np.maximum(worst, np.nan_to_num(change, nan=0.0, posinf=0.0))
    return RESOLUTION_FACTOR * worst
