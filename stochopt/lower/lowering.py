"""lower(spec) -> Kernel: the plain baseline kernel of a spec.

One LEIR op per traced numpy op, f32 compute, inputs loaded at first use with a simple
layout (a leading axis spread over the tree), relayouts only where an op's layout rule
demands one, and the output stored in the spec's dtype. It must fit in PE memory; the
search makes it fast.
"""

from __future__ import annotations

from math import prod

from stochopt.backend.cost import peak_memory
from stochopt.errors import ConstraintError, StochoptError
from stochopt.leir.cost_rules import DRAM_EXTENT, load_cost, relayout_cost
from stochopt.leir.ir import Builder, Kernel, op_of
from stochopt.leir.layout import Layout
from stochopt.leir.rules import Const
from stochopt.leir.types import TensorType, itemsize
from stochopt.lower import layouts as L
from stochopt.lower.trace import INIT_HINT, TNode, trace
from stochopt.machine import load_machine
from stochopt.spec import Spec

ELEMENTWISE = {"neg", "abs", "exp", "log", "sqrt", "tanh", "reciprocal", "add", "sub", "mul",
               "div", "maximum", "minimum", "gt", "ge", "lt", "le", "eq", "where", "cast"}


MAX_K_PIECES = 64  # a matmul's contraction axis is cut in at most this many slices


class LoweringError(StochoptError):
    """The spec traced, but no plain kernel for it fits this machine."""


