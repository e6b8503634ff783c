"""swiglu: the SwiGLU gate silu(gate) * up, with silu(g) = g / (1 + exp(-g))."""
import numpy as np

from stochopt import spec, tensor


@spec(inputs={"gate": tensor("f32", (256, 2048), low=-8.0, high=8.0),
              "up": tensor("f32", (256, 2048), low=-4.0, high=4.0)})
def swiglu(gate, up):
    return gate / (1.0 + np.exp(-gate)) * up
