"""Every op's numpy meaning, in both emulator modes, against numpy in float64.

Exact mode must match the float64 reference to rounding noise; native mode must hold
each value in its dtype: f32 math in float32, bf16 computed in f32 and rounded once
(as ml_dtypes rounds), matmul accumulating in f32, i32 and bool exact. The kernels run
on the ``small`` preset.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np
import pytest

from stochopt.backend.emulate import emulate
from stochopt.leir import OPS, parse

BF16 = np.dtype(ml_dtypes.bfloat16)
NATIVE = {"f32": np.dtype(np.float32), "bf16": BF16, "i32": np.dtype(np.int32),
          "bool": np.dtype(np.bool_)}
EXACT = {"f32": np.dtype(np.float64), "bf16": np.dtype(np.float64),
         "i32": np.dtype(np.int64), "bool": np.dtype(np.bool_)}
ROWS = "(8,16)/((2_L2B,4_MAB),(16))"  # rows spread, each row local: the usual layout
PE = "(8,16)/((2_L2B,4_MAB),(4_PE,4))"  # columns spread over PEs too

Ref = Callable[..., np.ndarray]


@dataclass
class Case:
    id: str
    params: dict[str, str]          # name -> "f32[8,16]"
    out: str                        # "f32[8,16]"
    body: list[str]                 # lines; the last value is ``y``
    ref: Ref                        # float64 meaning, on float64 (or int/bool) inputs
    native: Ref | None = None       # bit-exact native result, where the rounding is pinned
    low: float = -4.0
    high: float = 4.0
    integral: bool = False          # draw whole numbers (so eq and i32 math are exercised)
    extra: dict[str, np.ndarray] = field(default_factory=dict)

    def text(self) -> str:
        params = ", ".join(f'{n}: "{t} @ dram"' for n, t in self.params.items())
        lines = [f'def kernel({params}) -> "{self.out} @ dram":']
        lines += [f"    {line}" for line in self.body]
        lines.append("    return store(y)")
        return "\n".join(lines) + "\n"

    def inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        out = {}
        for name, sig in self.params.items():
            if name in self.extra:
                out[name] = self.extra[name]
                continue
            dtype, shape = sig.split("[")
            shape = tuple(int(s) for s in shape.rstrip("]").split(","))
            if dtype == "bool":
                out[name] = rng.random(shape) < 0.5
                continue
            x = rng.uniform(self.low, self.high, shape)
            if self.integral or dtype == "i32":
                x = np.round(x)
            out[name] = x.astype(NATIVE[dtype])
        return out


def _f64(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The exact values the kernel sees, widened: floats to float64, ints to int64."""
    out = {}
    for k, v in inputs.items():
        if v.dtype == np.bool_:
            out[k] = v
        elif v.dtype == np.int32:
            out[k] = v.astype(np.int64)
        else:
            out[k] = v.astype(np.float64)
    return out


def _in_dtype(fn: Ref, dtype: str) -> Ref:
    """fn computed in float32 on the inputs, rounded once to dtype: the native contract
    of one op."""
    def widen(v):
        return v.astype(np.float32) if v.dtype == BF16 else v

    def native(*args, **kwargs):
        with np.errstate(all="ignore"):
            out = fn(*map(widen, args), **{k: widen(v) for k, v in kwargs.items()})
        return np.asarray(out).astype(NATIVE[dtype])
    return native


def _unary(op: str, fn: Ref, dtype: str, low: float, high: float) -> Case:
    return Case(f"{op}-{dtype}", {"x": f"{dtype}[8,16]"}, f"{dtype}[8,16]",
                [f'xs = load(x, "{ROWS}")', f"y = {op}(xs)"],
                lambda x: fn(x), _in_dtype(lambda x: fn(x), dtype), low, high)


