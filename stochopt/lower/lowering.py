"""lower(spec) -> Kernel: the plain baseline kernel of a spec.

One LEIR op per traced numpy op, f32 compute, inputs loaded at first use with a simple
layout (a leading axis spread over the tree), relayouts only where an op's layout rule
demands one, and the output stored in the spec's dtype. It must fit in PE memory; the
search makes it fast.
"""

from __future__ import annotations

from math import prod

from stochopt.backend.cost import peak_memory
from stochopt.backend.machine import load_machine
from stochopt.errors import ConstraintError, StochoptError
from stochopt.leir.ir import Builder, Kernel
from stochopt.leir.layout import Layout
from stochopt.leir.rules import Const
from stochopt.leir.types import TensorType, itemsize
from stochopt.lower import layouts as L
from stochopt.lower.trace import INIT_HINT, TNode, trace
from stochopt.spec import Spec

ELEMENTWISE = {"neg", "abs", "exp", "log", "sqrt", "tanh", "reciprocal", "add", "sub", "mul",
               "div", "maximum", "minimum", "gt", "ge", "lt", "le", "eq", "where", "cast"}


class LoweringError(StochoptError):
    """The spec traced, but no plain kernel for it fits this machine."""


def lower(spec: Spec, machine=None) -> Kernel:
    """The baseline kernel of a spec on a machine (default mncore2)."""
    machine = load_machine(machine)
    inputs, out = trace(spec)
    lowering = _Lowering(machine)
    for node in inputs:
        t = spec.inputs[node.attrs["name"]]
        lowering.dram[id(node)] = lowering.b.input(node.attrs["name"],
                                                   TensorType(t.dtype, t.shape, "dram"))
    try:
        value = lowering.get(out)
        value = lowering.cast_to(value, spec.output_dtype)
        stored = lowering.b.add("store", [value], {}, "out")
        kernel = lowering.b.finish(spec.name, stored, spec.path)
        peak_memory(kernel, machine)
    except ConstraintError as e:
        raise LoweringError(
            f"spec {spec.name}: the plain kernel does not fit {machine.name}: {e.message}",
            hint="make the spec's tensors smaller, or " + INIT_HINT) from None
    return kernel


