"""rotary: rotary position embedding on the two halves of each head dimension."""
import numpy as np

from stochopt import spec, tensor


@spec(inputs={"x": tensor("f32", (256, 128), low=-4.0, high=4.0),
              "cos": tensor("f32", (256, 64), low=-1.0, high=1.0),
              "sin": tensor("f32", (256, 64), low=-1.0, high=1.0)})
def rotary(x, cos, sin):
    x1 = x[:, :64]
    x2 = x[:, 64:]
    return np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=1)
