"""gelu: the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
import math

import numpy as np

from stochopt import spec, tensor


@spec(inputs={"x": tensor("f32", (512, 1024), low=-6.0, high=6.0)})
def gelu(x):
    c = math.sqrt(2.0 / math.pi)
    return 0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * x * x * x)))
