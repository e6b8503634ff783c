"""The fast bf16 casts give ml_dtypes' bits: every bf16 widened, and float32 and float64
values of every kind narrowed (random bit patterns, ties, values a hair off a tie that
float32 rounds onto it, subnormals, overflow, infinities, NaNs)."""

import numpy as np
import pytest

from stochopt.backend.casts import cast
from stochopt.leir.types import bfloat16

BF16 = bfloat16()
# numpy warns of casts that overflow and of signalling NaNs: both are cases here
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def same_bits(fast: np.ndarray, slow: np.ndarray) -> bool:
    assert fast.dtype == slow.dtype and fast.shape == slow.shape
    nan = np.isnan(slow.astype(np.float32))
    return bool(np.array_equal(np.isnan(fast.astype(np.float32)), nan)
                and np.array_equal(fast.view(np.uint16)[~nan], slow.view(np.uint16)[~nan]))


@pytest.mark.parametrize("wide", [np.float32, np.float64])
def test_every_bf16_widens_exactly(wide):
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(BF16)
    fast, slow = cast(every, wide), every.astype(wide)
    assert fast.dtype == np.dtype(wide)
    assert np.array_equal(fast, slow, equal_nan=True)


def test_float32_of_every_kind_narrows_as_ml_dtypes_does():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    # every tie and its neighbours, at every exponent, both signs
    ties = (rng.integers(0, 1 << 16, 1 << 16, dtype=np.uint32) << 16) | 0x8000
    x = np.concatenate([bits, ties, ties - 1, ties + 1]).view(np.float32)
    assert same_bits(cast(x, BF16), x.astype(BF16))


def test_float64_of_every_kind_narrows_as_ml_dtypes_does():
    rng = np.random.default_rng(1)
    # random float64 bit patterns, and values spread over the whole float32 range
    bits = rng.integers(0, 1 << 63, 1 << 19, dtype=np.uint64) | (
        rng.integers(0, 2, 1 << 19, dtype=np.uint64) << 63)
    spread = rng.standard_normal(1 << 19) * 2.0 ** rng.integers(-160, 130, 1 << 19)
    # bf16 ties (exact), and a hair to either side: float32 rounds those onto the tie
    tie = ((rng.integers(0, 1 << 16, 1 << 16, dtype=np.uint32) << 16) | 0x8000)
    tie = tie.view(np.float32).astype(np.float64)
    tie = tie[np.isfinite(tie)]
    hair = np.abs(tie) * 2.0**-40 + 2.0**-170
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 3.4e38, 3.39e38,
                        1e300, -1e300, 5e-324, 2.0**-126, 2.0**-133, 2.0**-134,
                        3 * 2.0**-135, 2.0**-149, 2.0**-150])
    x = np.concatenate([bits.view(np.float64), spread, tie, tie + hair, tie - hair,
                        special])
    assert same_bits(cast(x, BF16), x.astype(BF16))
    strided = x[: len(x) // 7 * 7].reshape(-1, 7)[:, ::2]
    assert same_bits(cast(strided, BF16), strided.astype(BF16))


def test_other_casts_are_numpys():
    x = np.array([[1.5, -2.25], [np.inf, 0.0]])
    assert cast(x, np.float64) is x
    assert cast(x, np.float32).dtype == np.float32
    assert np.array_equal(cast(np.array([1, 0]), np.bool_), [True, False])
    assert cast(np.float32(2.5), BF16).shape == ()
