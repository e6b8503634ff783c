"""masked_softmax_wide: softmax over the kept logits in [-60, 60], the others filled with
-1e30 (a row that keeps nothing is uniform). Shifting by a max that includes dropped
logits underflows every kept exp to 0 (a spread past 103 in f32)."""
import numpy as np

from stochopt import spec, tensor


@spec(inputs={"x": tensor("f32", (32, 256), low=-60.0, high=60.0),
              "mask": tensor("bool", (32, 256))})
def masked_softmax_wide(x, mask):
    s = np.where(mask, x, -1e30)
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)