def _binary(op: str, fn: Ref, dtype: str, written: str | None = None) -> list[Case]:
    call = written or f"{op}(xs, ys)"
    low = 0.5 if op == "div" else -4.0
    return [
        Case(f"{op}-{dtype}", {"x": f"{dtype}[8,16]", "y0": f"{dtype}[8,16]"},
             f"{dtype}[8,16]", [f'xs = load(x, "{ROWS}")', f'ys = load(y0, "{ROWS}")',
                                f"y = {call}"],
             lambda x, y0: fn(x, y0), _in_dtype(lambda x, y0: fn(x, y0), dtype), low=low,
             integral=dtype == "i32"),
        # a literal operand and a broadcast row: numpy broadcasting on both sides
        Case(f"{op}-{dtype}-literal-broadcast", {"x": f"{dtype}[8,16]"}, f"{dtype}[8,16]",
             [f'xs = load(x, "{ROWS}")', "r = reduce_max(xs, axis=1, keepdims=True)",
              f"y = {op}({op}(xs, 3), r)"],
             lambda x: fn(fn(x, 3), x.max(axis=1, keepdims=True)),
             lambda x: _in_dtype(fn, dtype)(_in_dtype(lambda a: fn(a, 3), dtype)(x),
                                            x.max(axis=1, keepdims=True)),
             low=low, integral=dtype == "i32"),
    ]


UNARY = [("neg", np.negative, -4, 4), ("abs", np.abs, -4, 4), ("exp", np.exp, -4, 4),
         ("log", np.log, 0.01, 9), ("sqrt", np.sqrt, 0, 9), ("rsqrt", lambda x: 1 / np.sqrt(x),
                                                                   0.01, 9),
         ("reciprocal", lambda x: 1 / x, 0.25, 9), ("tanh", np.tanh, -4, 4)]
BINARY = [("add", np.add, "xs + ys"), ("sub", np.subtract, "xs - ys"),
          ("mul", np.multiply, "xs * ys"), ("div", np.divide, "xs / ys"),
          ("maximum", np.maximum, None), ("minimum", np.minimum, None)]
COMPARE = [("gt", np.greater, "xs > ys"), ("ge", np.greater_equal, "ge(xs, ys)"),
           ("lt", np.less, "xs < ys"), ("le", np.less_equal, "le(xs, ys)"),
           ("eq", np.equal, "xs == ys")]


