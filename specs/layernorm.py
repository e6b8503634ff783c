"""layernorm: (x - mean) / sqrt(var + eps) * gamma + beta over the last axis."""
import numpy as np

from stochopt import spec, tensor


@spec(inputs={"x": tensor("f32", (256, 2048), low=-4.0, high=4.0),
              "gamma": tensor("f32", (2048,), low=0.5, high=1.5),
              "beta": tensor("f32", (2048,), low=-1.0, high=1.0)})
def layernorm(x, gamma, beta):
    mu = x.mean(axis=-1, keepdims=True)
    d = x - mu
    var = (d * d).mean(axis=-1, keepdims=True)
    return d / np.sqrt(var + 1e-5) * gamma + beta
