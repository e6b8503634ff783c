"""attention_decode_long: attention_decode over a cache of 4096 positions instead of 2048.

One query token, 8 heads sharing one K/V cache (multi-query attention):
softmax(q k^T / sqrt(d)) v, with twice the positions of attention_decode.
"""
import math

import numpy as np

from stochopt import spec, tensor


@spec(inputs={"q": tensor("bf16", (8, 128), low=-2.0, high=2.0),
              "k": tensor("bf16", (4096, 128), low=-2.0, high=2.0),
              "v": tensor("bf16", (4096, 128), low=-2.0, high=2.0)})
def attention_decode_long(q, k, v):
    s = (q @ k.T) / math.sqrt(128)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p = p / p.sum(axis=1, keepdims=True)
    return p @ v