def _cases() -> list[Case]:
    cases: list[Case] = []
    for dtype in ("f32", "bf16"):
        cases += [_unary(op, fn, dtype, lo, hi) for op, fn, lo, hi in UNARY]
        for op, fn, written in BINARY:
            cases += _binary(op, fn, dtype, written)
    for op, fn, _ in BINARY:
        if op != "div":
            cases += _binary(op, fn, "i32")
    cases += [_unary(op, fn, "i32", -9, 9) for op, fn, *_ in UNARY[:2]]
    for op, fn, written in COMPARE:
        cases.append(Case(
            f"{op}", {"x": "f32[8,16]", "y0": "f32[8,16]"}, "bool[8,16]",
            [f'xs = load(x, "{ROWS}")', f'ys = load(y0, "{ROWS}")', f"y = {written}"],
            lambda x, y0, fn=fn: fn(x, y0), None, -2, 2, integral=True))
    cases += [
        Case("where", {"c": "bool[8,16]", "x": "f32[8,16]", "y0": "f32[8,16]"}, "f32[8,16]",
             [f'cs = load(c, "{ROWS}")', f'xs = load(x, "{ROWS}")', f'ys = load(y0, "{ROWS}")',
              "y = where(cs, xs, ys)"],
             lambda c, x, y0: np.where(c, x, y0), lambda c, x, y0: np.where(c, x, y0)),
        Case("where-literals-inf", {"x": "f32[8,16]"}, "f32[8,16]",
             [f'xs = load(x, "{ROWS}")', "y = where(xs > 0.0, xs, -inf)"],
             lambda x: np.where(x > 0, x, -np.inf), lambda x: np.where(x > 0, x, -np.inf)),
        Case("cast-f32-to-bf16", {"x": "f32[8,16]"}, "bf16[8,16]",
             [f'xs = load(x, "{ROWS}")', 'y = cast(xs, "bf16")'],
             lambda x: x, lambda x: x.astype(BF16)),  # exact mode keeps the f32 value
        Case("cast-bf16-to-f32", {"x": "bf16[8,16]"}, "f32[8,16]",
             [f'xs = load(x, "{ROWS}")', 'y = cast(xs, "f32")'],
             lambda x: x, lambda x: x.astype(np.float32)),
        Case("cast-f32-to-i32", {"x": "f32[8,16]"}, "i32[8,16]",
             [f'xs = load(x, "{ROWS}")', 'y = cast(xs, "i32")'],
             lambda x: np.trunc(x), lambda x: np.trunc(x).astype(np.int32), -9.9, 9.9),
        Case("cast-f32-to-bool", {"x": "f32[8,16]"}, "bool[8,16]",
             [f'xs = load(x, "{ROWS}")', 'y = cast(xs, "bool")'],
             lambda x: x != 0, lambda x: x != 0, -2, 2, integral=True),
        Case("cast-bool-to-f32", {"c": "bool[8,16]"}, "f32[8,16]",
             [f'cs = load(c, "{ROWS}")', 'y = cast(cs, "f32")'],
             lambda c: c.astype(np.float64), lambda c: c.astype(np.float32)),
        Case("cast-i32-to-f32", {"x": "i32[8,16]"}, "f32[8,16]",
             [f'xs = load(x, "{ROWS}")', 'y = cast(xs, "f32")'],
             lambda x: x.astype(np.float64), lambda x: x.astype(np.float32), -99, 99),
    ]
    for op, fn in (("reduce_sum", np.sum), ("reduce_max", np.max), ("reduce_min", np.min)):
        for axis, keep, layout in ((1, True, ROWS), (0, False, ROWS), (1, False, PE),
                                   (-1, True, PE)):
            shape = [8, 16]
            if keep:
                shape[axis] = 1
            else:
                del shape[axis]
            out = ",".join(map(str, shape))
            cases.append(Case(
                f"{op}-axis{axis}-keep{keep}-{'pe' if layout == PE else 'rows'}",
                {"x": "f32[8,16]"}, f"f32[{out}]",
                [f'xs = load(x, "{layout}")', f"y = {op}(xs, axis={axis}, keepdims={keep})"],
                lambda x, fn=fn, axis=axis, keep=keep: fn(x, axis=axis, keepdims=keep),
                None))
        cases.append(Case(
            f"{op}-i32", {"x": "i32[8,16]"}, "i32[8,1]",
            [f'xs = load(x, "{ROWS}")', f"y = {op}(xs, axis=1, keepdims=True)"],
            lambda x, fn=fn: fn(x, axis=1, keepdims=True),
            lambda x, fn=fn: fn(x, axis=1, keepdims=True).astype(np.int32), -99, 99))
    cases += [
        Case("reduce_max-bf16", {"x": "bf16[8,16]"}, "bf16[8]",
             [f'xs = load(x, "{ROWS}")', "y = reduce_max(xs, axis=1)"],
             lambda x: x.max(axis=1), lambda x: x.max(axis=1)),
        Case("reduce_sum-bf16-pairwise", {"x": "bf16[8,16]"}, "bf16[8]",
             [f'xs = load(x, "{ROWS}")', "y = reduce_sum(xs, axis=1)"],
             lambda x: x.sum(axis=1), _bf16_pairwise_sum),
    ]
    mm_a = "(8,16)/((2_L2B,4),(16)); B@[MAB]"
    mm_b = "(16,12)/((16),(4_MAB,3)); B@[L2B]"
    for dtype in ("f32", "bf16"):
        cases.append(Case(
            f"matmul-{dtype}", {"a": f"{dtype}[8,16]", "b": f"{dtype}[16,12]"}, "f32[8,12]",
            [f'x = load(a, "{mm_a}")', f'w = load(b, "{mm_b}")', "y = x @ w"],
            lambda a, b: a @ b, _matmul_f32))
    cases += [
        Case("matmul-batched-spread-k", {"a": "f32[2,4,16]", "b": "f32[2,16,8]"}, "f32[2,4,8]",
             ['x = load(a, "(2,4,16)/((2_L2B),(4),(4_MAB,4)); B@[PE]")',
              'w = load(b, "(2,16,8)/((2_L2B),(4_MAB,4),(4_PE,2))")', "y = matmul(x, w)"],
             lambda a, b: a @ b, _matmul_f32),
        Case("load-relayout-store", {"x": "f32[8,16]"}, "f32[8,16]",
             [f'xs = load(x, "{ROWS}")', f'y = relayout(xs, "{PE}")'],
             lambda x: x, lambda x: x),
        Case("load-replicated-store-bf16", {"x": "bf16[8,16]"}, "bf16[8,16]",
             ['y = load(x, "(8,16)/((8),(16)); B@[L2B,L1B,MAB,PE]")'],
             lambda x: x, lambda x: x),
        Case("transpose-default", {"x": "f32[8,16]"}, "f32[16,8]",
             [f'xs = load(x, "{ROWS}")', "y = transpose(xs)"],
             lambda x: x.T, lambda x: x.T),
        Case("transpose-perm", {"x": "f32[2,4,8]"}, "f32[8,2,4]",
             ['xs = load(x, "(2,4,8)/((2_L2B),(4_MAB),(8))")', "y = transpose(xs, (2, 0, 1))"],
             lambda x: x.transpose(2, 0, 1), lambda x: x.transpose(2, 0, 1)),
        Case("reshape", {"x": "f32[8,16]"}, "f32[8,4,4]",
             [f'xs = load(x, "{ROWS}")', "y = reshape(xs, (8, 4, 4))"],
             lambda x: x.reshape(8, 4, 4), lambda x: x.reshape(8, 4, 4)),
        Case("slice-dram-and-pe", {"x": "f32[8,16]"}, "f32[4,3]",
             ['xs = load(x[2:6, :], "(4,16)/((4_MAB),(16))")', "y = xs[:, 5:-8]"],
             lambda x: x[2:6, 5:8], lambda x: x[2:6, 5:8]),
        Case("concat", {"x": "f32[8,16]", "y0": "f32[8,16]"}, "f32[8,48]",
             [f'xs = load(x, "{ROWS}")', f'ys = load(y0, "{ROWS}")',
              "y = concat([xs, ys, xs], axis=1)"],
             lambda x, y0: np.concatenate([x, y0, x], axis=1),
             lambda x, y0: np.concatenate([x, y0, x], axis=1)),
        Case("broadcast_to", {"x": "f32[8,16]"}, "f32[2,8,16]",
             [f'xs = load(x, "{ROWS}")', "s = reduce_sum(xs, axis=1, keepdims=True)",
              "y = broadcast_to(s, (2, 8, 16))"],
             lambda x: np.broadcast_to(x.sum(axis=1, keepdims=True), (2, 8, 16)), None),
        Case("full-f32-inf-nan", {"x": "f32[8,16]"}, "f32[8,16]",
             [f'xs = load(x, "{ROWS}")', f'a = full((8, 16), -inf, "f32", "{ROWS}")',
              f'n = full((8, 16), nan, "f32", "{ROWS}")',
              'row = full((16,), 0.5, "f32", "(16)/((16)); B@[L2B,MAB]")',  # broadcast rows
              "y = maximum(a, xs) + where(xs > 0.0, n, 0.0) + row"],
             lambda x: np.where(x > 0, np.nan, x) + 0.5,
             lambda x: (np.where(x > 0, np.nan, x) + 0.5).astype(np.float32)),
        Case("full-i32-and-bool", {"x": "i32[8,16]"}, "i32[8,16]",
             [f'xs = load(x, "{ROWS}")', f'k = full((8, 16), -7, "i32", "{ROWS}")',
              f'b = full((8, 16), 2.0, "bool", "{ROWS}")',
              "y = where(b, xs * k, xs)"],
             lambda x: x * -7, lambda x: (x * -7).astype(np.int32), -99, 99),
    ]
    return cases


