"""Counterexample inputs saved as .npz, read back for replay."""

from __future__ import annotations

import zipfile

import numpy as np

from stochopt.errors import StochoptError
from stochopt.leir.types import native_dtype
from stochopt.spec import Spec


def load_inputs(path: str, spec: Spec) -> dict[str, np.ndarray]:
    """Arrays for every spec input from an .npz file, checked and cast to their dtypes."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise StochoptError(f"cannot read inputs from {path}: {e}") from None
    out = {}
    for name, t in spec.inputs.items():
        if name not in arrays:
            raise StochoptError(f"{path} has no array {name!r}",
                                hint=f"it needs {', '.join(spec.inputs)}")
        if arrays[name].shape != t.shape:
            raise StochoptError(f"{path}: {name} has shape {arrays[name].shape}, the spec "
                                f"wants {t.shape}")
        out[name] = arrays[name].astype(native_dtype(t.dtype))
    return out
