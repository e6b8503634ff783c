"""The held-out set (tests/verify/heldout/): each wrong kernel's witness is a legal input,
saved as witnesses.py builds it, on which the kernel is refused. Slow only: the set
measures the verifier (heldout/measure.py) and stays out of the development loop, so
the fast tier never runs it; these tests only keep the set itself sound."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from stochopt.verify import check

HELDOUT = Path(__file__).resolve().parent / "heldout"
WRONG = sorted((HELDOUT / "wrong").glob("*.leir"))
EQUIVALENT = sorted((HELDOUT / "equivalent").glob("*.leir"))


def _witnesses():
    spec = importlib.util.spec_from_file_location("heldout_witnesses",
                                                  HELDOUT / "witnesses.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_every_wrong_kernel_has_a_witness_builder_and_a_saved_witness():
    builders = _witnesses().BUILDERS
    assert sorted(builders) == [p.stem for p in WRONG]
    assert sorted(p.stem for p in (HELDOUT / "witness").glob("*.npz")) == sorted(builders)


@pytest.mark.slow
@pytest.mark.parametrize("path", WRONG, ids=lambda p: p.stem)
def test_held_out_wrong_kernel_is_refused_on_its_legal_witness(path, read_corpus):
    case = read_corpus(path)
    inputs = _witnesses().build(path.stem)  # raises unless legal for the spec
    with np.load(HELDOUT / "witness" / f"{path.stem}.npz") as saved:
        for name, x in inputs.items():
            assert np.array_equal(saved[name], np.asarray(x, saved[name].dtype)), name
    verdict = check(case.kernel, case.spec, examples=1, baseline=case.baseline,
                    extra_inputs=[inputs], structured=False)
    assert not verdict.equivalent
    assert verdict.counterexample.found_by.endswith("given input"), verdict.counterexample


@pytest.mark.slow
@pytest.mark.parametrize("path", EQUIVALENT, ids=lambda p: p.stem)
def test_held_out_equivalent_kernel_reads_with_its_spec(path, read_corpus):
    case = read_corpus(path)
    assert case.kernel.signature().keys() == case.spec.inputs.keys()
    assert case.why
