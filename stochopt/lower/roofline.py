"""The roofline of a spec: the least cycles any kernel computing it can take."""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from stochopt.backend.cost import peak_rates, roofline_cycles
from stochopt.backend.machine import load_machine
from stochopt.leir.types import itemsize
from stochopt.lower.trace import TNode, trace
from stochopt.spec import Spec

FREE_OPS = ("transpose", "reshape", "slice", "input")


@dataclass(frozen=True)
class SpecRoofline:
    cycles: int
    dram_bytes: int          # inputs read once + output written once
    flops: dict[str, int]    # "matrix": 2MNK per matmul; "vector": one per element
    bound: str               # "dram" or "compute"


def spec_roofline(spec: Spec, machine=None) -> SpecRoofline:
    """Bytes of inputs and output at their dtypes over DRAM bandwidth, and the traced
    graph's FLOPs over the chip's peak rates; the larger wins."""
    machine = load_machine(machine)
    _, out = trace(spec)
    flops = {"vector": 0, "matrix": 0}
    seen: set[int] = set()
    stack = [out]
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        stack.extend(a for a in t.args if isinstance(a, TNode))
        if t.op == "matmul":
            flops["matrix"] += 2 * prod(t.shape) * t.args[0].shape[-1]
        elif t.op.startswith("reduce_"):
            flops["vector"] += prod(t.args[0].shape)
        elif t.op not in FREE_OPS and t.op != "concat":
            flops["vector"] += prod(t.shape)
    nbytes = sum(prod(t.shape) * itemsize(t.dtype) for t in spec.inputs.values())
    nbytes += prod(out.shape) * itemsize(spec.output_dtype)
    cycles = roofline_cycles(nbytes, flops, machine)
    dram = nbytes / machine.dram_bytes_per_cycle
    rates = peak_rates(machine)
    compute = max(flops[u] / rates[u] for u in flops)
    return SpecRoofline(cycles, nbytes, flops, "dram" if dram >= compute else "compute")
