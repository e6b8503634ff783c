"""A fresh virtual environment: `pip install -e` of this tree, then the API as documented,
from a folder outside the repository."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

USE = """
import json, sys
from pathlib import Path
import stochopt
from stochopt.search.chain import ChainConfig
assert Path(stochopt.__file__).resolve().is_relative_to(Path(sys.argv[1]).resolve()), \\
    stochopt.__file__
missing = [n for n in ("lower", "run", "verify", "optimize", "report", "load_kernel")
           if n not in stochopt.__all__ or not callable(getattr(stochopt, n))]
assert not missing, missing
spec = stochopt.load_spec(Path(sys.argv[1]) / "specs" / "softmax.py")
kernel = stochopt.lower(spec, machine="small")
execution = stochopt.run(kernel, machine="small")
verdict = stochopt.verify(kernel, spec, examples=5, machine="small")
result = stochopt.optimize(spec, budget="60s", chains=1, max_proposals=5, machine="small",
                           run_dir="run", config=ChainConfig(full_examples=10))
facts = stochopt.report(result.run_dir)
print(json.dumps({"cycles": execution.cycles, "equivalent": verdict.equivalent,
                  "html": "EQUIVALENT" in verdict._repr_html_(),
                  "proposals": facts["proposals"], "verified": result.verified}))
"""


def _venv_python(folder: Path) -> Path:
    return folder / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


@pytest.mark.slow
def test_a_fresh_venv_installs_the_tree_and_uses_the_api(tmp_path):
    venv = tmp_path / "venv"
    # the system's packages stand in for the dependencies (--no-deps): only the build
    # backend is fetched, as `pip install -e .` fetches it (pip caches it)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, timeout=300)
    python = _venv_python(venv)
    install = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps",
                              "-e", str(ROOT)], capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-3000:]
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run([str(python), "-c", USE, str(ROOT)], cwd=work, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = __import__("json").loads(done.stdout.strip().splitlines()[-1])
    assert facts["cycles"] > 0 and facts["equivalent"] and facts["html"]
    assert facts["proposals"] == 5 and facts["verified"]
