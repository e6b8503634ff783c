"""TensorLayout notation: reading, printing, the structural errors and the machine checks."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stochopt.errors import ConstraintError
from stochopt.leir import LEVELS, Factor, Layout, parse, parse_layout
from stochopt.leir.layout import check_layout, simple_layout
from stochopt.machine import MNCORE2, SMALL
from tests.strategies import layouts
from tests.tiers import QUICK_AND_FULL, examples

SHAPES = st.lists(st.sampled_from([1, 2, 3, 4, 6, 8, 16, 32]), min_size=1, max_size=4).map(tuple)


@pytest.mark.parametrize("full", QUICK_AND_FULL)
def test_printing_a_layout_reads_back_as_the_same_layout(full):
    @examples(full, quick=15)
    @given(st.data())
    def reads_back(data):
        shape = data.draw(SHAPES)
        machine = data.draw(st.sampled_from([SMALL, MNCORE2]))
        layout = data.draw(layouts(shape, machine))
        text = str(layout)
        assert parse_layout(text) == layout
        assert str(parse_layout(text)) == text
        check_layout(layout, machine.fanout)  # the strategy draws only legal layouts

    reads_back()


def test_the_parts_of_a_layout():
    layout = parse_layout("(128,1024)/((8_L2B,16_MAB),(8_L1B,4_PE,32)); B@[PE,L1B]")
    assert layout.shape == (128, 1024)
    assert layout.axes == ((Factor(8, "L2B"), Factor(16, "MAB")),
                           (Factor(8, "L1B"), Factor(4, "PE"), Factor(32)))
    assert layout.replicated == frozenset({"L1B", "PE"})
    assert layout.spread() == {"L2B": 8, "MAB": 16, "L1B": 8, "PE": 4}
    assert layout.local_elements() == 32
    assert layout.local_shape() == (1, 32)
    assert layout.spread_units() == 4096
    # B@ levels print in tree order, whatever order they were written in
    assert str(layout).endswith("; B@[L1B,PE]")


def test_spaces_and_an_empty_replication_list_are_tolerated():
    plain = parse_layout("(8,16)/((8),(16))")
    assert parse_layout(" ( 8 , 16 ) / ( ( 8 ) , ( 16 ) ) ") == plain
    assert parse_layout("(8,16)/((8),(16)); B@[]") == plain
    assert parse_layout("(8,)/((8),)") == parse_layout("(8)/((8))")


@pytest.mark.parametrize("text, message", [
    ("(8,16)", "has no '/'"),
    ("8,16/((8),(16))", "shape must be in parentheses"),
    ("()/((8))", "bad shape"),
    ("(8,x)/((8),(16))", "bad shape"),
    ("(²,16)/((8),(16))", "bad shape"),  # digits that int() cannot read
    ("(٨,16)/((8),(16))", "bad shape"),  # digits from another script
    ("(8,16)/(8),16", "axes part must be in parentheses"),
    ("(8,16)/((8)(16))", "parenthesised factor list"),
    ("(8,16)/((8),,(16))", "parenthesised factor list"),
    ("(8,16)/((8),(16)", "parenthesised factor list"),
    ("(8,16)/((8),(16),(1))", "lists 3 axes for a shape of rank 2"),
    ("(8,16)/((8))", "lists 1 axes for a shape of rank 2"),
    ("(8,16)/((4),(16))", "axis 0 factors multiply to 4, not 8"),
    ("(8,16)/((8),(2_PE,4))", "axis 1 factors multiply to 8, not 16"),
    ("(8,16)/((0,8),(16))", "out of range"),
    ("(8,16)/((8_),(16))", "bad factor"),
    ("(8,16)/((_L2B),(16))", "bad factor"),
    ("(8,16)/((8),(16_８))", "bad factor"),
    ("(8,16)/((８),(16))", "bad factor"),
    ("(8,16)/((8_L3B),(16))", "unknown level 'L3B'"),
    ("(8,16)/((8_l2b),(16))", "unknown level 'l2b'"),
    ("(8,16)/((8),(16)); B@", "bad replication"),
    ("(8,16)/((8),(16)); C@[PE]", "bad replication"),
    ("(8,16)/((8),(16)); B@[XYZ]", "unknown level 'XYZ'"),
    ("(8,16)/((8),(16)); B@[PE,PE]", "repeated"),
    ("(8,16)/((8),(16))" + " " * 600, "at most 512"),
])
def test_structural_layout_errors_say_what_is_wrong(text, message):
    with pytest.raises(ConstraintError, match=re.escape(message)):
        parse_layout(text)


def test_a_layout_must_be_a_string():
    with pytest.raises(ConstraintError, match="string"):
        parse_layout(42)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["(8,16)/((8),(16_PE))", "(8,16)/((2_PE,4),(8_PE,2))"])
def test_more_units_than_the_fan_out_is_an_error_naming_the_limit(text):
    layout = parse_layout(text)  # structurally fine: fan-outs belong to the machine
    with pytest.raises(ConstraintError, match="uses 16 units of PE") as info:
        check_layout(layout, MNCORE2.fanout)
    assert "4_PE" in info.value.hint


def test_one_level_spread_over_two_axes_counts_once_against_the_fan_out():
    check_layout(parse_layout("(8,16)/((2_PE,4),(2_PE,8))"), MNCORE2.fanout)


def test_a_level_cannot_be_spread_and_replicated():
    with pytest.raises(ConstraintError, match="both spreads and replicates over L2B") as info:
        check_layout(parse_layout("(8,16)/((8_L2B),(16)); B@[L2B,PE]"), MNCORE2.fanout)
    assert "either spread" in info.value.hint


def test_the_same_layout_fits_one_machine_and_not_the_other():
    layout = parse_layout("(8,16)/((8_L2B),(16))")
    check_layout(layout, MNCORE2.fanout)
    with pytest.raises(ConstraintError, match="at most 2_L2B"):
        check_layout(layout, SMALL.fanout)


@pytest.mark.parametrize("spelled", ["(8,16)/((8,1),(16))", "(8,16)/((2,4),(1,16))",
                                     "(8,16)/((1_L2B,8),(16))"])
def test_layouts_that_spell_the_same_placement_are_the_same_type(spelled):
    """Size-1 factors and split local factors do not change where data lives, so values
    loaded with them combine with plainly written ones."""
    text = f'''def kernel(x: "f32[8,16] @ dram") -> "f32[8,16] @ dram":
    a = load(x, "{spelled}")
    b = load(x, "(8,16)/((8),(16))")
    return store(a + b)
'''
    kernel = parse(text)
    assert kernel.nodes[1].type.layout == kernel.nodes[2].type.layout


@pytest.mark.parametrize("shape", [(128, 1024), (16, 4096), (7, 3), (1,)])
def test_simple_layout_spreads_one_axis_within_the_fan_outs(shape):
    layout = simple_layout(shape, MNCORE2.fanout)
    check_layout(layout, MNCORE2.fanout)
    assert parse_layout(str(layout)) == layout
    assert layout.local_elements() * layout.spread_units() == _numel(shape)
    assert all(f.level in (None, *LEVELS) for axis in layout.axes for f in axis)


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def test_layout_values_are_frozen():
    layout = Layout((8,), ((Factor(8),),))
    with pytest.raises(AttributeError):
        layout.shape = (4,)  # type: ignore[misc]
