"""Shared pieces of the tuning database's tests: a database in a temporary folder, specs
at chosen shapes, and rows as a run would write them (without running a search)."""

import random
import tempfile
import time
from functools import cache
from pathlib import Path

import pytest

from stochopt.backend.cost import cost
from stochopt.leir.render import render
from stochopt.lower import lower
from stochopt.machine import load_machine
from stochopt.spec import load_spec
from stochopt.transform.greedy import descend
from stochopt.transform.plan import plan_to_json
from stochopt.tuning.database import Database
from stochopt.tuning.fingerprints import machine_print, spec_print
from stochopt.tuning.store import TuningDB, kernel_sha256, uid_of
from stochopt.verify.screening import ScreeningSet

SMALL = load_machine("small")

SOFTMAX = '''"""softmax at other shapes."""
import numpy as np

from stochopt import spec, tensor


@spec(inputs={{"x": tensor("f32", ({rows}, {cols}), low=-8.0, high=8.0)}})
def {name}(x):
    m = x.max(axis=1, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(axis=1, keepdims=True)
'''


def softmax_spec(folder: Path, rows: int = 128, cols: int = 1024, name: str = "softmax"):
    path = folder / f"{name}_{rows}x{cols}.py"
    path.write_text(SOFTMAX.format(rows=rows, cols=cols, name=name))
    return load_spec(path)


@pytest.fixture
def store(tmp_path):
    with Database(tmp_path / "tuning.db") as db:
        yield db


@cache
def softmax_at(rows: int, cols: int):
    """softmax at these shapes, with its lowering and greedy's descent on the small
    machine: (spec, baseline, kernel, plan), made once per test process."""
    spec = softmax_spec(Path(tempfile.mkdtemp(prefix="stochopt-specs-")), rows, cols)
    return (spec, *descended(spec))


def descended(spec, machine=SMALL):
    """The spec's lowering and greedy's descent from it (baseline, kernel, plan)."""
    baseline = lower(spec, machine)
    screening = ScreeningSet(spec, baseline, machine, 3, 0)
    descent = descend(baseline, machine, screening.error, random.Random(0))
    return baseline, descent.kernel, descent.plan


def remember(db: TuningDB, spec, kernel, plan=None, machine=SMALL, baseline=None,
             run_dir="runs/x", started=None, checked_here=1, verifier=None,
             proof_extra=None) -> dict:
    """The rows a run of ``spec`` that proved ``kernel`` would have written; the kernel
    row is returned."""
    from stochopt.tuning.fingerprints import verifier_version
    sp = spec_print(spec)
    mfp, mname, constants = machine_print(machine)
    db.add_spec(sp)
    db.add_machine(mfp, mname, constants)
    started = time.time() if started is None else started
    run_uid = uid_of("host", run_dir, started)
    base = baseline if baseline is not None else lower(spec, machine)
    db.add_run({"uid": run_uid, "spec": sp.fingerprint, "machine": mfp, "run_dir": run_dir,
                "host": "host", "started": started, "start": "lowering",
                "baseline": render(base, machine),
                "baseline_cycles": cost(base, machine).cycles, "stochopt_version": "0.1.0"})
    text = render(kernel, machine)
    verdict = {"equivalent": True, "examples": 200, "seed": 0, "max_semantic_error": 0.0,
               "max_precision_error": 0.25}
    row = {"uid": uid_of(run_uid, kernel_sha256(text)), "spec": sp.fingerprint,
           "machine": mfp, "run": run_uid, "text": text, "text_sha256": kernel_sha256(text),
           "cycles": cost(kernel, machine).cycles, "source": "search", "t": 1.0, "chain": 0,
           "proof": {"verdict": verdict, **(proof_extra or {})},
           "verifier": verifier or verifier_version(), "checked_here": checked_here,
           "precision_margin": 0.75, "plan": None if plan is None else plan_to_json(plan),
           "refuted": None, "created": started + 1, "stochopt_version": "0.1.0"}
    db.add_kernel(row)
    return row