def _bf16_pairwise_sum(x: np.ndarray) -> np.ndarray:
    """bf16 sum as the machine does it: pairs added in f32 and rounded to bf16 per level."""
    x = x.astype(np.float32)
    while x.shape[-1] > 1:
        x = (x[..., 0::2] + x[..., 1::2]).astype(BF16).astype(np.float32)
    return x[..., 0].astype(BF16)


def _matmul_f32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.astype(np.float32) @ b.astype(np.float32)


CASES = _cases()


def test_the_cases_cover_every_op_of_the_table():
    used = {node.op for case in CASES for node in parse(case.text(), "small").nodes}
    assert set(OPS) - used == set()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_exact_mode_is_numpy_in_float64(case: Case):
    kernel = parse(case.text(), "small")
    inputs = case.inputs()
    got = emulate(kernel, inputs, exact=True)
    expected = np.asarray(case.ref(**_f64(inputs)))
    out_dtype = kernel.output_type.dtype
    assert got.dtype == EXACT[out_dtype]
    assert got.shape == expected.shape
    if out_dtype in ("i32", "bool"):
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_native_mode_holds_each_value_in_its_dtype(case: Case):
    kernel = parse(case.text(), "small")
    inputs = case.inputs()
    got = emulate(kernel, inputs)
    out_dtype = kernel.output_type.dtype
    assert got.dtype == NATIVE[out_dtype]
    if case.native is not None:  # the rounding is pinned bit for bit
        expected = np.asarray(case.native(**inputs))
        assert expected.dtype == got.dtype
        np.testing.assert_array_equal(got, expected)
    # and, rounding aside, it is the float64 meaning
    reference = np.asarray(case.ref(**_f64(inputs)))
    if out_dtype in ("i32", "bool"):
        np.testing.assert_array_equal(got, reference)
    else:
        rtol = {"f32": 2e-6, "bf16": 2.0**-7}[out_dtype]
        if "bf16" in case.id and out_dtype == "f32" and "matmul" not in case.id:
            rtol = 2.0**-7
        np.testing.assert_allclose(got.astype(np.float64), reference, rtol=rtol,
                                   atol=rtol * 16, equal_nan=True)


