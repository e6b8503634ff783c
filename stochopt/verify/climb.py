"""A short local search over inputs: hill climbing from the worst input a check has seen.

After the drawn inputs, a check spends a few more (check.CLIMB_STEPS at most) trying
to push the kernel past its limit: each step changes one row of one float input (an
element moved to low or high, at a random place or at one of the kernel's cuts; the row
replaced by a hunting row; its spread shrunk around its mean; the row shifted towards
one end of the range) and keeps the change when the kernel's worst error over its
limit grows. Every value stays inside the spec's range and is rounded to its dtype.
"""

from __future__ import annotations

import numpy as np

from stochopt.spec import Spec
from stochopt.verify.hunting import Boundaries, hunt_row
from stochopt.verify.strategies import representable

MOVES = ("extreme", "row", "shrink", "shift")
ROW_KINDS = ("two_clusters", "offset_outlier", "edge_extreme", "near_overflow")


def climb(comparison, spec: Spec, start: dict[str, np.ndarray], steps: int, seed: int,
          cuts: Boundaries) -> tuple | None:
    """(mismatch, inputs, None) for the first input that fails, or None after `steps`
    inputs. `comparison` is check's _Comparison: run(inputs) and last_score."""
    floats = [n for n, t in spec.inputs.items() if t.dtype in ("f32", "bf16")]
    if not floats:
        return None
    rng = np.random.default_rng(seed + 7)
    current, score = start, comparison.best_score
    # `steps` new inputs: a move can give an input already run (a row set to what it
    # held), which the comparison does not run or count again
    end = comparison.count + steps
    for _ in range(4 * steps):
        if comparison.count >= end:
            break
        name = floats[rng.integers(len(floats))]
        trial = dict(current)
        trial[name] = _move(spec, name, current[name], rng, cuts.get(name))
        bad = comparison.run(trial)
        if bad is not None:
            return bad, trial, None
        if comparison.last_score > score:
            current, score = trial, comparison.last_score
    return None


def _move(spec: Spec, name: str, x: np.ndarray, rng, cuts) -> np.ndarray:
    t = spec.inputs[name]
    lo, hi = t.bounds
    shape = x.shape
    n = shape[-1]
    rows = np.asarray(x, np.float64).reshape(-1, n).copy()
    r = rng.integers(rows.shape[0])
    last_cuts = cuts[-1] if cuts else (0, n - 1)
    move = MOVES[rng.integers(len(MOVES))]
    if move == "extreme":
        at = last_cuts[rng.integers(len(last_cuts))] if rng.random() < 0.5 else rng.integers(n)
        rows[r, at] = hi if rng.random() < 0.5 else lo
    elif move == "row":
        kind = ROW_KINDS[rng.integers(len(ROW_KINDS))]
        rows[r] = hunt_row(kind, rng, n, lo, hi, last_cuts)
    elif move == "shrink":
        mean = rows[r].mean()
        rows[r] = mean + (rows[r] - mean) * 0.1
    else:
        room = hi - rows[r].max() if rng.random() < 0.5 else lo - rows[r].min()
        rows[r] = rows[r] + room * rng.random()
    return representable(np.clip(rows, lo, hi).reshape(shape), t.dtype, lo, hi)
