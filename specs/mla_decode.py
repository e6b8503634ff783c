"""mla_decode: DeepSeek-style multi-head latent attention decode, absorbed weights.

16 heads attend over 4096 cached positions whose keys and values share the latent
c_kv (512) plus a rotary part k_pe (64). Bound by DRAM: a plain kernel reads c_kv twice,
a good one reads it once and keeps every DRAM group busy.
"""
import math

import numpy as np

from stochopt import spec, tensor


@spec(inputs={"q_nope": tensor("bf16", (16, 512), low=-1.0, high=1.0),
              "q_pe": tensor("bf16", (16, 64), low=-1.0, high=1.0),
              "c_kv": tensor("bf16", (4096, 512), low=-1.0, high=1.0),
              "k_pe": tensor("bf16", (4096, 64), low=-1.0, high=1.0)},
      output=tensor("bf16", (16, 512)))
def mla_decode(q_nope, q_pe, c_kv, k_pe):
    s = (q_nope @ c_kv.T + q_pe @ k_pe.T) / math.sqrt(192)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p = p / p.sum(axis=1, keepdims=True)
    return p @ c_kv
