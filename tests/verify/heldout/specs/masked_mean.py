"""masked_mean: the mean of the kept bf16 values of each row, 0 for a row that keeps
nothing; a row of 1,024 positions, so a random mask of any drawn density keeps tens to
hundreds of them, never two or three."""
import numpy as np

from stochopt import spec, tensor


@spec(inputs={"x": tensor("bf16", (16, 1024), low=-4.0, high=4.0),
              "mask": tensor("bool", (16, 1024))},
      output=tensor("f32", (16, 1)))
def masked_mean(x, mask):
    kept = np.where(mask, 1.0, 0.0)
    total = np.where(mask, x, 0.0).sum(axis=1, keepdims=True)
    return total / np.maximum(kept.sum(axis=1, keepdims=True), 1.0)
