"""matmul_bias_gelu: gelu(x @ w + b), bf16 activations and weights, f32 bias and result."""
import math

import numpy as np

from stochopt import spec, tensor


@spec(inputs={"x": tensor("bf16", (128, 512), low=-1.0, high=1.0),
              "w": tensor("bf16", (512, 512), low=-0.25, high=0.25),
              "b": tensor("f32", (512,), low=-1.0, high=1.0)})
def matmul_bias_gelu(x, w, b):
    h = x @ w + b
    c = math.sqrt(2.0 / math.pi)
    return 0.5 * h * (1.0 + np.tanh(c * (h + 0.044715 * h * h * h)))
