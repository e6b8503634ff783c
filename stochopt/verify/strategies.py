"""Inputs that break kernels: hypothesis strategies built from a spec's tensors.

A drawn input is a *recipe* (a pattern, a few parameters and a numpy seed) that expands
to arrays. Drawing recipes rather than millions of elements keeps examples fast for big
tensors, and lets hypothesis shrink a failure towards the simplest pattern that still
breaks the kernel (zeros, a constant row, one outlier) instead of towards noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from stochopt.backend.casts import cast
from stochopt.leir.types import native_dtype
from stochopt.spec import Spec, TensorSpec
from stochopt.verify.families import (
    BOOL_FAMILIES,
    FAMILY_LINKS,
    FLOAT_FAMILIES,
    JOINT_FAMILIES,
    apply_link,
    family_tensor,
    link_pairs,
    parameters,
    product_scale,
)
from stochopt.verify.hunting import (
    HUNT_PATTERNS,
    LINKS,
    Boundaries,
    hunt_tensor,
    link_applies,
    link_inputs,
)

FLOAT_PATTERNS = ("uniform", "constant_rows", "extremes", "zeros", "outlier", "one_hot",
                  "ties", "small_ints", "constant")
# the float patterns that make their values without the uniform tensor drawn first
MAKE_THEIR_OWN = frozenset(FLOAT_PATTERNS) - {"uniform", "constant_rows"}
BOOL_PATTERNS = ("random", "all_false_rows", "all_true_rows", "all_true", "all_false",
                 "single_true")


@dataclass(frozen=True)
class Recipe:
    """How to build one tensor: a pattern, a density or fraction, and a numpy seed;
    `link` (hunting.LINKS), when set, also makes other inputs from this one."""
    pattern: str
    seed: int
    fraction: float = 0.5
    link: str = ""

    def describe(self) -> str:
        name = FAMILY_PARAMETER.get(self.pattern, "fraction")
        fraction = f", {name} {self.fraction:g}" if (
            self.fraction != 0.5 or self.pattern in FAMILY_PARAMETER) else ""
        return f"{self.pattern}(seed {self.seed}{fraction})" + (
            f"+{self.link}" if self.link else "")


# what a family's parameter (Recipe.fraction) means, for describe()
FAMILY_PARAMETER = {"scaled": "scale", "spread": "spread", "row_ties": "k",
                    "kept_per_row": "k", "kept_per_column": "k", "dropped_per_row": "k",
                    "prefix_per_row": "suffix"}


FRACTIONS = (0.5, 0.1, 0.9, 0.25)


def _bits(n: int) -> st.SearchStrategy[int]:
    """An n-bit integer drawn as n booleans, shrinking towards 0. Not st.integers(): since
    6.131 hypothesis mixes literals from the source of every loaded module into integer
    (and float, bytes, string) draws, so the inputs tried for one seed would depend on
    what else the process had imported; boolean draws take no such constants."""
    return st.tuples(*[st.booleans()] * n).map(
        lambda bits: sum(int(b) << i for i, b in enumerate(bits)))


def _one_of(options: tuple) -> st.SearchStrategy:
    """One of the options, shrinking towards the first (as st.sampled_from, see _bits)."""
    return _bits(8).map(lambda i: options[i % len(options)])


# drawn links: none in half the draws, so most draws are independent inputs
DRAWN_LINKS = ("",) * (len(LINKS) + len(FAMILY_LINKS)) + LINKS + FAMILY_LINKS


def tensor_recipes(t: TensorSpec) -> st.SearchStrategy[Recipe]:
    patterns = (BOOL_PATTERNS + BOOL_FAMILIES if t.dtype == "bool"
                else FLOAT_PATTERNS + HUNT_PATTERNS + FLOAT_FAMILIES)

    def recipe(pattern: str, seed: int, index: int, link: str) -> Recipe:
        values = parameters(pattern, t) if pattern in FAMILIES else FRACTIONS
        return Recipe(pattern, seed, values[index % len(values)], link)

    return st.builds(recipe, _one_of(patterns), _bits(32), _bits(8), _one_of(DRAWN_LINKS))


def input_recipes(spec: Spec) -> st.SearchStrategy[dict[str, Recipe]]:
    """One recipe per spec input."""
    return st.fixed_dictionaries({n: tensor_recipes(t) for n, t in spec.inputs.items()})


def structured_recipes(spec: Spec) -> list[dict[str, Recipe]]:
    """The cases every check runs first, whatever hypothesis draws after them."""
    out = []
    for i, (fp, bp) in enumerate(zip(FLOAT_PATTERNS, BOOL_PATTERNS * 2, strict=False)):
        # a seed per input: two inputs of one shape and range (k and v, cos and sin) must
        # differ, or a kernel that swaps them passes every structured case
        out.append({n: Recipe(bp if t.dtype == "bool" else fp, 1000 + i + 100 * j)
                    for j, (n, t) in enumerate(spec.inputs.items())})
    return out


def hunting_recipes(spec: Spec) -> list[dict[str, Recipe]]:
    """The hunting cases every check runs after the structured ones (hunting.py): each
    hunting pattern on every float input (near_overflow only where a range reaches
    |x| >= 80), then each correlation of inputs that the spec's inputs allow."""
    out = []
    reach = any(max(abs(t.bounds[0]), abs(t.bounds[1])) >= 80 for t in spec.inputs.values()
                if t.dtype in ("f32", "bf16"))
    for i, pattern in enumerate(HUNT_PATTERNS):
        if pattern == "near_overflow" and not reach:
            continue
        out.append(_all_inputs(spec, pattern, "random", 2000 + i))
    for i, link in enumerate(LINKS):
        case = _all_inputs(spec, "uniform", "random", 3000 + i)
        first = next(iter(case))
        case[first] = Recipe(case[first].pattern, case[first].seed, link=link)
        if link_applies(spec, link):
            out.append(case)
    return out


