"""Helpers for the verifier's tests: the corpora of wrong and equivalent kernels, each
read with its spec (named on its '# spec:' line, relative to the repository root) and
the spec's baseline kernel, lowered once per session."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from stochopt.leir import parse
from stochopt.leir.ir import Kernel
from stochopt.lower import lower
from stochopt.spec import Spec, load_spec

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class CorpusKernel:
    path: Path
    kernel: Kernel
    spec: Spec
    baseline: Kernel
    why: str             # the comment under the '# spec:' line
    examples: int | None  # a '# examples: N' line, where the default is not enough


@functools.cache
def _spec_and_baseline(spec_path: str) -> tuple[Spec, Kernel]:
    spec = load_spec(REPO / spec_path)
    return spec, lower(spec)


def _read_corpus_kernel(path: Path) -> CorpusKernel:
    text = path.read_text()
    spec_line = re.match(r"# spec: (\S+)\n", text)
    assert spec_line, f"{path.name}: the first line must be '# spec: PATH'"
    spec, baseline = _spec_and_baseline(spec_line.group(1))
    examples = re.search(r"^# examples: (\d+)$", text, re.M)
    why = " ".join(line[2:] for line in text.splitlines()[1:]
                   if line.startswith("# ") and not line.startswith(("# examples:",
                                                                      "# witness:")))
    return CorpusKernel(path, parse(text), spec, baseline, why,
                        int(examples.group(1)) if examples else None)


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def spec_and_baseline():
    """spec_and_baseline("specs/X.py") -> (Spec, its lowered baseline), cached."""
    return _spec_and_baseline


@pytest.fixture(scope="session")
def read_corpus():
    """read_corpus(path) -> CorpusKernel: the kernel, its spec and baseline, and why."""
    return _read_corpus_kernel
