"""hardmax: softmax at zero temperature, 1/k at each of the k positions that tie for
the row max and 0 elsewhere; 264 positions a row (256 and 8 of padding), so k can pass
256 only on a row that is nearly constant."""
import numpy as np

from stochopt import spec, tensor


@spec(inputs={"x": tensor("f32", (64, 264), low=-10.0, high=10.0)})
def hardmax(x):
    top = np.where(x == x.max(axis=1, keepdims=True), 1.0, 0.0)
    return top / top.sum(axis=1, keepdims=True)
