"""Specs: what a kernel must compute, written by the user as a numpy function.

    @spec(inputs={"x": tensor("f32", (128, 1024), low=-8.0, high=8.0)})
    def softmax(x): ...

A spec file is the user's own Python (trusted) and is imported. Every argument is
checked here, at the boundary, with an error that says what to write instead.
"""

from __future__ import annotations

import inspect
import keyword
import runpy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from stochopt.errors import StochoptError
from stochopt.leir.parser import is_reserved
from stochopt.leir.types import DTYPES, is_float

DEFAULT_RANGE = (-10.0, 10.0)


@dataclass(frozen=True)
class TensorSpec:
    dtype: str
    shape: tuple[int, ...]
    low: float | None = None
    high: float | None = None

    @property
    def bounds(self) -> tuple[float, float]:
        """The value range the kernel must be right on."""
        if self.dtype == "bool":
            return (0.0, 1.0)
        lo = self.low if self.low is not None else DEFAULT_RANGE[0]
        hi = self.high if self.high is not None else DEFAULT_RANGE[1]
        return (float(lo), float(hi))


def tensor(dtype: str, shape, low: float | None = None, high: float | None = None) -> TensorSpec:
    """Describe one input (or the output) of a spec: dtype, shape and value range."""
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise StochoptError(f"tensor(): unknown dtype {dtype!r}",
                            hint=f"use one of {', '.join(repr(d) for d in DTYPES)}")
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if (not isinstance(shape, tuple | list) or not shape
            or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in shape)):
        raise StochoptError(f"tensor(): shape must be a tuple of positive ints, got {shape!r}",
                            hint="write e.g. tensor(\"f32\", (128, 1024))")
    for name, v in (("low", low), ("high", high)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)
                              or v != v or abs(v) == float("inf")):
            raise StochoptError(f"tensor(): {name} must be a finite number, got {v!r}")
    if low is not None and high is not None and low > high:
        raise StochoptError(f"tensor(): low={low} is greater than high={high}",
                            hint="swap them")
    if (low is not None or high is not None) and not is_float(dtype) and dtype != "i32":
        raise StochoptError("tensor(): low/high apply to numeric tensors, not bool")
    return TensorSpec(dtype, tuple(shape), low, high)


@dataclass(frozen=True)
class Spec:
    name: str
    inputs: dict[str, TensorSpec]
    reference: Callable
    output: TensorSpec | None = None  # dtype of the result; shape comes from tracing
    rtol: float | None = None
    atol: float | None = None
    source: str = ""
    path: str | None = None
    line: int | None = None
    extras: dict = field(default_factory=dict)

    @property
    def output_dtype(self) -> str:
        return self.output.dtype if self.output else "f32"

    def __call__(self, *args, **kwargs):
        return self.reference(*args, **kwargs)


def spec(inputs: Mapping[str, TensorSpec], output: TensorSpec | None = None,
         rtol: float | None = None, atol: float | None = None, name: str | None = None):
    """Mark a numpy function as a spec: what a kernel with these inputs must compute."""
    if not isinstance(inputs, Mapping) or not inputs:
        raise StochoptError("@spec: inputs must be a non-empty dict of name -> tensor(...)",
                            hint='@spec(inputs={"x": tensor("f32", (128, 1024))})')
    for k, v in inputs.items():
        if not isinstance(k, str) or not k.isidentifier() or keyword.iskeyword(k):
            raise StochoptError(f"@spec: input name {k!r} is not a Python identifier")
        if is_reserved(k):  # the kernel's parameters carry the inputs' names
            raise StochoptError(f"@spec: input name {k!r} is a LEIR op or constant name, "
                                "so a kernel cannot take it as a parameter",
                                hint=f"rename the input, e.g. {k}_in")
        if not isinstance(v, TensorSpec):
            raise StochoptError(f"@spec: input {k!r} must be tensor(...), got {type(v).__name__}")
    if output is not None and not isinstance(output, TensorSpec):
        raise StochoptError("@spec: output must be tensor(...) or omitted")
    for label, tol in (("rtol", rtol), ("atol", atol)):
        if tol is not None and (isinstance(tol, bool) or not isinstance(tol, int | float)
                                or not 0 <= tol < 1e6):
            raise StochoptError(f"@spec: {label} must be a non-negative number, got {tol!r}")
    if name is not None and (not isinstance(name, str) or not name.isidentifier()):
        raise StochoptError(f"@spec: name must be an identifier, got {name!r}")

    def decorate(fn: Callable) -> Spec:
        if not callable(fn):
            raise StochoptError("@spec decorates a function")
        params = list(inspect.signature(fn).parameters)
        if sorted(params) != sorted(inputs):
            raise StochoptError(
                f"@spec: {fn.__name__}({', '.join(params)}) does not take exactly the inputs "
                f"{', '.join(inputs)}", hint="name the parameters like the inputs dict")
        try:
            source = inspect.getsource(fn)
            line = inspect.getsourcelines(fn)[1]
            path = inspect.getsourcefile(fn)
        except (OSError, TypeError):
            source, line, path = "", None, None
        return Spec(name or fn.__name__, dict(inputs), fn, output,
                    None if rtol is None else float(rtol), None if atol is None else float(atol),
                    source, path, line)

    return decorate


def load_spec(path: str | Path, name: str | None = None) -> Spec:
    """Import a spec file and return its @spec function (the one named, if several)."""
    p = Path(path)
    if not p.is_file():
        raise StochoptError(f"spec file {path} does not exist")
    if p.suffix != ".py":
        raise StochoptError(f"spec file {path} is not a .py file")
    try:
        # run from its text by runpy (the user's own Python, trusted like any script),
        # not imported: a .pyc cached by the second could run the spec as it was before
        # an edit of the same size
        namespace = runpy.run_path(str(p), run_name=f"_stochopt_spec_{p.stem}")
    except StochoptError as e:
        raise StochoptError(e.message, hint=e.hint, source=str(path),
                            line=_line_in(e, p)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise StochoptError(f"cannot read spec file {path}: {e}") from None
    except SyntaxError as e:
        raise StochoptError(f"the spec is not valid Python: {e.msg}", source=str(path),
                            line=e.lineno, col=e.offset, hint="fix the syntax") from None
    except Exception as e:  # a broken spec file must not end in a traceback
        raise StochoptError(f"importing the spec failed: {type(e).__name__}: {e}",
                            source=str(path), line=_line_in(e, p),
                            hint="fix the spec file; it must import cleanly") from None
    text = p.read_text()
    found = {v.name: v for v in namespace.values() if isinstance(v, Spec)}
    if not found:
        raise StochoptError(f"{path} has no @spec function",
                            hint="decorate the reference function with @spec(inputs={...})")
    if name is not None:
        if name not in found:
            raise StochoptError(f"{path} has no spec named {name!r}",
                                hint=f"it has {', '.join(sorted(found))}")
        chosen = found[name]
    elif len(found) > 1:
        raise StochoptError(f"{path} has several specs: {', '.join(sorted(found))}",
                            hint="choose one with --name")
    else:
        chosen = next(iter(found.values()))
    return Spec(chosen.name, chosen.inputs, chosen.reference, chosen.output, chosen.rtol,
                chosen.atol, text, str(p), chosen.line)


def _line_in(error: BaseException, path: Path) -> int | None:
    """The line of the spec file where an exception raised while importing it came from."""
    import traceback

    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if Path(f.filename) == path]
    return frames[-1].lineno if frames else None