FAMILIES = FLOAT_FAMILIES + BOOL_FAMILIES + JOINT_FAMILIES
# of the examples, at most this share goes to the family cases (the rest is drawn)
FAMILY_SHARE = 0.3


def family_recipes(spec: Spec, seed: int, count: int) -> list[dict[str, Recipe]]:
    """Up to `count` family cases (families.py), the other inputs uniform (random masks):
    each family on each input that it fits at every value of its parameter, from one
    the seed rotates, in an order that spreads over the range (_strata; "scaled" also at
    its deepest scales, subnormal values, from the first round); every float input tiny
    at once; each link on each pair it fits; and every float input at its corners at
    once (plain, then under the links, opposite ones first). Taken family by family,
    each on the next input in turn, so a short budget still sees every family once, on
    inputs the seed rotates, and a long one sweeps each family's parameter."""
    plain = {n: Recipe("random" if t.dtype == "bool" else "uniform", 4000 + 100 * j)
             for j, (n, t) in enumerate(spec.inputs.items())}
    rounds: dict[str, dict[int, list[dict[str, Recipe]]]] = {}
    for j, (name, t) in enumerate(spec.inputs.items()):
        for i, family in enumerate(BOOL_FAMILIES if t.dtype == "bool" else FLOAT_FAMILIES):
            values = parameters(family, t)
            start = (seed * 7 + 3 * j + i) % len(values)
            picks = [values[(start + r) % len(values)] for r in _strata(len(values))]
            for k, value in enumerate(picks):
                case = dict(plain, **{name: Recipe(family, 5000 + 100 * j + 10 * i + seed
                                                   + (k + 1 if k else 0), value)})
                rounds.setdefault(family, {}).setdefault(k, []).append(case)
            if family == "scaled":  # down to the subnormals in the first round too
                deep = dict(plain, **{name: Recipe(family, 5001 + 100 * j + 10 * i + seed,
                                                   values[-1 - (seed + j) % 3])})
                rounds.setdefault("scaled deep", {}).setdefault(0, []).append(deep)
    # a family's queue: its first parameter on each input (rotated by the seed), then
    # its next parameter on each input, ... so a long budget sweeps every parameter
    by_family = {family: [case for k in sorted(ks) for case in _rotated(ks[k], seed)]
                 for family, ks in rounds.items()}
    floats = [n for n, t in spec.inputs.items() if t.dtype in ("f32", "bf16")]
    if len(floats) > 1:  # every float input tiny at once: products on the subnormal
        # grid (families.product_scale), then a term lost between them
        scale = product_scale([spec.inputs[name] for name in floats])
        products = dict(plain, **{name: Recipe("scaled", 5910 + j + seed, scale)
                                  for j, name in enumerate(floats)})
        case = dict(plain)
        for j, name in enumerate(floats):
            values = parameters("scaled", spec.inputs[name])
            case[name] = Recipe("scaled", 5900 + j + seed, values[-2 - seed % 4])
        by_family["all scaled"] = [products, case]
    for i, link in enumerate(FAMILY_LINKS):
        for p in range(len(link_pairs(spec, link))):
            case = dict(plain)
            first = next(iter(case))
            case[first] = Recipe(case[first].pattern, 6000 + 10 * i + p + seed,
                                 link=f"{link}:{p}")
            by_family.setdefault(link, []).append(case)
    if floats:  # every float input at its corners at once, plain, then opposite links
        # first: extremes that meet (queued last, so the other families keep their turn)
        corners = dict(plain, **{name: Recipe("corners", 5950 + j + seed)
                                 for j, name in enumerate(floats)})
        cases = [corners]
        for link in sorted(FAMILY_LINKS, key=lambda name: "opposite" not in name):
            for p in range(len(link_pairs(spec, link))):
                first = next(iter(corners))
                cases.append(dict(corners, **{first: Recipe(
                    corners[first].pattern, corners[first].seed, link=f"{link}:{p}")}))
        by_family["all at corners"] = cases
    queues = [cases if name in rounds or name == "all at corners" else _rotated(cases, seed)
              for name, cases in by_family.items()]
    out: list[dict[str, Recipe]] = []
    while len(out) < count and any(queues):
        for cases in queues:  # each family once per round
            if cases and len(out) < count:
                out.append(cases.pop(0))
    return out


