"""l2_normalize: each row divided by its L2 norm, floored at 1e-12 as torch's
F.normalize does (a zero row stays zero)."""
import numpy as np

from stochopt import spec, tensor


@spec(inputs={"x": tensor("f32", (64, 256), low=-100.0, high=100.0)})
def l2_normalize(x):
    norm = np.sqrt((x * x).sum(axis=1, keepdims=True))
    return x / np.maximum(norm, 1e-12)
