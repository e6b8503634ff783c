"""Evidence that the held-out equivalent kernels are equal to their specs' baselines.

    python tests/verify/heldout/equal.py [--inputs 60] [--kernels NAME ...]

For each kernel in equivalent/, on many inputs (the verifier's structured and hunting
cases, recipes of every pattern, fraction and link drawn at random, and inputs the
verifier does not make: rows scaled by 10^-k down to the subnormals, nearly constant
rows), it emulates the kernel and the spec's baseline in their own dtypes and prints:
how many outputs are bit-identical to the baseline's, the largest difference in units
of the output's last place at the element's size, and how many inputs pass the
verifier's dynamic comparison (semantics and precision against the reference, with the
static range analysis left out, since that analysis is what refuses these kernels).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO))

from stochopt.backend.emulate import emulate  # noqa: E402
from stochopt.leir import parse  # noqa: E402
from stochopt.lower import lower  # noqa: E402
from stochopt.spec import Spec, load_spec  # noqa: E402
from stochopt.verify.check import _Comparison  # noqa: E402
from stochopt.verify.hunting import HUNT_PATTERNS, LINKS, kernel_boundaries  # noqa: E402
from stochopt.verify.strategies import (  # noqa: E402
    BOOL_PATTERNS,
    FLOAT_PATTERNS,
    FRACTIONS,
    Recipe,
    build_inputs,
    hunting_recipes,
    representable,
    structured_recipes,
)


def drawn_recipes(spec: Spec, rng: np.random.Generator) -> dict[str, Recipe]:
    out = {}
    for name, t in spec.inputs.items():
        patterns = BOOL_PATTERNS if t.dtype == "bool" else FLOAT_PATTERNS + HUNT_PATTERNS
        link = LINKS[rng.integers(len(LINKS))] if rng.random() < 0.5 else ""
        out[name] = Recipe(patterns[rng.integers(len(patterns))], int(rng.integers(2**31)),
                           FRACTIONS[rng.integers(len(FRACTIONS))], link)
    return out


def rescaled(spec: Spec, inputs: dict[str, np.ndarray], rng) -> dict[str, np.ndarray]:
    """Each float input's rows scaled by 10^-k (k up to 44, into the subnormals) or made
    nearly constant (a value plus a spread of 1e-3 of it), inside the declared range."""
    out = dict(inputs)
    for name, t in spec.inputs.items():
        if t.dtype not in ("f32", "bf16"):
            continue
        x = np.asarray(inputs[name], np.float64).copy()
        rows = x.reshape(-1, x.shape[-1])
        for r in range(rows.shape[0]):
            if rng.random() < 0.5:
                rows[r] *= 10.0 ** -rng.integers(0, 45)
            elif rng.random() < 0.5:
                rows[r] = rows[r, 0] * (1 + 1e-3 * rng.uniform(-1, 1, rows.shape[1]))
        out[name] = representable(np.clip(x, *t.bounds), t.dtype, *t.bounds)
    return out


def input_set(spec: Spec, kernel, count: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    cuts = kernel_boundaries(kernel, spec)
    recipes = structured_recipes(spec) + hunting_recipes(spec)
    recipes += [drawn_recipes(spec, rng) for _ in range(max(0, count - len(recipes)))]
    plain = [build_inputs(spec, r, cuts) for r in recipes[:count]]
    return plain + [rescaled(spec, x, rng) for x in plain]


def ulps(a: np.ndarray, b: np.ndarray, dtype: str) -> float:
    """The largest |a - b| in units of the last place of max(|a|, |b|) (f32's smallest
    subnormal at least), over the elements where both are finite."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    both = np.isfinite(a) & np.isfinite(b)
    if not both.any():
        return 0.0
    size = np.maximum(np.abs(a[both]), np.abs(b[both])).astype(np.float32)
    unit = np.spacing(size).astype(np.float64) * (2.0**16 if dtype == "bf16" else 1.0)
    return float((np.abs(a[both] - b[both]) / unit).max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=60,
                        help="inputs per kernel, each also tried rescaled (so twice this)")
    parser.add_argument("--kernels", nargs="+", default=None, metavar="NAME")
    args = parser.parse_args()
    paths = sorted((HERE / "equivalent").glob("*.leir"))
    if args.kernels:
        paths = [p for p in paths if p.stem in args.kernels]
    for path in paths:
        text = path.read_text()
        spec = load_spec(REPO / re.match(r"# spec: (\S+)\n", text).group(1))
        kernel, baseline = parse(text), lower(spec)
        comparison = _Comparison(kernel, spec, baseline, None)
        same = passed = 0
        worst, failures = 0.0, []
        inputs = input_set(spec, kernel, args.inputs)
        for x in inputs:
            got, base = emulate(kernel, x), emulate(baseline, x)
            with np.errstate(invalid="ignore"):
                same += bool(np.array_equal(got, base, equal_nan=True))
            worst = max(worst, ulps(got, base, spec.output_dtype))
            bad = comparison.run(x)
            passed += bad is None
            if bad is not None and len(failures) < 2:
                failures.append(bad.describe())
        print(f"{path.stem:48s} bit-identical {same}/{len(inputs)}, largest difference "
              f"{worst:.3g} ulps, passes the dynamic comparison {passed}/{len(inputs)}",
              flush=True)
        for f in failures:
            print(f"    {f}")


if __name__ == "__main__":
    main()
