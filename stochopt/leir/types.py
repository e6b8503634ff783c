"""Dtypes and tensor types: every LEIR value carries dtype, shape, location and layout."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from math import prod

import numpy as np

from stochopt.errors import ConstraintError, ParseError
from stochopt.leir.layout import Layout

# name -> (numpy dtype of native values, bytes per element, is float); bf16's numpy
# dtype comes from ml_dtypes, whose extension takes a second or more to import: it is
# looked up when a bf16 value is first made (native_dtype), not when stochopt starts
DTYPES: dict[str, tuple[np.dtype | None, int, bool]] = {
    "f32": (np.dtype(np.float32), 4, True),
    "bf16": (None, 2, True),
    "i32": (np.dtype(np.int32), 4, False),
    "bool": (np.dtype(np.bool_), 1, False),
}
LOCATIONS = ("dram", "pe")


def check_dtype(name: object) -> str:
    if not isinstance(name, str) or name not in DTYPES:
        raise ConstraintError(f"unknown dtype {name!r}", hint=f"use one of {', '.join(DTYPES)}")
    return name


def itemsize(dtype: str) -> int:
    return DTYPES[dtype][1]


def is_float(dtype: str) -> bool:
    return DTYPES[dtype][2]


def native_dtype(dtype: str) -> np.dtype:
    found = DTYPES[dtype][0]
    return found if found is not None else bfloat16()


@cache
def bfloat16() -> np.dtype:
    """numpy's dtype for bf16 values (ml_dtypes'), imported on first use."""
    import ml_dtypes
    return np.dtype(ml_dtypes.bfloat16)


@dataclass(frozen=True, slots=True)
class TensorType:
    dtype: str
    shape: tuple[int, ...]
    location: str  # "dram" or "pe"
    layout: Layout | None = None  # pe values only

    @property
    def numel(self) -> int:
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * itemsize(self.dtype)

    def local_bytes(self) -> int:
        """Bytes each holding PE keeps of this value (0 for dram values)."""
        if self.layout is None:
            return 0
        return self.layout.local_elements() * itemsize(self.dtype)

    def signature(self) -> str:
        """Text of a kernel parameter or return annotation: f32[128,1024] @ dram."""
        return f"{self.dtype}[{','.join(str(s) for s in self.shape)}] @ {self.location}"

    def describe(self) -> str:
        text = f"{self.dtype}{list(self.shape)} @ {self.location}"
        if self.layout is not None:
            text += f" {self.layout}"
        return text


_SIGNATURE = re.compile(r"^\s*([a-z0-9]+)\s*\[\s*([0-9,\s]*)\]\s*@\s*([a-z]+)\s*$")


def parse_signature(text: str, line: int | None = None, col: int | None = None) -> TensorType:
    """Parse a parameter annotation such as ``"bf16[16,512] @ dram"``."""
    m = _SIGNATURE.match(text) if len(text) < 200 else None
    if not m:
        raise ParseError(f"bad type annotation {text[:60]!r}", line=line, col=col,
                         hint='write it as "f32[128,1024] @ dram"')
    dtype, dims, location = m.groups()
    if dtype not in DTYPES:
        raise ParseError(f"unknown dtype {dtype!r}", line=line, col=col,
                         hint=f"use one of {', '.join(DTYPES)}")
    if location != "dram":
        raise ParseError(f"kernel inputs and outputs live in dram, not {location!r}",
                         line=line, col=col, hint='annotate them "... @ dram"')
    parts = [p.strip() for p in dims.split(",")]
    if parts and parts[-1] == "" and len(parts) > 1:
        parts.pop()  # f32[8,] like a Python tuple
    if parts != [""] and not all(p.isdigit() for p in parts):  # "128 1024", "8,,16"
        raise ParseError(f"bad shape in annotation {text[:60]!r}", line=line, col=col,
                         hint='separate sizes with commas: "f32[128,1024] @ dram"')
    shape = tuple(int(p) for p in parts if p)
    if not shape or any(s < 1 or s > 1 << 24 for s in shape) or len(shape) > 6:
        raise ParseError(f"bad shape in annotation {text!r}", line=line, col=col,
                         hint="use 1 to 6 positive dimensions")
    if prod(shape) > 1 << 28:
        raise ParseError(f"tensor {text!r} is too large", line=line, col=col)
    return TensorType(dtype, shape, location)
