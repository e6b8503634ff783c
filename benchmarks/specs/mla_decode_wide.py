"""mla_decode_wide: mla_decode with 32 heads instead of 16, absorbed weights.

The same multi-head latent attention decode as mla_decode (keys and values share the
latent c_kv (512) plus a rotary part k_pe (64), over 4096 cached positions) with twice
the heads: the plan that wins on mla_decode is the first thing to try here.
"""
import math

import numpy as np

from stochopt import spec, tensor


@spec(inputs={"q_nope": tensor("bf16", (32, 512), low=-1.0, high=1.0),
              "q_pe": tensor("bf16", (32, 64), low=-1.0, high=1.0),
              "c_kv": tensor("bf16", (4096, 512), low=-1.0, high=1.0),
              "k_pe": tensor("bf16", (4096, 64), low=-1.0, high=1.0)},
      output=tensor("bf16", (32, 512)))
def mla_decode_wide(q_nope, q_pe, c_kv, k_pe):
    s = (q_nope @ c_kv.T + q_pe @ k_pe.T) / math.sqrt(192)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p = p / p.sum(axis=1, keepdims=True)
    return p @ c_kv
