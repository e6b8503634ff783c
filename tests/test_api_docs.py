"""docs/api.md's worked example runs as written: its python blocks, top to bottom, as
one script (a notebook run from the first cell to the last)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.slow
def test_the_worked_example_runs(tmp_path):
    script = tmp_path / "notebook.py"
    script.write_text("\n\n".join(python_blocks(DOC.read_text())))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert re.search(r"\d+ -> \d+ cycles \(\d+\.\d\dx\), stopped by", done.stdout)
    assert (tmp_path / "runs" / "rmsnorm-notebook" / "best.leir").is_file()
