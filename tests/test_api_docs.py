"""docs/api.md's worked example runs as written: its python blocks, top to bottom, as
one script (a notebook run from the first cell to the last)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "api.md"


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", markdown, flags=re.S | re.M)


def test_the_doc_has_the_worked_example():
    blocks = python_blocks(DOC.read_text())
    steps = ["stochopt.lower(", "stochopt.run(", "stochopt.verify(", "stochopt.optimize(",
             "stochopt.report("]
    text = "\n".join(blocks)
    assert all(step in text for step in steps)
    assert [text.index(step) for step in steps[1:]] == sorted(text.index(s) for s in steps[1:])


# The worked example runs top to bottom as docs/api.ipynb in a real Jupyter kernel:
# tests/test_api_notebook.py.
