"""The legal input on which each held-out wrong kernel is wrong, built from a seed.

    python tests/verify/heldout/witnesses.py            # writes witness/KERNEL.npz for all
    python tests/verify/heldout/witnesses.py NAME ...   # only these kernels (file stems)
    python -m stochopt verify tests/verify/heldout/wrong/NAME.leir \\
        --inputs tests/verify/heldout/witness/NAME.npz  # replays the failure

Each builder returns one array per spec input in the input's dtype; every array is
checked to lie inside the spec's declared [low, high] and to be exact in its dtype
before it is saved (bf16 arrays are saved as float32, which holds them exactly), so a
witness is always a legal input. They are written by hand for kinds of input that the
verifier's generators do not make: tiny and subnormal values, near-constant rows,
masks of a few kept positions or all but one, padding and causal masks, counts past
256, a query close to one key, an intermediate exactly at a kernel's constant.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

import ml_dtypes
import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO))  # this checkout's stochopt

from stochopt.leir.types import native_dtype  # noqa: E402
from stochopt.spec import Spec, load_spec  # noqa: E402

BF16 = ml_dtypes.bfloat16
Builder = Callable[[np.random.Generator], dict[str, np.ndarray]]
BUILDERS: dict[str, Builder] = {}


def builder(name: str):
    def register(fn: Builder) -> Builder:
        BUILDERS[name] = fn
        return fn
    return register


def f32(x) -> np.ndarray:
    return np.asarray(x, np.float32)


def bf16(x) -> np.ndarray:
    return np.asarray(x, np.float64).astype(BF16)


def background(rng: np.random.Generator, shape: tuple[int, ...], low: float,
               high: float) -> np.ndarray:
    """Ordinary values around the rows that make a witness: one uniform row repeated
    down the first axis, so the saved file stays small (random f32 does not compress)."""
    return np.repeat(rng.uniform(low, high, (1, *shape[1:])), shape[0], axis=0)


# ---------------------------------------------------------------------------------
# tiny and subnormal magnitudes
# ---------------------------------------------------------------------------------

@builder("rmsnorm__zero_rows_skipped")
def _(rng):
    x = background(rng, (256, 2048), -4, 4)
    # rows of values near 1e-24: x*x underflows to 0 in f32, the spec's output is ~1e-21
    x[:8] = rng.choice([-1.0, 1.0], (8, 2048)) * rng.uniform(1e-24, 2e-24, (8, 2048))
    return {"x": f32(x), "w": f32(rng.uniform(0.5, 1.5, 2048))}


@builder("gelu__subnormal_inputs_flushed")
def _(rng):
    x = background(rng, (512, 1024), -6, 6)
    x[0] = rng.choice([-1.0, 1.0], 1024) * rng.uniform(1e-40, 1e-38, 1024)  # subnormal
    return {"x": f32(x)}


@builder("l2_normalize__eps_squared_under_rsqrt")
def _(rng):
    x = background(rng, (64, 256), -100, 100)
    x[:4] = rng.choice([-1e-13, 1e-13], (4, 256))  # norm 1.6e-12, near the 1e-12 floor
    return {"x": f32(x)}


# ---------------------------------------------------------------------------------
# masks of densities the generators skip, and of structure (padding, causal)
# ---------------------------------------------------------------------------------

@builder("masked_mean__sparse_rows_summed_in_bf16")
def _(rng):
    x = bf16(rng.uniform(-4, 4, (16, 1024)))
    mask = rng.random((16, 1024)) < 0.5
    for r in range(16):  # 2 to 9 kept positions a row
        mask[r] = False
        mask[r, rng.choice(1024, 2 + r // 2, replace=False)] = True
    return {"x": x, "mask": mask}


@builder("masked_mean__full_tile_fast_path_off_by_one")
def _(rng):
    x = bf16(rng.uniform(-4, 4, (16, 1024)))
    lengths = rng.integers(513, 1024, 16)  # padding masks: the first `length` positions
    return {"x": x, "mask": np.arange(1024)[None, :] < lengths[:, None]}


@builder("masked_softmax_wide__tile_missing_one_taken_as_full")
def _(rng):
    x = rng.uniform(-60, 60, (32, 256))
    mask = np.ones((32, 256), bool)
    for r in range(32):  # all but one position kept, the dropped one in either tile
        mask[r, rng.integers(256)] = False
    return {"x": f32(x), "mask": mask}


@builder("row_variance__integer_rows_through_bf16")
def _(rng):
    x = background(rng, (64, 512), -1000, 1000)
    x[:8] = rng.integers(257, 1001, (8, 512))  # integer rows past bf16's exact integers
    return {"x": f32(x)}


# ---------------------------------------------------------------------------------
# an intermediate in a narrow band near a constant of the kernel
# ---------------------------------------------------------------------------------

@builder("layernorm__near_constant_rows_as_beta")
def _(rng):
    x = background(rng, (256, 2048), -4, 4)
    # nearly constant rows: a common value and a spread of 1e-3 (variance about 8e-8)
    x[:8] = rng.uniform(-3, 3, (8, 1)) + rng.uniform(-5e-4, 5e-4, (8, 2048))
    return {"x": f32(x), "gamma": f32(rng.uniform(0.5, 1.5, 2048)),
            "beta": f32(rng.uniform(-1, 1, 2048))}


@builder("matmul_bias_gelu__tanh_split_misses_its_joint")
def _(rng):
    x = background(rng, (128, 512), -1, 1)
    x[:4] = 0.0  # rows of zeros: h is the bias exactly
    b = rng.uniform(-1, 1, 512)
    # the f32 bias for which the kernel's f32 z = 0.7978845608 (h + 0.044715 h^3) is
    # exactly 0.5 (found by scanning the f32 values around the root)
    b[::16] = 0.6161952018737793
    return {"x": bf16(x), "w": bf16(background(rng, (512, 512), -0.25, 0.25)), "b": f32(b)}


@builder("softmax__near_uniform_rows_as_uniform")
def _(rng):
    x = background(rng, (128, 1024), -8, 8)
    # nearly constant rows: a common value and a spread just under 1e-3
    x[:8] = rng.uniform(-7, 7, (8, 1)) + rng.uniform(0, 9.5e-4, (8, 1024))
    return {"x": f32(x)}


# ---------------------------------------------------------------------------------
# a select between tiles
# ---------------------------------------------------------------------------------

@builder("softmax_wide__negligible_tile_left_out")
def _(rng):
    x = background(rng, (64, 512), -100, 100)
    # a lone peak in the first tile, the second tile a dense cluster 12.5 below it
    x[:8, :256] = -100.0
    x[:8, 7] = 0.0
    x[:8, 256:] = -12.5 + rng.uniform(-0.05, 0.05, (8, 256))
    return {"x": f32(x)}


# ---------------------------------------------------------------------------------
# integer-valued quantities in a float type
# ---------------------------------------------------------------------------------

@builder("hardmax__tie_count_in_bf16")
def _(rng):
    x = background(rng, (64, 264), -10, 10)
    # nearly constant rows: 257 positions tie for the max, 7 lie below it
    x[:8] = 3.0
    for r in range(8):
        x[r, rng.choice(264, 7, replace=False)] = rng.uniform(-10, 2.9, 7)
    return {"x": f32(x)}


# ---------------------------------------------------------------------------------
# inputs correlated with each other
# ---------------------------------------------------------------------------------

@builder("attention_decode__one_hot_fast_path")
def _(rng):
    q = 2.0 * rng.choice([-1.0, 1.0], (8, 128))  # corners of the range
    k = bf16(background(rng, (2048, 128), -2, 2)).astype(np.float64)
    v = background(rng, (2048, 128), -2, 2)
    scale = np.sqrt(128)
    for i, j in enumerate(rng.choice(2048, 8, replace=False)):
        # key j points along query i, scaled so that its probability is about 1 - 5e-4
        k[j] = 0.0
        rest = np.log(np.exp(q[i] @ k.T / scale).sum())
        alpha = (rest + np.log(2000.0)) * scale / (q[i] @ q[i])
        k[j] = bf16(alpha * q[i]).astype(np.float64)
        v[j] = rng.uniform(-2, 2, 128)  # a value row of its own
    return {"q": bf16(q), "k": bf16(k), "v": bf16(v)}


@builder("attention_scores__fill_at_the_least_score")
def _(rng):
    q = 2.0 * rng.choice([-1.0, 1.0], (2, 32, 16))  # corners of the range
    k = np.repeat(background(rng, (2048, 16), -2, 2)[None], 2, axis=0)
    mask = rng.random((2, 32, 2048)) < 0.5
    for h in range(2):
        for i in range(4):  # rows whose kept keys all point exactly away from the query
            keys = rng.choice(2048, 3, replace=False)
            k[h, keys] = -q[h, i]
            mask[h, i] = False
            mask[h, i, keys] = True
    return {"q": bf16(q), "k": bf16(k), "mask": mask}


# ---------------------------------------------------------------------------------
# writing, checking
# ---------------------------------------------------------------------------------

def kernel_spec(name: str) -> Spec:
    text = (HERE / "wrong" / f"{name}.leir").read_text()
    return load_spec(REPO / re.match(r"# spec: (\S+)\n", text).group(1))


def legal(spec: Spec, inputs: dict[str, np.ndarray]) -> None:
    """Raise unless every input has the spec's shape and dtype and lies in its range."""
    assert set(inputs) == set(spec.inputs), (sorted(inputs), sorted(spec.inputs))
    for name, t in spec.inputs.items():
        x = inputs[name]
        assert x.shape == t.shape, (name, x.shape, t.shape)
        assert x.dtype == native_dtype(t.dtype), (name, x.dtype, t.dtype)
        if t.dtype != "bool":
            v = x.astype(np.float64)
            assert np.isfinite(v).all(), name
            assert v.min() >= t.bounds[0] and v.max() <= t.bounds[1], (name, t.bounds)


def build(name: str, seed: int = 0) -> dict[str, np.ndarray]:
    inputs = BUILDERS[name](np.random.default_rng(seed))
    legal(kernel_spec(name), inputs)
    return inputs


def save(name: str, inputs: dict[str, np.ndarray], folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.npz"
    np.savez_compressed(path, **{n: (x.astype(np.float32) if x.dtype == BF16 else x)
                                 for n, x in inputs.items()})
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="kernel file stems (default: all)")
    parser.add_argument("-o", "--output", type=Path, default=HERE / "witness")
    args = parser.parse_args()
    for name in args.names or sorted(BUILDERS):
        print(f"wrote {save(name, build(name), args.output)}")


if __name__ == "__main__":
    main()
