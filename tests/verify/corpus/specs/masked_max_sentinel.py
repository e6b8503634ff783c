"""masked_max_sentinel: the row max of the kept scores, -1e30 (a sentinel, not -inf) for
a row whose mask keeps nothing: one such row puts a huge value in the output."""
import numpy as np

from stochopt import spec, tensor


@spec(inputs={"x": tensor("f32", (64, 256), low=-50.0, high=50.0),
              "mask": tensor("bool", (64, 256))})
def masked_max_sentinel(x, mask):
    return np.where(mask, x, -1e30).max(axis=1, keepdims=True)
