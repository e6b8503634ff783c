"""docs/leir.md is pasted into LLM prompts: it must name every op of the table with the
table's own signature, state the parser's real caps, and its example kernels must parse."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stochopt.leir import DTYPES, LEVELS, OPS, parse
from stochopt.leir.ir import MAX_OPS
from stochopt.leir.ops import REQUIRED, SUBSCRIPT
from stochopt.leir.parser import MAX_DEPTH, MAX_STEPS, MAX_TEXT, MAX_TRIP
from stochopt.machine import MNCORE2, SMALL

DOC = (Path(__file__).resolve().parents[2] / "docs" / "leir.md").read_text()


def signature(name: str) -> str:
    """The call signature the op table defines: parameter names and defaults, in order."""
    parts = [p.name if p.default is REQUIRED else f"{p.name}={p.default!r}"
             for p in OPS[name].params]
    return f"{name}({', '.join(parts)})"


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_op_has_an_entry_with_the_tables_signature(name):
    assert f"- `{signature(name)}`" in DOC, f"docs/leir.md lacks an entry for {signature(name)}"


def test_the_doc_lists_no_op_the_table_lacks():
    entries = set(re.findall(r"^- `([a-z_0-9]+)\(", DOC, re.M))
    assert entries == set(OPS)


def _spelled(op) -> str:
    """How section 5 lists an op's operator: `+` add, unary `-` neg, `x[a:b]` slice."""
    if op.operator == SUBSCRIPT:
        return f"`x[a:b]` {op.name}"
    if len(op.tensor_params) == 1:
        return f"unary `{op.operator}` {op.name}"
    return f"`{op.operator}` {op.name}"


def test_operators_in_the_doc_are_the_tables():
    for op in OPS.values():
        if op.operator:
            assert _spelled(op) in DOC, op.name


def test_the_doc_states_the_parsers_caps():
    assert f"{MAX_TRIP:,} iterations" in DOC
    assert f"{MAX_OPS:,} ops" in DOC
    assert f"{MAX_STEPS:,} statements" in DOC
    assert f"{MAX_DEPTH} deep" in DOC
    assert f"{MAX_TEXT:,} characters" in DOC


def test_the_doc_names_every_dtype_level_and_fan_out():
    for dtype in DTYPES:
        assert f"`{dtype}`" in DOC
    for level in LEVELS:
        row = re.search(rf"^\| `{level}` \|.*\| (\d+) \| (\d+) \|$", DOC, re.M)
        assert row, level
        assert (int(row.group(1)), int(row.group(2))) == (MNCORE2.fanout[level],
                                                          SMALL.fanout[level])
    assert f"{MNCORE2.pe_local_bytes}" in DOC


def test_the_docs_example_kernels_parse():
    blocks = re.findall(r"```python\n(.*?)```", DOC, re.S)
    assert len(blocks) >= 2
    for block in blocks:
        parse(block)
