"""A short run never hides a faster kernel behind 1.00x: the spec's own lowering is not
checked (it is the baseline every check compares against), so the check workers spend
a short budget on the faster kernels the chains find; a kernel whose check does not
finish is named as found but unproved, with the command that proves it.

The check workers run a stub (the fork start method carries the monkeypatch into
them): a slow one that never finishes within the budget, as a large spec's check on a
loaded machine, and an instant one that accepts, to see the proved path reported."""

import importlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stochopt.backend.cost import cost
from stochopt.leir import parse
from stochopt.rundir import read_events
from stochopt.search import optimize
from stochopt.search.display import summary_lines
from stochopt.verify.check import Verdict

from .test_optimize import SOFTMAX, env

# the module (stochopt.verify's own `check` attribute is the function)
check_module = importlib.import_module("stochopt.verify.check")


def _recording(tmp_path: Path, finishes: bool):
    """A stub for verify.check.check that records each kernel it is asked about (in a
    file: it runs in the check worker) and either proves it at once or runs until its
    deadline, as a check too slow for the budget."""
    calls = tmp_path / "checked.txt"

    def stub(kernel, spec, *, examples=200, seed=0, machine=None, baseline=None,
             deadline=None, **_):
        with open(calls, "a") as f:
            f.write(f"{cost(kernel, machine).cycles}\n")
        if finishes:
            return Verdict(True, examples, seed)
        while deadline is None or not time.monotonic() > deadline:
            time.sleep(0.02)
        return Verdict(False, 0, seed, interrupted=True)
    return stub, calls


def _checked(calls: Path) -> list[int]:
    return [int(line) for line in calls.read_text().split()] if calls.exists() else []


@pytest.mark.slow
def test_a_short_run_names_the_faster_kernel_its_slow_check_could_not_prove(
        tmp_path, monkeypatch):
    stub, calls = _recording(tmp_path, finishes=False)
    monkeypatch.setattr(check_module, "check", stub)
    run_dir = tmp_path / "run"
    result = optimize(SOFTMAX, budget="10s", chains=1, check_workers=1, seed=1,
                      proposer="mutate", run_dir=str(run_dir))
    baseline = result.baseline_cycles
    # the lowering was never sent for a check: every check was of a faster kernel
    assert _checked(calls) and all(c < baseline for c in _checked(calls))
    assert result.best_cycles == baseline and result.verified  # the baseline, as lowered
    assert result.unproved_cycles is not None and result.unproved_cycles < baseline
    unproved = parse((run_dir / "unproved.leir").read_text())
    assert cost(unproved).cycles == result.unproved_cycles
    best = json.loads((run_dir / "best.json").read_text())
    assert best["proof"] == "lowering"
    assert best["unproved"]["prove"] == (f"stochopt verify {run_dir}/unproved.leir "
                                         f"--spec {run_dir}/spec.py")
    summary = summary_lines(result)
    speedup = f"{baseline / result.unproved_cycles:.2f}x"
    assert summary[0].startswith(f"softmax on mncore2: {baseline} -> "
                                 f"{result.unproved_cycles} cycles ({speedup}) found, UNPROVED")
    assert any(line.startswith("unproved:") and best["unproved"]["prove"] in line
               for line in summary)
    assert not any("own full check" in note for note in result.notes)
    outcomes = {e.get("outcome") for e in read_events(run_dir / "events.jsonl")}  # and aggregates
    assert "unproved" in outcomes and "best" not in outcomes
    report = subprocess.run([sys.executable, "-m", "stochopt", "report", str(run_dir)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env())
    assert report.returncode == 0, report.stderr
    cycles = next(line for line in report.stdout.splitlines() if line.startswith("cycles"))
    assert f"-> {result.unproved_cycles}" in cycles  # never a bare 1.00x
    verified = next(line for line in report.stdout.splitlines() if line.startswith("verified"))
    assert "yes" in verified and "lowering" in " ".join(report.stdout.split())


@pytest.mark.slow
def test_a_short_run_whose_checks_finish_reports_the_proved_kernel(tmp_path, monkeypatch):
    stub, calls = _recording(tmp_path, finishes=True)
    monkeypatch.setattr(check_module, "check", stub)
    run_dir = tmp_path / "run"
    result = optimize(SOFTMAX, budget="10s", chains=1, check_workers=1, seed=1,
                      proposer="mutate", run_dir=str(run_dir))
    assert _checked(calls) and all(c < result.baseline_cycles for c in _checked(calls))
    assert result.best_cycles < result.baseline_cycles and result.speedup > 1
    assert result.verified and result.unproved_cycles is None
    assert min(_checked(calls)) <= result.best_cycles  # best.leir is a kernel checked
    best = json.loads((run_dir / "best.json").read_text())
    assert best["source"] == "search" and best["verdict"]["equivalent"]
    assert "proof" not in best
    assert f"({result.speedup:.2f}x)" in summary_lines(result)[0]
