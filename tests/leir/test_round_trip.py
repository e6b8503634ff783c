"""parse(render(k)) == k: the canonical text is a faithful, stable spelling of a kernel.

The property runs over tests/strategies.py's ``kernels(machine)``, which draws
well-formed kernels from the whole op table; the named cases below pin the corners a
random draw reaches rarely (nan literals, an early store returned, literal types).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stochopt.backend.emulate import emulate, random_inputs
from stochopt.leir import Builder, Const, Kernel, parse, parse_layout, render
from stochopt.leir.types import TensorType
from stochopt.machine import MNCORE2, SMALL
from tests.strategies import kernels
from tests.tiers import QUICK_AND_FULL, examples


def _same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit for bit: nan equals nan (numpy's equal_nan does not know bf16), -0.0 is not 0.0."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("full", QUICK_AND_FULL)
def test_render_then_parse_gives_back_the_same_kernel(full):
    @examples(full, quick=15)
    @given(st.data())
    def round_trip(data):
        machine = data.draw(st.sampled_from([SMALL, MNCORE2]))
        kernel = data.draw(kernels(machine))
        text = render(kernel)
        again = parse(text, machine)
        assert again == kernel, text
        assert render(again) == text  # the canonical text is a fixed point

    round_trip()


@pytest.mark.parametrize("full", QUICK_AND_FULL)
def test_the_re_parsed_kernel_computes_the_same_values(full):
    """Equality of kernels could hide a literal's type (1 == 1.0); the values cannot."""
    @examples(full, quick=10, count=25)
    @given(kernels(SMALL, max_ops=8))
    def same_values(kernel):
        again = parse(render(kernel), SMALL)
        inputs = random_inputs(kernel, seed=5)
        for exact in (False, True):
            a = emulate(kernel, inputs, exact=exact)
            assert _same_values(a, emulate(again, inputs, exact=exact))

    same_values()


HEAD = 'def kernel(x: "f32[8,16] @ dram") -> "f32[8,16] @ dram":\n'
LOAD = '    xs = load(x, "(8,16)/((2_L2B,4_MAB),(16))")\n'


@pytest.mark.parametrize("body", [
    "    return store(xs * nan)\n",
    "    return store(maximum(xs, -inf) + inf * 0.0 - (inf - inf))\n",
    "    return store(xs * -0.0 + 1e-320 - 1e300)\n",
    "    return store(xs * 2 + 2.0 - (-3))\n",
    '    n = full((8, 16), nan, "f32", "(8,16)/((2_L2B,4_MAB),(16))")\n'
    "    return store(xs + n)\n",
    '    n = full((8, 16), -nan, "f32", "(8,16)/((2_L2B,4_MAB),(16))")\n'
    "    return store(xs + n)\n",
    "    s = store(xs)\n    e = exp(xs)\n    return s\n",  # the returned store is not last
    "    y = transpose(transpose(xs), perm=(1, 0))\n    return store(y)\n",
    "    m = reduce_max(xs, axis=-1, keepdims=True)\n    return store(xs - m)\n",
    "    y = concat([xs], axis=1)\n    return store(y)\n",
    '    y = cast(cast(xs, "bf16"), "f32")\n    return store(y)\n',
    "    for i in range(3):\n        xs = xs + i\n    return store(xs)\n",
])
def test_corner_cases_round_trip(body):
    kernel = parse(HEAD + LOAD + body, SMALL)
    text = render(kernel)
    assert parse(text, SMALL) == kernel, text
    inputs = random_inputs(kernel, seed=1)
    assert _same_values(emulate(kernel, inputs), emulate(parse(text, SMALL), inputs))


def test_literal_types_survive_the_round_trip():
    kernel = parse(HEAD + LOAD + "    return store(xs * 2 + 2.0)\n", SMALL)
    again = parse(render(kernel), SMALL)
    literals = [a.value for n in again.nodes for a in n.args if isinstance(a, Const)]
    assert [type(v) for v in literals] == [int, float]


def test_nan_literals_compare_equal_so_kernels_holding_them_do():
    assert Const(math.nan) == Const(float("nan"))
    assert Const(float("inf") - float("inf")) == Const(math.nan)
    assert hash(Const(math.nan)) == hash(Const(float("nan")))
    assert Const(math.nan) != Const(1.0)


def test_names_that_are_not_identifiers_are_renamed_consistently():
    b = Builder(SMALL)
    x = b.input("x", TensorType("f32", (8, 16), "dram"))
    xs = b.add("load", [x], {"layout": parse_layout("(8,16)/((8),(16))")}, name="exp")
    y = b.add("add", [xs, xs], {}, name="not a name")
    kernel: Kernel = b.finish("kernel", b.add("store", [y], {}, name="for"))
    text = render(kernel)
    assert "exp =" not in text and "not a name" not in text and "for =" not in text
    assert parse(text, SMALL) == kernel


def test_numpy_scalar_literals_from_rewrites_render_as_plain_numbers():
    """A rewrite that computes a literal with numpy must not write np.float32(0.5)."""
    b = Builder(SMALL)
    x = b.input("x", TensorType("f32", (8, 16), "dram"))
    xs = b.add("load", [x], {"layout": parse_layout("(8,16)/((8),(16))")}, name="xs")
    y = b.add("mul", [xs, Const(np.float32(0.5))], {}, name="y")
    z = b.add("add", [y, Const(np.int64(3))], {}, name="z")
    kernel = b.finish("kernel", b.add("store", [z], {}))
    text = render(kernel)
    assert "y = xs * 0.5" in text and "z = y + 3" in text
    assert parse(text, SMALL) == kernel
