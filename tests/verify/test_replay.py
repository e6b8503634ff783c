"""Replayed inputs (--inputs, or a dict given to stochopt.verify) are checked before any
verdict: the spec's inputs only, their shapes, a kind of value their dtype can hold,
finite, inside the declared ranges. Each mistake is one line and exit 2."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

import stochopt
from stochopt.cli import main
from stochopt.errors import StochoptError
from stochopt.spec import spec, tensor
from stochopt.verify.replay import checked_inputs

FAST = "docs/examples/softmax_fast.leir"  # spec softmax: x f32[128,1024] in [-8, 8]


@spec(inputs={"x": tensor("f32", (2, 3), low=-1.0, high=1.0),
              "n": tensor("i32", (2,), low=0, high=300),
              "keep": tensor("bool", (2, 3))})
def small(x, n, keep):
    return np.where(keep, x, 0.0) * n[:, None]


GOOD = {"x": np.zeros((2, 3), np.float32), "n": np.array([1, 300]),
        "keep": np.array([[True, False, True]] * 2)}


def test_good_inputs_come_back_in_their_dtypes():
    out = checked_inputs(GOOD, small, "inputs")
    assert out["x"].dtype == np.float32 and out["n"].dtype == np.int32
    assert out["keep"].dtype == np.bool_ and out["n"].tolist() == [1, 300]
    # 0/1 numbers for a mask and whole floats for i32 mean what they say
    again = checked_inputs(dict(GOOD, keep=np.ones((2, 3)), n=np.array([2.0, 3.0])),
                           small, "inputs")
    assert again["keep"].all() and again["n"].tolist() == [2, 3]


@pytest.mark.parametrize("change, message", [
    ({"x": np.full((2, 3), "a")}, "x holds <U1 values, the spec wants f32"),
    ({"x": np.zeros((2, 3), complex)}, "x holds complex128 values"),
    ({"x": np.zeros((2, 3), bool)}, "x holds bool values, the spec wants f32"),
    ({"x": np.zeros((3, 2), np.float32)}, r"x has shape \(3, 2\), the spec wants \(2, 3\)"),
    ({"x": np.full((2, 3), np.nan)}, "x holds nan at \\[0, 0\\]; inputs must be finite"),
    ({"x": np.array([[0, 0, 0], [0, 0, 1.5]])},
     r"x holds 1.5 at \[1, 2\], outside its declared range \[-1, 1\]"),
    ({"n": np.array([1, 301])}, r"n holds 301 at \[1\], outside its declared range"),
    ({"n": np.array([1.5, 2.0])}, "whole numbers"),
    ({"n": np.array([2**40, 0])}, "outside its declared range"),  # not wrapped first
    ({"keep": np.full((2, 3), 2)}, "keep holds 2 at \\[0, 0\\], the spec wants bool"),
    ({"extra": np.zeros(1)}, "names x, n, keep, extra, but spec small takes x, n, keep"),
])
def test_each_mistake_is_named(change, message):
    with pytest.raises(StochoptError, match=message):
        checked_inputs(dict(GOOD, **change), small, "inputs")


def test_a_missing_input_is_named():
    with pytest.raises(StochoptError, match="names x, keep, but spec small takes x, n"):
        checked_inputs({"x": GOOD["x"], "keep": GOOD["keep"]}, small, "inputs")


def test_verify_checks_a_dict_of_inputs_too():
    with pytest.raises(StochoptError, match="outside its declared range"):
        stochopt.verify(FAST, inputs={"x": np.full((128, 1024), 9.0, np.float32)})


@pytest.mark.parametrize("arrays, message", [
    ({"x": np.full((128, 1024), "a")}, "holds <U1 values"),
    ({"x": np.full((128, 1024), 100.0, np.float32)}, "outside its declared range [-8, 8]"),
    ({"x": np.full((128, 1024), np.inf, np.float32)}, "must be finite"),
    ({"x": np.zeros((128, 1024)), "y": np.zeros(2)}, "names x, y, but spec softmax takes x"),
    ({"x": np.zeros((4, 4), np.float32)}, "has shape (4, 4)"),
])
def test_bad_inputs_files_exit_2_with_one_line(arrays, message, tmp_path, repo,
                                               monkeypatch):
    monkeypatch.chdir(repo)
    npz = tmp_path / "bad.npz"
    np.savez(npz, **arrays)
    result = CliRunner().invoke(main, ["verify", FAST, "--inputs", str(npz)])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # no traceback
    assert message in result.output and len(result.output.strip().splitlines()) == 1


def test_a_file_that_is_not_an_npz_exits_2(tmp_path, repo, monkeypatch):
    monkeypatch.chdir(repo)
    path = tmp_path / "bad.npz"
    path.write_text("not a zip")
    result = CliRunner().invoke(main, ["verify", FAST, "--inputs", str(path)])
    assert result.exit_code == 2 and "cannot read inputs" in result.output