def _strata(n: int) -> list[int]:
    """0 .. n-1 in an order whose every prefix spreads over the whole range (bit-reversed
    counting: 0, n/2, n/4, 3n/4, ...): a budget that reaches a few of a family's
    parameter values reaches values far apart, not neighbours."""
    bits = max(1, (n - 1).bit_length())
    return sorted(range(n), key=lambda i: int(f"{i:0{bits}b}"[::-1], 2))


def _rotated(cases: list, seed: int) -> list:
    return cases[seed % len(cases):] + cases[:seed % len(cases)]


def _all_inputs(spec: Spec, float_pattern: str, bool_pattern: str,
                seed: int) -> dict[str, Recipe]:
    return {n: Recipe(bool_pattern if t.dtype == "bool" else float_pattern, seed + 100 * j)
            for j, (n, t) in enumerate(spec.inputs.items())}


def build_inputs(spec: Spec, recipes: dict[str, Recipe],
                 boundaries: Boundaries | None = None) -> dict[str, np.ndarray]:
    """Expand recipes into arrays in each input's dtype, inside its [low, high];
    boundaries (hunting.kernel_boundaries) place the hunting patterns' extremes."""
    out = {n: build_tensor(spec.inputs[n], r, (boundaries or {}).get(n))
           for n, r in recipes.items()}
    for r in recipes.values():
        if r.link:
            rng = np.random.default_rng(r.seed + 1)
            linked = (apply_link(spec, out, r.link, rng)
                      if r.link.partition(":")[0] in FAMILY_LINKS
                      else link_inputs(spec, out, r.link, rng))
            for n, x in linked.items():
                if x is not out[n]:
                    t = spec.inputs[n]
                    out[n] = x if t.dtype == "bool" else representable(
                        np.asarray(x, np.float64), t.dtype, *t.bounds)
    return out


def build_tensor(t: TensorSpec, r: Recipe, cuts=None) -> np.ndarray:
    rng = np.random.default_rng(r.seed)
    shape = t.shape
    rows = shape[0] if len(shape) > 1 else 1
    if r.pattern in FAMILIES:
        x = family_tensor(t, r.pattern, r.fraction, rng)
        return x if t.dtype == "bool" else representable(x, t.dtype, *t.bounds)
    if t.dtype == "bool":
        return _bool_tensor(r, rng, shape)
    lo, hi = t.bounds
    if t.dtype == "i32":
        lo, hi = int(np.ceil(lo)), int(np.floor(hi))
    if r.pattern in HUNT_PATTERNS:
        x = hunt_tensor(r.pattern, rng, shape, lo, hi, cuts)
        return representable(x, t.dtype, lo, hi)
    p = r.pattern
    if p in MAKE_THEIR_OWN:  # skip the draws of a uniform tensor they do not use (one
        # 64-bit output per float64): 6 ms of an mla_decode c_kv, the same inputs after
        rng.bit_generator.advance(int(np.prod(shape)))
    else:
        x = rng.uniform(lo, hi, shape)
    if p == "constant_rows":
        pick = rng.random(rows) < r.fraction
        x.reshape(rows, -1)[pick] = rng.uniform(lo, hi, (int(pick.sum()), 1))
    elif p == "extremes":
        x = np.where(rng.random(shape) < r.fraction, lo, hi).astype(np.float64)
    elif p == "zeros":
        return _constant(shape, _clip(0.0, lo, hi), t.dtype, lo, hi)
    elif p == "outlier":
        x = rng.uniform(lo, hi, shape) * 0.01 + _clip(0.0, lo, hi)
        x = np.clip(x, lo, hi)
        x.flat[rng.integers(x.size)] = hi if rng.random() < 0.5 else lo
    elif p == "one_hot":
        base = _clip(0.0, lo, hi)
        x = np.full(shape, base)
        fr = x.reshape(rows, -1)
        fr[np.arange(rows), rng.integers(fr.shape[1], size=rows)] = hi
    elif p == "ties":
        levels = rng.uniform(lo, hi, 3)
        x = levels[rng.integers(3, size=shape)]
    elif p == "small_ints":
        x = np.clip(rng.integers(-3, 4, shape).astype(np.float64), lo, hi)
    elif p == "constant":
        return _constant(shape, rng.uniform(lo, hi), t.dtype, lo, hi)
    return representable(np.asarray(x, dtype=np.float64).reshape(shape), t.dtype, lo, hi)


