"""attention_scores: per head, q k^T scaled, masked to -inf, then the row max.

The LEIR example of the seed article: the front half of softmax in attention, for two
heads of 16-dim keys over 2048 cached positions. Rows whose mask is all false give -inf.
"""
import numpy as np

from stochopt import spec, tensor


@spec(inputs={"q": tensor("bf16", (2, 32, 16), low=-2.0, high=2.0),
              "k": tensor("bf16", (2, 2048, 16), low=-2.0, high=2.0),
              "mask": tensor("bool", (2, 32, 2048))})
def attention_scores(q, k, mask):
    s = (q @ np.transpose(k, (0, 2, 1))) * 0.25
    s = np.where(mask, s, -np.inf)
    return s.max(axis=2, keepdims=True)
