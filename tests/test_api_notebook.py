"""docs/api.ipynb is docs/api.md's worked example as a notebook, and it runs in a real
Jupyter kernel: every cell executes, and the rich displays (the kernel, the verdict,
the run's result, the report) and the live progress view are in its outputs.

The notebook is made from the doc, never edited by hand:
``python tests/test_api_notebook.py --write`` rewrites it after the doc changes.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "api.md"
NOTEBOOK = ROOT / "docs" / "api.ipynb"
START = "## A worked example"


def notebook_from_doc(markdown: str) -> dict:
    """The worked example's section as cells: its ```python blocks are code cells, the
    prose between them (other fenced blocks included) markdown cells."""
    section = markdown[markdown.index(START):]
    end = section.find("\n## ", len(START))
    section = section if end < 0 else section[:end]
    cells = []
    for i, part in enumerate(re.split(r"^```python\n(.*?)^```\n?", section,
                                      flags=re.S | re.M)):
        text = part.strip("\n")
        if not text:
            continue
        kind = "code" if i % 2 else "markdown"
        cell = {"cell_type": kind, "id": f"cell-{len(cells)}", "metadata": {},
                "source": text.splitlines(keepends=True)}
        if kind == "code":
            cell.update(execution_count=None, outputs=[])
        cells.append(cell)
    return {"cells": cells, "metadata": {"kernelspec": {"display_name": "Python 3",
                                                        "language": "python",
                                                        "name": "python3"},
                                         "language_info": {"name": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def test_the_notebook_is_the_doc_s_worked_example():
    made = notebook_from_doc(DOC.read_text())
    kept = json.loads(NOTEBOOK.read_text())
    assert [(c["cell_type"], _source(c)) for c in kept["cells"]] == \
        [(c["cell_type"], _source(c)) for c in made["cells"]], \
        "docs/api.ipynb is out of date: python tests/test_api_notebook.py --write"
    code = [c for c in kept["cells"] if c["cell_type"] == "code"]
    assert len(code) >= 6 and all(not c["outputs"] for c in code)  # kept without outputs


def _outputs(cell: dict) -> list[dict]:
    return [o for o in cell.get("outputs", []) if o["output_type"] in
            ("display_data", "execute_result")]


@pytest.mark.slow
def test_the_notebook_runs_in_a_real_kernel(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.reads(NOTEBOOK.read_text(), as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError, with the cell and its traceback
    code = [c for c in nb.cells if c.cell_type == "code"]
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors
    html_of = {}
    for cell in code:
        for out in _outputs(cell):
            if "text/html" in out.get("data", {}):
                html_of.setdefault(cell.source.splitlines()[-1], []).append(
                    out["data"]["text/html"])
    # each object a cell ends with shows itself as the project's page, not a repr
    for last in ("kernel", "verdict", "result", "facts"):
        shown = html_of.get(last)
        assert shown and shown[-1].startswith("<div class='stochopt-report'>"), last
    # the live view: a display the search redrew in the optimize cell, left at its end
    optimize = next(c for c in code if "stochopt.optimize(" in c.source)
    live = [o["data"]["text/html"] for o in _outputs(optimize)
            if o["output_type"] == "display_data" and "text/html" in o.get("data", {})]
    assert live and "starting the search" not in live[0]
    assert re.search(r"\d+ cycles", re.sub(r"<[^>]+>", " ", live[0]))
    printed = "".join(o.get("text", "") for c in code for o in c.outputs
                      if o.output_type == "stream")
    assert re.search(r"\d+ -> \d+ cycles \(\d+\.\d\dx\), stopped by", printed)
    assert (tmp_path / "runs" / "rmsnorm-notebook" / "best.leir").is_file()


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_api_notebook.py --write")
    NOTEBOOK.write_text(json.dumps(notebook_from_doc(DOC.read_text()), indent=1) + "\n")
    print(f"wrote {NOTEBOOK.relative_to(ROOT)}")
