"""row_variance: the variance of each row over values in [-1000, 1000], a wide range
where a large common offset makes one-pass formulas cancel."""
from stochopt import spec, tensor


@spec(inputs={"x": tensor("f32", (64, 512), low=-1000.0, high=1000.0)})
def row_variance(x):
    d = x - x.mean(axis=1, keepdims=True)
    return (d * d).mean(axis=1, keepdims=True)