# ---------------------------------------------------------------------------------
# the corners of the contract
# ---------------------------------------------------------------------------------

def _one(text: str, **inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    kernel = parse(text, "small")
    return emulate(kernel, inputs), emulate(kernel, inputs, exact=True)


def test_cast_to_i32_truncates_toward_zero_and_saturates_alike_in_both_modes():
    text = '''def kernel(x: "f32[1,8] @ dram") -> "i32[1,8] @ dram":
    return store(cast(load(x, "(1,8)/((1),(8))"), "i32"))
'''
    x = np.array([[2.7, -2.7, 0.5, -0.5, 1e30, -1e30, np.nan, 2147483520.0]], np.float32)
    native, exact = _one(text, x=x)
    expected = [[2, -2, 0, 0, 2**31 - 1, -(2**31), 0, 2147483520]]
    np.testing.assert_array_equal(native, expected)
    np.testing.assert_array_equal(exact, expected)


def test_bf16_ops_round_once_per_op_like_ml_dtypes():
    text = '''def kernel(x: "bf16[1,4] @ dram") -> "bf16[1,4] @ dram":
    xs = load(x, "(1,4)/((1),(4))")
    return store(xs + 0.00390625)
'''
    # 1 + 2**-8 is a tie in bf16 (8 bits of mantissa): round to nearest even gives 1
    x = np.array([[1.0, 3.0, -1.0, 256.0]], BF16)
    native, exact = _one(text, x=x)
    np.testing.assert_array_equal(native, (x.astype(np.float32) + 2**-8).astype(BF16))
    assert native[0, 0] == 1.0
    assert exact[0, 0] == 1.0 + 2**-8  # exact mode does not round


def test_bf16_reduce_sum_rounds_at_every_level_but_exact_mode_does_not():
    text = '''def kernel(x: "bf16[1,4] @ dram") -> "bf16[1] @ dram":
    return store(reduce_sum(load(x, "(1,4)/((1),(4))"), axis=1))
'''
    # pairs: 256 + 1 = 257 is a bf16 tie and rounds to 256 (even), 1 + 0 = 1; then
    # 256 + 1 rounds to 256 again. Summing in f32 and rounding once would give 258.
    x = np.array([[256.0, 1.0, 1.0, 0.0]], BF16)
    native, exact = _one(text, x=x)
    assert float(native[0]) == 256.0
    assert float(exact[0]) == 258.0


def test_a_matmul_with_a_subnormal_operand_sums_in_float64_and_rounds_once():
    # BLAS's float32 kernels slow down 50-100x on subnormal operands: the native rule
    # sums those in float64, rounded once; other operands take float32's own sums
    text = '''def kernel(a: "f32[1,4] @ dram", b: "f32[4,1] @ dram") -> "f32[1,1] @ dram":
    return store(matmul(load(a, "(1,4)/((1),(4))"), load(b, "(4,1)/((4),(1))")))
'''
    ones = np.ones((4, 1), np.float32)
    tiny = np.float32(1e-40)  # subnormal in float32
    assert 0 < tiny < np.finfo(np.float32).tiny
    a = np.array([[2.0**24, 1.0, 1.0, tiny]], np.float32)
    native, exact = _one(text, a=a, b=ones)
    # float32 sums would lose both ones (2^24 + 1 is a tie, to even): float64 keeps them
    assert native.dtype == np.float32 and float(native[0, 0]) == 2.0**24 + 2
    assert float(exact[0, 0]) == 2.0**24 + 2 + float(tiny)
    normal = np.array([[2.0**24, 1.0, 1.0, 2.0**-100]], np.float32)
    native, _ = _one(text, a=normal, b=ones)
    np.testing.assert_array_equal(native, np.matmul(normal, ones))
