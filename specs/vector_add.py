"""vector_add: z = x + y on one million f32 elements; pure DRAM traffic."""
from stochopt import spec, tensor

N = 1 << 20


@spec(inputs={"x": tensor("f32", (N,)), "y": tensor("f32", (N,))})
def vector_add(x, y):
    return x + y
