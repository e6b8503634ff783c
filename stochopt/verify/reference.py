"""What a check judges every kernel against, whatever the kernel: the spec's reference
on an input, the output's typical size, and the baseline's error near an input. Below
both check.py and the check context (bank.py), which compute them."""

from __future__ import annotations

import numpy as np

from stochopt.backend.casts import cast
from stochopt.backend.emulate import emulate
from stochopt.errors import StochoptError
from stochopt.leir.ir import Kernel
from stochopt.spec import Spec
from stochopt.verify.compare import precision_ratio, row_worst, tolerance
from stochopt.verify.magnitude import magnitudes
from stochopt.verify.strategies import nearby_inputs, random_spec_inputs


def reference_output(spec: Spec, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The spec's reference on exact float64 copies of the inputs (bool/int kept)."""
    args = {}
    for n, x in inputs.items():
        dtype = spec.inputs[n].dtype
        args[n] = cast(x, np.float64) if dtype in ("f32", "bf16") else (
            x.astype(np.int64) if dtype == "i32" else x.astype(bool))
    try:
        with np.errstate(all="ignore"):
            out = spec.reference(**args)
    except Exception as e:
        raise StochoptError(f"spec {spec.name}: the reference raised "
                            f"{type(e).__name__}: {e}") from None
    out = np.asarray(out, dtype=np.float64)
    return out



def typical_output_scale(spec: Spec) -> float:
    """The output's typical size on a plain uniform input: the median magnitude of its
    finite elements (a median, so a minority of sentinels such as -1e30 does not move
    it), 1 where that is 0."""
    ref = np.abs(reference_output(spec, random_spec_inputs(spec, 0)))
    finite = ref[np.isfinite(ref)]
    typical = float(np.median(finite)) if finite.size else 0.0
    return typical if typical > 0 else 1.0


NEARBY_INPUTS = 4
# other orders of the baseline's sums tried on the input itself (emulate's order)
REORDERINGS = 4


def baseline_error_nearby(spec: Spec, baseline: Kernel, inputs: dict[str, np.ndarray],
                          count: int = NEARBY_INPUTS, reference: np.ndarray | None = None,
                          magnitude: np.ndarray | None = None) -> np.ndarray:
    """The baseline's worst precision error (a fraction of the tolerance) per row (the
    last axis) on `count` inputs near these (strategies.nearby_inputs), and on these
    with its sums added in REORDERINGS other orders: the error level of the spec's own
    formula around this input, which the input alone, in one order of additions,
    measures by luck of rounding. A kernel may sum in any order; a dot product that
    cancels to a small result rounds to an error that depends on the order alone.
    ``reference`` and ``magnitude``: those of these inputs, where the caller has them."""
    def tolerance_at(x, ref=None, size=None):
        ref = reference_output(spec, x) if ref is None else ref
        size = magnitudes(baseline, x, ref) if size is None else size
        return ref, tolerance(ref, spec.output_dtype, spec.rtol, spec.atol, size)

    ref, tol = tolerance_at(inputs, reference, magnitude)
    worst = np.zeros(())
    for order in range(1, REORDERINGS + 1):
        worst = np.maximum(worst, row_worst(precision_ratio(
            emulate(baseline, inputs, order=order), ref, tol)))
    for i in range(count):
        x = nearby_inputs(spec, inputs, seed=i)
        ref, tol = tolerance_at(x)
        worst = np.maximum(worst, row_worst(precision_ratio(emulate(baseline, x),
                                                           ref, tol)))
    return worst
