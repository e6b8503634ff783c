"""matmul: bf16 inputs, f32 result (accumulated in f32)."""
from stochopt import spec, tensor


@spec(inputs={"a": tensor("bf16", (256, 512), low=-2.0, high=2.0),
              "b": tensor("bf16", (512, 256), low=-2.0, high=2.0)},
      output=tensor("f32", (256, 256)))
def matmul(a, b):
    return a @ b