class _Lowering:
    def __init__(self, machine) -> None:
        self.machine = machine
        self.fanout = machine.fanout
        self.b = Builder(machine)
        self.dram: dict[int, int] = {}                 # traced node -> dram value
        self.done: dict[int, list[int]] = {}           # traced node -> pe values made
        self.budget = machine.pe_local_bytes // 8

    # -- values ---------------------------------------------------------------------
    def layout_of(self, idx: int) -> Layout:
        return self.b.nodes[idx].type.layout

    def get(self, t: TNode, want: Layout | None = None) -> int:
        """A pe value of the traced node, in the wanted layout if one is given."""
        made = self.done.get(id(t), [])
        for idx in made:
            if want is None or self.layout_of(idx) == want:
                return idx
        if made:
            idx = self.add("relayout", [made[0]], {"layout": want})
        else:
            idx = self.emit(t, want)
            if want is not None and self.layout_of(idx) != want:
                self.done.setdefault(id(t), []).append(idx)
                idx = self.add("relayout", [idx], {"layout": want})
        self.done.setdefault(id(t), []).append(idx)
        return idx

    def arg(self, x, want: Layout | None) -> int | Const:
        return Const(x) if isinstance(x, float) else self.get(x, want)

    def add(self, op: str, args, attrs, name: str = "") -> int:
        return self.b.add(op, args, attrs, name)

    def cast_to(self, idx: int, dtype: str) -> int:
        if self.b.nodes[idx].type.dtype == dtype:
            return idx
        return self.add("cast", [idx], {"dtype": dtype})

    def is_dram(self, t: TNode) -> bool:
        return id(t) in self.dram or (t.op == "slice" and self.is_dram(t.args[0]))

    def dram_value(self, t: TNode) -> int:
        if id(t) not in self.dram:
            src = self.dram_value(t.args[0])
            self.dram[id(t)] = self.add("slice", [src], {"bounds": t.attrs["bounds"]})
        return self.dram[id(t)]

    def default(self, shape, dtype: str = "f32") -> Layout:
        return L.default_layout(tuple(shape), self.fanout, itemsize(dtype), self.budget)

    # -- ops ------------------------------------------------------------------------
    def emit(self, t: TNode, want: Layout | None) -> int:
        if self.is_dram(t):
            src = self.dram_value(t)
            dtype = self.b.nodes[src].type.dtype
            idx = self.add("load", [src], {"layout": want or self.default(t.shape, dtype)})
            return idx if dtype == "bool" else self.cast_to(idx, "f32")
        if t.op in ELEMENTWISE:
            return self.elementwise(t, want)
        if t.op.startswith("reduce_"):
            src = self.get(t.args[0])
            return self.add(t.op, [src], dict(t.attrs))
        if t.op == "matmul":
            return self.matmul(t)
        if t.op == "transpose":
            perm = t.attrs["perm"]
            inner = None
            if want is not None:
                inv = [perm.index(i) for i in range(len(perm))]
                inner = Layout(t.args[0].shape, tuple(want.axes[p] for p in inv),
                               want.replicated)
            return self.add("transpose", [self.get(t.args[0], inner)], {"perm": perm})
        if t.op == "reshape":
            return self.reshape(t)
        if t.op == "slice":
            src = self.get(t.args[0])
            lay = self.layout_of(src)
            for axis, (lo, hi) in enumerate(t.attrs["bounds"]):
                if (lo, hi) != (0, t.args[0].shape[axis]) and lay.axis_levels(axis):
                    lay = L.local_axis_layout(lay, axis, self.fanout)
            return self.add("slice", [self.get(t.args[0], lay)], dict(t.attrs))
        if t.op == "concat":
            return self.concat(t, want)
        raise LoweringError(f"internal: no lowering for traced op {t.op}")

    def elementwise(self, t: TNode, want: Layout | None) -> int:
        out = want
        if out is None:
            full = [a for a in t.args if isinstance(a, TNode) and a.shape == t.shape]
            ready = [a for a in full if id(a) in self.done]
            if ready:
                out = self.layout_of(self.done[id(ready[0])][0])
            elif full and not self.is_dram(full[0]):
                out = self.layout_of(self.get(full[0]))
            else:
                out = self.default(t.shape)
        args = [self.arg(a, None if isinstance(a, float) else L.operand_layout(out, a.shape))
                for a in t.args]
        attrs = dict(t.attrs)
        return self.add(t.op, args, attrs)

    def reshape(self, t: TNode) -> int:
        src_node = t.args[0]
        src = self.get(src_node)
        try:
            return self.add("reshape", [src], {"shape": t.attrs["shape"]})
        except ConstraintError:
            pass
        lead = _gcd(src_node.shape[0], t.shape[0])
        layout = L.default_layout(src_node.shape, self.fanout, 4, 0)
        axes = [list(a) for a in layout.axes]
        axes[0] = L.spread_factors(lead, list(self._levels()), self.fanout)
        rest = src_node.shape[0] // lead
        if rest > 1:
            axes[0] = [f for f in axes[0] if f.level] + [L.Factor(rest)]
        axes[1:] = [[L.Factor(s)] for s in src_node.shape[1:]]
        fixed = L.make_layout(src_node.shape, axes, frozenset())
        return self.add("reshape", [self.get(src_node, fixed)], {"shape": t.attrs["shape"]})

    def _levels(self):
        return ("L2B", "L1B", "MAB", "PE")

    def concat(self, t: TNode, want: Layout | None) -> int:
        axis = t.attrs["axis"]
        first = want or self.layout_of(self.get(t.args[0]))
        if first.axis_levels(axis) or first.shape != t.args[0].shape:
            base = first if first.shape == t.shape else self.default(t.shape)
            first = L.local_axis_layout(base, axis, self.fanout)
        args = []
        for a in t.args:
            axes = list(first.axes)
            axes[axis] = (L.Factor(a.shape[axis]),)
            args.append(self.get(a, L.make_layout(a.shape, axes, first.replicated)))
        return self.add("concat", args, {"axis": axis})

    def matmul(self, t: TNode) -> int:
        a_node, b_node = t.args
        current = {}
        for role, n in (("a", a_node), ("b", b_node)):
            made = self.done.get(id(n))
            current[role] = self.layout_of(made[0]) if made else None
        best = None
        for la, lb in L.matmul_plans(a_node.shape, b_node.shape, self.fanout):
            a_bytes = la.local_elements() * 4
            b_bytes = lb.local_elements() * 4
            out_local = prod(f.size for ax in la.axes[:-1] for f in ax if f.level is None) \
                * prod(f.size for f in lb.axes[-1] if f.level is None)
            memory = a_bytes + b_bytes + out_local * 4
            if memory > self.machine.pe_local_bytes // 2:
                continue
            work = L.matmul_work(la, lb, self.machine.mau_f32)
            moves = sum(prod(x.shape) * 4 / 512 for x, cur in ((la, current["a"]),
                                                               (lb, current["b"]))
                        if cur is not None and cur != x)
            score = (work + moves, memory)
            if best is None or score < best[0]:
                best = (score, la, lb)
        if best is None:
            raise LoweringError(
                f"matmul of {a_node.shape} and {b_node.shape}: no layout fits in PE memory",
                hint=INIT_HINT)
        _, la, lb = best
        return self.add("matmul", [self.get(a_node, la), self.get(b_node, lb)], {})


def _gcd(a: int, b: int) -> int:
    from math import gcd
    return gcd(a, b)