def lower(spec: Spec, machine=None) -> Kernel:
    """The baseline kernel of a spec on a machine (default mncore2)."""
    machine = load_machine(machine)
    inputs, out = trace(spec)
    if spec.output is not None and spec.output.shape != out.shape:
        raise LoweringError(
            f"spec {spec.name} declares output=tensor(..., {spec.output.shape}) but its "
            f"reference returns shape {out.shape}", source=spec.path, line=spec.line,
            hint=f"write output=tensor(\"{spec.output.dtype}\", {out.shape})")
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
        self.parts: dict[tuple, TNode] = {}             # slices made to split a matmul

    # -- values ---------------------------------------------------------------------
    def layout_of(self, idx: int) -> Layout:
        return self.b.nodes[idx].type.layout

    def get(self, t: TNode, want: Layout | None = None) -> int:
        """A pe value of the traced node, in the wanted layout if one is given."""
        made = self.done.get(id(t), [])
        for idx in made:
            if want is None or self.layout_of(idx) == want:
                return idx
        if made and not (self.is_dram(t) and self.load_cycles(t, want)
                         < self.relayout_cycles(made[0], want)):
            idx = self.add("relayout", [made[0]], {"layout": want})
        else:  # made here, or a DRAM input that is cheaper to load again
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
        layout = L.default_layout(tuple(shape), self.fanout, itemsize(dtype), self.budget)
        local = layout.local_elements() * max(4, itemsize(dtype))
        if local > self.machine.pe_local_bytes:
            fanouts = ", ".join(f"{self.fanout[lv]} {lv}" for lv in L.LEVELS)
            raise LoweringError(
                f"a {tuple(shape)} tensor cannot be spread over {self.machine.name}'s tree: a "
                f"layout cuts an axis into exact factors of the fan-outs ({fanouts}), and "
                f"these sizes have too few, so one PE would hold {local} bytes of it, more than "
                f"its {self.machine.pe_local_bytes}",
                hint="use sizes with small factors (powers of two), or " + INIT_HINT)
        return layout

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
            elif computed := [a for a in full if not self.is_dram(a)]:
                # a computed operand sets the layout and inputs are loaded in it: a load
                # can take any layout, a computed value would need a relayout
                out = self.layout_of(self.get(computed[0]))
            else:
                out = self.default(t.shape)
        args = [self.arg(a, None if isinstance(a, float) else L.operand_layout(out, a.shape))
                for a in t.args]
        if t.op == "cast" and t.attrs["dtype"] == "i32":  # astype(int): truncate, stay f32
            return self.cast_to(self.add("cast", args, {"dtype": "i32"}), "f32")
        # numpy promotes a bool operand of arithmetic (or of a mixed comparison) to a number
        first = 1 if t.op == "where" else 0  # where's condition stays bool
        values = [i for i in range(first, len(args)) if not isinstance(args[i], Const)]
        dtypes = {self.b.nodes[args[i]].type.dtype for i in values}
        literal = len(values) < len(args) - first
        if t.op != "cast" and "bool" in dtypes and (
                len(dtypes) > 1 or t.op not in ("where", "eq", "gt", "ge", "lt", "le")
                or (t.op == "where" and literal)):
            for i in values:
                args[i] = self.cast_to(args[i], "f32")
        return self.add(t.op, args, dict(t.attrs))

    def reshape(self, t: TNode) -> int:
        src_node = t.args[0]
        src = self.get(src_node)
        try:
            return self.add("reshape", [src], {"shape": t.attrs["shape"]})
        except ConstraintError:
            pass
        fixed = L.reshape_layout(src_node.shape, t.shape, self.fanout, 4, self.budget)
        return self.add("reshape", [self.get(src_node, fixed)], {"shape": t.attrs["shape"]})

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
        for operand in (a_node, b_node):  # a computed operand comes in its own layout,
            if not self.loads_directly(operand):  # so the plan counts moving it
                self.get(operand)
        plan = self.matmul_plan(a_node, b_node, a_node.shape, b_node.shape)
        if plan is not None:
            la, lb = plan
            return self.add("matmul", [self.get(a_node, la), self.get(b_node, lb)], {})
        return self.split_k_matmul(a_node, b_node)

    def matmul_plan(self, a_node: TNode, b_node: TNode, a_shape, b_shape, accumulate=False,
                    out_axes=None) -> tuple[Layout, Layout] | None:
        """The plan with the least matrix work (and relayouts) that fits in half a PE's
        memory: both operands in f32, the product, and an accumulator when K is split."""
        best = None
        for la, lb in L.matmul_plans(a_shape, b_shape, self.fanout):
            if out_axes is not None and la.axes[:-1] + lb.axes[-1:] != out_axes:
                continue
            out_local = prod(f.size for ax in la.axes[:-1] for f in ax if f.level is None) \
                * prod(f.size for f in lb.axes[-1] if f.level is None)
            memory = (la.local_elements() + lb.local_elements()
                      + out_local * (2 if accumulate else 1)) * 4
            if memory > self.machine.pe_local_bytes // 2:
                continue
            work = L.matmul_work(la, lb, self.machine)
            feeds = self.feed_cycles(a_node, la, a_shape) + self.feed_cycles(b_node, lb, b_shape)
            score = (work + feeds, memory)
            if best is None or score < best[0]:
                best = (score, la, lb)
        return None if best is None else best[1:]

    def feed_cycles(self, t: TNode, layout: Layout, shape: tuple[int, ...]) -> int:
        """Cycles to bring a matmul operand into a plan's layout, by the cost model: the
        cheaper of a relayout of a value already made and a (fresh) load of a DRAM input
        with its cast to f32 (a load read in short runs or replicated over L2Bs is dear);
        0 for a value still to be computed (it is made in whatever layout is asked)."""
        made = self.done.get(id(t), [])
        if any(self.layout_of(idx) == layout for idx in made):
            return 0
        options = [self.relayout_cycles(made[0], layout)] if made else []
        if self.is_dram(t) and shape == t.shape:
            options.append(self.load_cycles(t, layout))
        elif t.op == "transpose" and not made:
            perm = t.attrs["perm"]
            inv = [perm.index(i) for i in range(len(perm))]
            inner = Layout(t.args[0].shape, tuple(layout.axes[p] for p in inv),
                           layout.replicated)
            options.append(self.feed_cycles(t.args[0], inner, t.args[0].shape))
        return min(options, default=0)

    def loads_directly(self, t: TNode) -> bool:
        """A DRAM input, or a transpose of one: loaded in whatever layout a plan wants."""
        while t.op == "transpose":
            t = t.args[0]
        return self.is_dram(t)

    def relayout_cycles(self, idx: int, layout: Layout) -> int:
        src = self.b.nodes[idx].type
        dst = TensorType(src.dtype, src.shape, "pe", layout)
        return relayout_cost(self.machine, [src], dst, {}).cycles

    def load_cycles(self, t: TNode, layout: Layout) -> int:
        """A load of a DRAM value in this layout, and its cast to f32 if it needs one."""
        whole = tuple(a == b for a, b in zip(t.shape, _dram_root_shape(t), strict=True))
        loaded = TensorType(t.dtype, t.shape, "pe", layout)
        cycles = load_cost(self.machine, [], loaded, {DRAM_EXTENT: whole}).cycles
        if t.dtype not in ("f32", "bool"):
            cycles += op_of("cast").cost(self.machine, [loaded],
                                         TensorType("f32", t.shape, "pe", layout), {}).cycles
        return cycles

    def split_k_matmul(self, a_node: TNode, b_node: TNode) -> int:
        """A matmul too big for PE memory in one piece: sum the products of slices of the
        contraction axis (a plain K loop, unrolled)."""
        K = a_node.shape[-1]
        for pieces in range(2, min(K, MAX_K_PIECES) + 1):
            width = -(-K // pieces)
            plans = self.k_slice_plans(a_node, b_node, width, K % width)
            if plans is not None:
                break
        else:
            raise LoweringError(
                f"matmul of {a_node.shape} and {b_node.shape}: no layout fits in PE memory, "
                f"even with the contraction axis cut in {MAX_K_PIECES} slices",
                hint="make the spec's tensors smaller, or " + INIT_HINT)
        total = None
        for lo in range(0, K, width):
            hi = min(K, lo + width)
            la, lb = plans[hi - lo != width]
            a_part = self.part(a_node, len(a_node.shape) - 1, lo, hi)
            b_part = self.part(b_node, len(b_node.shape) - 2, lo, hi)
            product = self.add("matmul", [self.get(a_part, la), self.get(b_part, lb)], {})
            total = product if total is None else self.add("add", [total, product], {})
        return total

    def k_slice_plans(self, a_node: TNode, b_node: TNode, width: int, last: int):
        """Plans for K slices of this width and for a narrower last slice (if any) whose
        product is laid out alike, so that the partial products add up; None if either
        does not fit."""
        def plan(k, out_axes=None):
            return self.matmul_plan(a_node, b_node, a_node.shape[:-1] + (k,),
                                    b_node.shape[:-2] + (k, b_node.shape[-1]),
                                    accumulate=True, out_axes=out_axes)
        main = plan(width)
        if main is None or not last:
            return None if main is None else (main, main)
        rest = plan(last, main[0].axes[:-1] + main[1].axes[-1:])
        return None if rest is None else (main, rest)

    def part(self, t: TNode, axis: int, lo: int, hi: int) -> TNode:
        """The traced slice t[..., lo:hi, ...] along one axis; through a transpose it
        slices the transposed value, so that a slice of an input stays a dram slice."""
        key = (id(t), axis, lo, hi)
        if key not in self.parts:
            if t.op == "transpose":
                perm = t.attrs["perm"]
                inner = self.part(t.args[0], perm[axis], lo, hi)
                shape = tuple(inner.shape[p] for p in perm)
                node = TNode("transpose", (inner,), {"perm": perm}, shape, t.dtype)
            elif t.op == "reshape" and _squeezed(t.shape) == _squeezed(t.args[0].shape):
                # a reshape that only adds or drops size-1 axes (a vector made a matrix)
                src = t.args[0]
                nth = [i for i, s in enumerate(t.shape) if s > 1].index(axis)
                inner = self.part(src, [i for i, s in enumerate(src.shape) if s > 1][nth],
                                  lo, hi)
                shape = t.shape[:axis] + (hi - lo,) + t.shape[axis + 1:]
                node = TNode("reshape", (inner,), {"shape": shape}, shape, t.dtype)
            else:
                bounds = [(0, s) for s in t.shape]
                bounds[axis] = (lo, hi)
                shape = tuple(b - a for a, b in bounds)
                node = TNode("slice", (t,), {"bounds": tuple(bounds)}, shape, t.dtype)
            self.parts[key] = node  # kept alive: the lowering keys its maps by id()
        return self.parts[key]


def _dram_root_shape(t: TNode) -> tuple[int, ...]:
    """Shape of the DRAM input a traced dram value (an input or slices of one) reads."""
    while t.op == "slice":
        t = t.args[0]
    return t.shape


def _squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(s for s in shape if s > 1)
