"""float64 to bf16 at numpy speed.

ml_dtypes narrows float64 to bf16 element by element at ~10 ns an element, ten times
its float32 -> bf16 and thirty times float64 -> float32; a full check of mla_decode
narrows thousands of 2M-element tensors that way (its inputs, drawn in float64, and the
bf16 nodes of its exact runs). Narrowing through float32 is fast but can round twice:
where float32 lands exactly on a bf16 tie and differs from the float64, the tie is not
a real one. Those few elements (bf16 is float32's top half, so a tie is a float32
whose low 16 bits are 0x8000) are narrowed again from the float64 by ml_dtypes. Every
result is bit for bit ml_dtypes' own (tests/backend/test_casts.py).
"""

from __future__ import annotations

import sys

import numpy as np

from stochopt.leir.types import bfloat16

_F64 = np.dtype(np.float64)
_LOW = 0 if sys.byteorder == "little" else 1  # where a float32's low half lies


def cast(x, dtype: np.dtype) -> np.ndarray:
    """``np.asarray(x).astype(dtype, copy=False)``, with float64 -> bf16 made fast."""
    x = np.asarray(x)
    if x.dtype == dtype:
        return x
    if x.dtype == _F64 and dtype == bfloat16():
        return to_bf16(x)
    return x.astype(dtype)


def to_bf16(x: np.ndarray) -> np.ndarray:
    """float64 values rounded to the nearest bf16, ties to even."""
    narrow = np.ascontiguousarray(x, np.float32)
    out = narrow.astype(bfloat16())
    # each float32's low 16 bits read in place as a strided uint16 view: no masked copy
    halves = narrow.reshape(-1).view(np.uint16)
    ties = np.flatnonzero(halves[_LOW::2] == 0x8000)
    if len(ties):
        wide = np.ravel(x)[ties]
        twice = np.ravel(narrow)[ties] != wide
        out.reshape(-1)[ties[twice]] = wide[twice].astype(bfloat16())
    return out
