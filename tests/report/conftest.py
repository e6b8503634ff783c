"""Run directories to report on: one made by a real (short) search, and small ones
written file by file, whose numbers the tests know in advance."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from stochopt.verify.check import sha256_text

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = ROOT / "specs" / "softmax.py"

# the baseline of specs/softmax.py on mncore2 and a verified best found by a search
BASELINE = '''# spec: specs/softmax.py
def softmax(x: "f32[128,1024] @ dram") -> "f32[128,1024] @ dram":
    v1 = load(x, "(128,1024)/((8_L2B,8_L1B,2_MAB),(1024))")
    v2 = reduce_max(v1, axis=1, keepdims=True)
    v3 = v1 - v2
    v4 = exp(v3)
    v5 = reduce_sum(v4, axis=1, keepdims=True)
    v6 = v4 / v5
    return store(v6)
'''
BEST = '''# spec: specs/softmax.py
def softmax(x: "f32[128,1024] @ dram") -> "f32[128,1024] @ dram":
    v1 = load(x, "(128,1024)/((8_L2B,8_L1B,2),(4_PE,16_MAB,16))")
    v2 = reduce_max(v1, axis=1, keepdims=True)
    v3 = v1 - v2
    v4 = exp(v3)
    v5 = reduce_sum(v4, axis=1, keepdims=True)
    v4_1 = reciprocal(v5)
    v6 = v4 * v4_1
    return store(v6)
'''
ROOFLINE = 1536


def _event(t, chain, proposer, outcome, cycles=None, move="m", tokens=0, cost_usd=0.0):
    return {"chain": chain, "proposer": proposer, "move": move, "outcome": outcome,
            "cycles": cycles, "error": None, "tokens": tokens, "cost_usd": cost_usd,
            "seconds": 0.01, "t": t}


# The steps of the global best (baseline 7652): rewrite to 5000 at t=1 (saves 2652),
# llm to 3000 at t=3 (saves 2000), mutate to `best` at t=4 (saves 3000 - best). Chain 1's
# best of 5200 at t=2 is no step: chain 0 was already at 5000.
def story(best_cycles: int) -> list[dict]:
    return [
        _event(0.5, 0, "mutate", "invalid"),
        _event(0.6, 0, "mutate", "accepted", 7600),
        _event(0.8, 1, "rewrite", "rejected", 9000),
        _event(1.0, 0, "rewrite", "best", 5000, move="fuse"),
        _event(1.5, 1, "llm", "parse_error", tokens=900, cost_usd=0.002),
        _event(2.0, 1, "mutate", "best", 5200, move="layout"),
        _event(2.5, 0, "mutate", "wrong", 4000),
        _event(3.0, 1, "llm", "best", 3000, move="rewrite whole kernel", tokens=1100,
               cost_usd=0.003),
        _event(3.5, 0, "mutate", "accepted", 3100),
        _event(4.0, 0, "mutate", "best", best_cycles, move="delete"),
        _event(4.5, 1, "rewrite", "accepted", 3050),
    ]


@pytest.fixture(scope="session")
def best_cycles() -> int:
    from stochopt.backend.cost import cost
    from stochopt.leir.parser import parse
    return cost(parse(BEST, "mncore2"), "mncore2").cycles


def write_run(rd: Path, best_cycles: int, events: list[dict] | None = None,
              finished: bool = True, age_s: float = 3600.0, checkpoint: dict | None = None,
              best_text: str = BEST, **run_fields) -> Path:
    """A run directory at rd, written file by file as stochopt optimize writes it."""
    (rd / "counterexamples").mkdir(parents=True)
    events = story(best_cycles) if events is None else events
    started = time.time() - age_s - 10
    run = {"spec": "softmax", "spec_path": str(SOFTMAX), "name": None,
           "machine": {"name": "mncore2"}, "machine_name": "mncore2", "budget_s": 10.0,
           "proposer": "mixed", "arms": ["mutate", "rewrite", "llm"], "chains": 2,
           "seed": 0, "init": None, "max_proposals": None, "max_cost": None,
           "config": {}, "llm": {"model": "m"}, "roofline_cycles": ROOFLINE,
           "baseline_cycles": 7652, "started": started, "versions": {}, **run_fields}
    (rd / "run.json").write_text(json.dumps(run))
    (rd / "spec.py").write_text(SOFTMAX.read_text())
    (rd / "baseline.leir").write_text(BASELINE)
    (rd / "best.leir").write_text(best_text)
    verdict = {"equivalent": True, "examples": 200, "seed": 3,
               "max_semantic_error": 1e-6, "max_precision_error": 0.7}
    best = {"cycles": best_cycles, "source": "search", "t": 4.0, "chain": 0,
            "profile": {}, "verdict": verdict,
            "certificate": {**verdict, "kernel_sha256": sha256_text(best_text),
                            "spec": "softmax"},
            "recheck": {**verdict, "seed": 104729}}
    (rd / "best.json").write_text(json.dumps(best))
    (rd / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (rd / "checkpoint.json").write_text(json.dumps(checkpoint or {
        "elapsed_s": 10.0, "proposals": len(events), "chains": [], "finished": finished,
        "best_cycles": best_cycles, "tokens": 2000, "cost_usd": 0.005}))
    for p in rd.iterdir():
        os.utime(p, (started + 10, time.time() - age_s))
    return rd


@pytest.fixture
def make_run(tmp_path, best_cycles):
    """make_run(name, events=..., finished=..., age_s=..., **run_json) -> a run directory
    written file by file, as stochopt optimize writes it (see write_run)."""

    def make(name: str = "run", **options) -> Path:
        return write_run(tmp_path / name, best_cycles, **options)

    return make


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, best_cycles) -> Path:
    """make_run()'s finished run, written once per test module for the tests that only
    read it (so that its HTML page, about a second of matplotlib, is drawn once)."""
    return write_run(tmp_path_factory.mktemp("finished") / "run", best_cycles)


@pytest.fixture(scope="session")
def real_run(tmp_path_factory):
    """A short real search on specs/softmax.py, on the small machine: (run dir, result)."""
    from stochopt.search import optimize
    from stochopt.search.chain import ChainConfig

    rd = tmp_path_factory.mktemp("real") / "softmax-run"
    result = optimize(str(SOFTMAX), budget="20s", chains=1, run_dir=str(rd), machine="small",
                      max_proposals=25, config=ChainConfig(full_examples=10, escape_kernels=300))
    return rd, result
