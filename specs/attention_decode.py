"""attention_decode: one query token, 8 heads sharing one K/V cache of 2048 positions
(multi-query attention): softmax(q k^T / sqrt(d)) v."""
import math

import numpy as np

from stochopt import spec, tensor


@spec(inputs={"q": tensor("bf16", (8, 128), low=-2.0, high=2.0),
              "k": tensor("bf16", (2048, 128), low=-2.0, high=2.0),
              "v": tensor("bf16", (2048, 128), low=-2.0, high=2.0)})
def attention_decode(q, k, v):
    s = (q @ k.T) / math.sqrt(128)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p = p / p.sum(axis=1, keepdims=True)
    return p @ v
