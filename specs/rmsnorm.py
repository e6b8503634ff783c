"""rmsnorm: x / sqrt(mean(x**2) + eps) * w over the last axis (LLaMA-style)."""
import numpy as np

from stochopt import spec, tensor


@spec(inputs={"x": tensor("f32", (256, 2048), low=-4.0, high=4.0),
              "w": tensor("f32", (2048,), low=0.5, high=1.5)})
def rmsnorm(x, w):
    ms = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(ms + 1e-6) * w
