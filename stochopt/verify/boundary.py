"""The boundary itself: a comparison with a constant driven to equality in the native run.

A comparison's band (decisions.py) is reached by values near its constant, but two
strict comparisons that split a value (`z < 0.5` and `z > 0.5`, each selecting a piece
of a piecewise formula) leave out only the point where the value *equals* the
constant, and `<` written for `<=` differs only there. In float64 a computed value
never lands on 0.5 by chance; in the machine's f32 it does, for a few inputs. So, from
the input whose compared value came nearest the constant, the search bisects over the
representable values of one input element that value depends on (the element of each
input the compared element lines up with, by broadcasting), until the native value
equals the constant or the two values bracketing it are adjacent floats.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from stochopt.leir.types import native_dtype
from stochopt.spec import Spec
from stochopt.verify import traced
from stochopt.verify.moves import legal

# elements tried (nearest the constant first), and steps of one bisection
ELEMENTS, STEPS = 3, 48


def aligned_index(element: tuple[int, ...], shape: tuple[int, ...],
                  out_shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """The index of an input of this shape that lines up with element of a value of
    out_shape (numpy broadcasting, right-aligned), or None when it does not line up."""
    if len(shape) > len(out_shape):
        return None
    tail = element[len(element) - len(shape):]
    size = out_shape[len(out_shape) - len(shape):]
    if any(s not in (1, t) for s, t in zip(shape, size, strict=True)):
        return None
    return tuple(0 if s == 1 else e for s, e in zip(shape, tail, strict=True))


def exact_boundary(kernel, spec: Spec, node: int, constant: float, start: dict,
                   names: list[str], spend: Callable[[], bool]) -> dict | None:
    """Inputs on which node's native value equals the constant at some element, or
    None. `spend()` counts one probe and says whether the budget is gone."""
    def value_at(inputs: dict, element) -> float:
        out = traced.run(kernel, inputs, [node], exact=False)[node]
        return float(np.asarray(out, np.float64)[element])

    base = np.asarray(traced.run(kernel, start, [node], exact=False)[node], np.float64)
    if spend() or base.size == 0:
        return None
    gap = np.nan_to_num(np.abs(base - constant), nan=np.inf).ravel()
    for flat in np.argsort(gap, kind="stable")[:ELEMENTS]:
        element = np.unravel_index(int(flat), base.shape)
        for name in names:
            t = spec.inputs[name]
            index = aligned_index(element, t.shape, base.shape)
            if t.dtype not in ("f32", "bf16") or index is None:
                continue
            found = _bisect(spec, start, name, index,
                            lambda x, e=element: value_at(x, e) - constant, spend)
            if found is not None:
                return found
    return None


def _bisect(spec: Spec, start: dict, name: str, index: tuple, f, spend) -> dict | None:
    """Bisect over the floats of inputs[name][index] for f == 0 (f's sign changes
    across the range, or nothing is tried)."""
    lo_bound, hi_bound = spec.inputs[name].bounds
    native = native_dtype(spec.inputs[name].dtype)

    def at(v: float) -> tuple[dict, float]:
        x = np.array(start[name], np.float64, copy=True)
        x[index] = v
        inputs = legal(spec, dict(start, **{name: x}))
        return inputs, f(inputs)

    v0 = float(start[name][index])
    ends = []
    for v in (lo_bound, hi_bound):
        inputs, fv = at(v)
        if spend():
            return None
        if fv == 0:
            return inputs
        ends.append((float(inputs[name][index]), fv))
    (a, fa), (b, fb) = ends
    if not (np.isfinite(fa) and np.isfinite(fb)) or np.sign(fa) == np.sign(fb):
        return None
    mid = v0 if a < v0 < b else (a + b) / 2
    for _ in range(STEPS):
        inputs, fm = at(mid)
        if spend():
            return None
        m = float(inputs[name][index])
        if fm == 0:
            return inputs
        if not np.isfinite(fm) or m in (a, b):
            return None  # adjacent floats bracket it: the value skips the constant
        if np.sign(fm) == np.sign(fa):
            a, fa = m, fm
        else:
            b, fb = m, fm
        mid = (a + b) / 2
        if float(native.type(mid)) in (a, b):  # no float between: try the neighbour
            mid = float(np.nextafter(native.type(a), native.type(b)))
    return None
