"""masked_mean_bf16: the mean of the kept values of each row (0 where a row keeps
nothing), as bf16: a count of up to 1024 kept elements per row."""

import numpy as np

from stochopt import spec, tensor


@spec(inputs={"x": tensor("f32", (32, 1024), low=-4.0, high=4.0),
              "mask": tensor("bool", (32, 1024))},
      output=tensor("bf16", (32, 1)))
def masked_mean_bf16(x, mask):
    total = np.where(mask, x, 0.0).sum(axis=1, keepdims=True)
    count = mask.sum(axis=1, keepdims=True)
    return total / np.maximum(count, 1)
