"""`stochopt lower` and `stochopt specs` as a user runs them."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

from click.testing import CliRunner

from stochopt.cli import main
from stochopt.leir import parse, render
from stochopt.lower import lower
from stochopt.lower.catalog import bundled_spec_paths
from stochopt.machine import load_machine
from stochopt.spec import load_spec

SOFTMAX = next(p for p in bundled_spec_paths() if p.stem == "softmax")
TWO = '''
@spec(inputs={"x": tensor("f32", (8, 16))})
def first(x):
    return x + 1.0


@spec(inputs={"x": tensor("f32", (8, 16))})
def second(x):
    return np.exp(x)
'''


def _run(*args):
    return CliRunner().invoke(main, list(map(str, args)))


def _flat(text: str) -> str:
    """The text with rich's line wrapping undone."""
    return " ".join(text.split())


def test_lower_prints_the_kernel_headed_by_its_spec_path():
    result = _run("lower", SOFTMAX)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == f"# spec: {SOFTMAX}"
    assert parse(result.stdout) == lower(load_spec(SOFTMAX))


def test_lower_dash_o_writes_the_file(tmp_path):
    out = tmp_path / "base.leir"
    result = _run("lower", SOFTMAX, "-o", out)
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert f"wrote {out}" in result.stderr
    # the file records its machine, and its spec relative to itself (so it resolves
    # from any folder): otherwise it is the kernel render() writes
    kernel = lower(load_spec(SOFTMAX))
    relative = os.path.relpath(SOFTMAX, tmp_path)
    assert out.read_text() == render(dataclasses.replace(kernel, spec_path=relative),
                                     load_machine("mncore2"))
    assert out.read_text().splitlines()[:2] == [f"# spec: {relative}", "# machine: mncore2"]


def test_lower_name_chooses_a_spec_and_without_it_is_an_error(write_spec):
    path = write_spec(TWO)
    chosen = _run("lower", path, "--name", "second")
    assert chosen.exit_code == 0, chosen.output
    assert "def second(" in chosen.stdout and "exp(" in chosen.stdout
    ambiguous = _run("lower", path)
    assert ambiguous.exit_code == 2
    assert "several specs: first, second" in _flat(ambiguous.stderr)
    assert "--name" in ambiguous.stderr


def test_lower_on_the_small_machine_fits_there():
    result = _run("lower", SOFTMAX, "--machine", "small")
    assert result.exit_code == 0, result.output
    assert parse(result.stdout, "small") is not None


def test_lower_errors_exit_2_with_a_message_and_no_traceback(write_spec, tmp_path):
    unsupported = write_spec('@spec(inputs={"x": tensor("f32", (4, 8))})\n'
                             "def f(x):\n    return np.sort(x, axis=1)\n", name="sorting")
    for args, words in [
        (("lower", unsupported), "np.sort"),
        (("lower", tmp_path / "missing.py"), "does not exist"),
        (("lower", SOFTMAX, "--machine", "nope"), "unknown machine"),
        (("lower", SOFTMAX, "--name", "other"), "no spec named 'other'"),
    ]:
        result = _run(*args)
        assert result.exit_code == 2, (args, result.output)
        assert "error:" in result.stderr and words in _flat(result.stderr)
        assert "Traceback" not in result.output
        assert isinstance(result.exception, SystemExit)


def test_lower_as_a_subprocess_exits_2_without_a_traceback(write_spec):
    path = write_spec('@spec(inputs={"x": tensor("f32", (4, 8))})\n'
                      "def f(x):\n    return np.cumsum(x, axis=1)\n")
    proc = subprocess.run([sys.executable, "-m", "stochopt", "lower", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    err = _flat(proc.stderr)
    assert "np.cumsum" in err and "line 9" in err and "--init kernel.leir" in err
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_lower_error_keeps_the_square_brackets_of_the_spec_line(write_spec):
    path = write_spec('@spec(inputs={"x": tensor("f32", (4, 8))})\n'
                      "def f(x):\n    return x[x > 0]\n")
    result = _run("lower", path)
    assert result.exit_code == 2
    assert "return x[x > 0]" in _flat(result.stderr)


def test_specs_json_lists_every_bundled_spec():
    result = _run("specs", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["specs"]
    assert [r["name"] for r in rows] == [p.stem for p in bundled_spec_paths()]
    for r in rows:
        assert set(r) >= {"name", "path", "shapes", "doc", "flops", "bytes", "roofline_cycles",
                          "baseline_cycles", "bound"}
        assert r["bound"] in ("dram", "compute")


def test_specs_table_names_every_spec():
    result = _run("specs")
    assert result.exit_code == 0, result.output
    assert "bundled specs on mncore2" in result.stdout