def _bool_tensor(r: Recipe, rng, shape) -> np.ndarray:
    rows = shape[0] if len(shape) > 1 else 1
    p = r.pattern
    if p == "all_true":
        return np.ones(shape, bool)
    if p == "all_false":
        return np.zeros(shape, bool)
    x = rng.random(shape) < r.fraction
    fr = x.reshape(rows, -1) if len(shape) > 1 else x.reshape(1, -1)
    if p == "all_false_rows":
        fr[rng.random(fr.shape[0]) < 0.5] = False
    elif p == "all_true_rows":
        fr[rng.random(fr.shape[0]) < 0.5] = True
    elif p == "single_true":
        fr[:] = False
        fr[np.arange(fr.shape[0]), rng.integers(fr.shape[1], size=fr.shape[0])] = True
    return fr.reshape(shape)


def _constant(shape, value: float, dtype: str, lo: float, hi: float) -> np.ndarray:
    """np.full of one value rounded as representable rounds it: rounding once, not per
    element."""
    y = representable(np.array([value], np.float64), dtype, lo, hi)
    return np.full(shape, y[0], y.dtype)


def _clip(v: float, lo: float, hi: float) -> float:
    return float(min(max(v, lo), hi))


def representable(x: np.ndarray, dtype: str, lo: float, hi: float) -> np.ndarray:
    """Round to the dtype, keeping every value inside [low, high]."""
    native = native_dtype(dtype)
    if dtype == "i32":
        return np.clip(np.rint(x), lo, hi).astype(native)
    y = cast(x, native)
    if x.size == 0:
        return y
    # rounding is monotone: no element rounds past where the largest and smallest round
    top, bottom = cast(np.array([np.max(x), np.min(x)], x.dtype), native).astype(np.float64)
    if top <= hi and bottom >= lo:
        return y
    back = cast(y, np.float64)
    # rounding may step just outside the range: step back towards the inside
    too_high, too_low = back > hi, back < lo
    if too_high.any() or too_low.any():
        inside = np.clip(back, lo, hi)
        y = np.where(too_high, np.nextafter(inside.astype(native), native.type(-np.inf)), y)
        y = np.where(too_low, np.nextafter(inside.astype(native), native.type(np.inf)), y)
        y = y.astype(native)
    return y


NEARBY = 2.0**-16  # how far nearby_inputs moves an element, relative to its value


def nearby_inputs(spec: Spec, inputs: dict[str, np.ndarray], seed: int,
                  spread: float = NEARBY) -> dict[str, np.ndarray]:
    """The same inputs with every float element moved at random by up to `spread` of its
    value (f32: 128 ulps), or by up to 2 ulps where its dtype is coarser (bf16), kept
    inside [low, high]; int and bool inputs unchanged."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, x in inputs.items():
        t = spec.inputs[name]
        if t.dtype not in ("f32", "bf16"):
            out[name] = x
            continue
        unit = 2.0**-23 if t.dtype == "f32" else 2.0**-7
        x64 = np.asarray(x, np.float64)
        moved = x64 * (1.0 + max(spread, 2 * unit) * rng.uniform(-1, 1, x64.shape))
        out[name] = representable(moved, t.dtype, *t.bounds)
    return out


def random_spec_inputs(spec: Spec, seed: int) -> dict[str, np.ndarray]:
    """Plain uniform inputs (random masks for bool): the common case."""
    return build_inputs(spec, {n: Recipe("random" if t.dtype == "bool" else "uniform",
                                         seed + i) for i, (n, t) in enumerate(spec.inputs.items())})
