"""masked_scale: x * w where the mask keeps an element, the sentinel -1e30 elsewhere: an
elementwise output whose rows hold huge values next to small ones."""
import numpy as np

from stochopt import spec, tensor


@spec(inputs={"x": tensor("f32", (32, 256), low=-4.0, high=4.0),
              "w": tensor("f32", (256,), low=0.5, high=1.5),
              "mask": tensor("bool", (32, 256))})
def masked_scale(x, w, mask):
    return np.where(mask, x * w, -1e30)
