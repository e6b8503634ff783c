"""Inputs given for replay (a saved counterexample, a user's arrays): read and checked.

A replayed input must be one the kernel is required to be right on: every input of the
spec, nothing else, each of its shape, of a kind that converts to its dtype without
changing meaning (numbers for f32/bf16, whole numbers for i32, booleans or 0/1 for
bool), finite, and inside its declared [low, high]. Anything else is the user's mistake:
one StochoptError line (exit 2 from the CLI), never a traceback and never a verdict on
an input the spec does not cover.
"""

from __future__ import annotations

import zipfile
from collections.abc import Mapping

import numpy as np

from stochopt.errors import StochoptError
from stochopt.leir.types import native_dtype
from stochopt.spec import Spec, TensorSpec


def load_inputs(path: str, spec: Spec) -> dict[str, np.ndarray]:
    """Arrays for every spec input from an .npz file, checked and cast to their dtypes."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise StochoptError(f"cannot read inputs from {path}: {e}") from None
    return checked_inputs(arrays, spec, path)


def checked_inputs(arrays: Mapping, spec: Spec, where: str) -> dict[str, np.ndarray]:
    """One array per spec input, each checked (module doc) and cast to its dtype;
    ``where`` names the source in errors (a file, or "inputs")."""
    if not isinstance(arrays, Mapping):
        raise StochoptError(f"{where}: inputs must be a dict of name -> array, got "
                            f"{type(arrays).__name__}", hint=f"give {', '.join(spec.inputs)}")
    if set(arrays) != set(spec.inputs):
        names = ", ".join(map(str, arrays)) or "nothing"
        raise StochoptError(f"{where} names {names}, but spec {spec.name} takes "
                            f"{', '.join(spec.inputs)}",
                            hint="give exactly one array per input, by name")
    return {name: _checked(name, arrays[name], t, where) for name, t in spec.inputs.items()}


def _checked(name: str, value, t: TensorSpec, where: str) -> np.ndarray:
    try:
        x = np.asarray(value)
    except (TypeError, ValueError) as e:  # ragged lists and the like
        raise StochoptError(f"{where}: {name} is not an array: {e}") from None
    if x.shape != t.shape:
        raise StochoptError(f"{where}: {name} has shape {x.shape}, the spec wants {t.shape}")
    if x.dtype.kind not in ("iuf" if t.dtype in ("f32", "bf16") else "biuf"):
        raise StochoptError(f"{where}: {name} holds {x.dtype} values, the spec wants "
                            f"{t.dtype}", hint=_what_to_give(t.dtype))
    if x.dtype.kind == "f" and not np.isfinite(x).all():
        at = _first(~np.isfinite(x))
        raise StochoptError(f"{where}: {name} holds {x[at]} at {list(at)}; inputs must be "
                            "finite", hint="the spec's declared ranges are finite")
    if t.dtype == "bool":
        if x.dtype.kind != "b" and not np.isin(x, (0, 1)).all():
            at = _first(~np.isin(x, (0, 1)))
            raise StochoptError(f"{where}: {name} holds {x[at]} at {list(at)}, the spec "
                                "wants bool", hint="give True/False, or 0/1")
        return x.astype(bool)
    if t.dtype == "i32" and x.dtype.kind == "f" and (x != np.round(x)).any():
        at = _first(x != np.round(x))
        raise StochoptError(f"{where}: {name} holds {x[at]} at {list(at)}, the spec wants "
                            "whole numbers (i32)")
    lo, hi = t.bounds
    if t.dtype == "i32":  # judged before the cast, which would wrap a large value
        wide = x.astype(np.float64)
        out = x.astype(native_dtype(t.dtype)) if ((wide >= lo) & (wide <= hi)).all() else x
    else:  # f32/bf16: judged as the kernel sees them, once rounded to the dtype
        with np.errstate(over="ignore"):
            out = x.astype(native_dtype(t.dtype))
        wide = out.astype(np.float64)
    outside = ~np.isfinite(wide) | (wide < lo) | (wide > hi)
    if outside.any():
        at = _first(outside)
        raise StochoptError(f"{where}: {name} holds {x[at]} at {list(at)}, outside its "
                            f"declared range [{lo:g}, {hi:g}]",
                            hint="a kernel is only required to be right on inputs inside "
                                 "the spec's ranges")
    return out


def _first(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(mask)), mask.shape))


def _what_to_give(dtype: str) -> str:
    return {"bool": "give a bool array (or 0/1)", "i32": "give whole numbers",
            "f32": "give an array of numbers", "bf16": "give an array of numbers (bf16 "
            "values saved as float32)"}[dtype]
