"""End to end: budgets, determinism, atomic best, kill -9 and resume, signals."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stochopt import load_spec
from stochopt.errors import StochoptError
from stochopt.leir import parse
from stochopt.search import optimize
from stochopt.search.budget import format_duration, parse_duration
from stochopt.search.rundir import read_events
from stochopt.verify import check

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = str(ROOT / "specs" / "softmax.py")
EVENT_KEYS = {"t", "chain", "proposer", "outcome", "cycles", "error", "tokens", "cost_usd"}


@pytest.mark.parametrize("text,seconds", [("30s", 30), ("10m", 600), ("48h", 172800),
                                          ("1h30m", 5400), ("90", 90), ("1.5m", 90)])
def test_budget_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "10x", "h", "-5s", "0s", "1h30", "ten minutes"])
def test_bad_budgets_are_clear_errors(text):
    with pytest.raises(StochoptError, match="duration"):
        parse_duration(text)


def test_format_duration_round_trips():
    assert parse_duration(format_duration(5400)) == 5400


def _strip(events):
    return [{k: v for k, v in e.items() if k not in ("t", "seconds")} for e in events]


def test_a_short_run_improves_softmax_with_a_verified_kernel(tmp_path):
    run_dir = tmp_path / "run"
    result = optimize(SOFTMAX, budget="60s", chains=1, seed=1, max_proposals=300,
                      run_dir=str(run_dir))
    assert result.best_cycles < result.baseline_cycles
    assert result.best_cycles >= result.roofline_cycles
    assert result.verified
    for name in ("run.json", "spec.py", "baseline.leir", "best.leir", "best.json",
                 "events.jsonl", "checkpoint.json"):
        assert (run_dir / name).is_file(), name
    events = read_events(run_dir / "events.jsonl")
    assert len(events) == 300
    assert all(EVENT_KEYS <= set(e) for e in events)
    assert {e["outcome"] for e in events} <= {"parse_error", "invalid", "wrong", "rejected",
                                              "accepted", "best"}
    best = json.loads((run_dir / "best.json").read_text())
    assert best["cycles"] == result.best_cycles and best["recheck"]["equivalent"]
    kernel = parse((run_dir / "best.leir").read_text())
    assert check(kernel, load_spec(SOFTMAX), examples=50, seed=9).equivalent


def test_the_same_seed_gives_the_same_events(tmp_path):
    runs = []
    for k in range(2):
        optimize(SOFTMAX, budget="120s", chains=1, seed=4, max_proposals=150,
                 run_dir=str(tmp_path / f"r{k}"))
        runs.append(_strip(read_events(tmp_path / f"r{k}" / "events.jsonl")))
    assert len(runs[0]) == 150
    assert runs[0] == runs[1]


def _start(args, cwd):
    return subprocess.Popen([sys.executable, "-m", "stochopt", "optimize", *args, "--quiet"],
                            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(predicate, timeout):
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def _searched_best(run_dir: Path) -> bool:
    try:
        return json.loads((run_dir / "best.json").read_text())["source"] == "search"
    except (OSError, ValueError, KeyError):
        return False


def test_kill_9_leaves_a_verified_best_and_resume_finishes(tmp_path):
    run_dir = tmp_path / "run"
    proc = _start([SOFTMAX, "--budget", "16s", "--chains", "1", "--run-dir", str(run_dir)],
                  tmp_path)
    assert _wait_for(lambda: _searched_best(run_dir), 40), proc.stderr.read() \
        if proc.poll() is not None else "no improvement found before the kill"
    time.sleep(5.5)  # let a checkpoint land after the improvement
    proc.kill()
    proc.wait()
    kernel = parse((run_dir / "best.leir").read_text())
    assert check(kernel, load_spec(SOFTMAX), examples=40, seed=5).equivalent
    state = json.loads((run_dir / "checkpoint.json").read_text())
    assert not state["finished"] and state["elapsed_s"] > 0
    before = len(read_events(run_dir / "events.jsonl"))
    done = subprocess.run([sys.executable, "-m", "stochopt", "optimize", "--resume",
                           str(run_dir), "--quiet"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    state = json.loads((run_dir / "checkpoint.json").read_text())
    assert state["finished"]
    events = read_events(run_dir / "events.jsonl")
    assert len(events) > before
    assert max(e["t"] for e in events) <= 16 + 3
    assert "cycles" in done.stdout


def test_sigterm_stops_cleanly_with_a_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    proc = _start([SOFTMAX, "--budget", "10m", "--chains", "2", "--run-dir", str(run_dir)],
                  tmp_path)
    assert _wait_for(lambda: (run_dir / "events.jsonl").is_file()
                     and (run_dir / "events.jsonl").stat().st_size > 0, 60)
    t = time.time()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert time.time() - t < 15
    assert proc.returncode == 0, err
    assert "interrupted" in out
    state = json.loads((run_dir / "checkpoint.json").read_text())
    assert state["finished"] is False and len(state["chains"]) == 2
    assert "Traceback" not in err


def test_bad_arguments_are_clear_errors(tmp_path):
    with pytest.raises(StochoptError, match="chains"):
        optimize(SOFTMAX, chains=0)
    with pytest.raises(StochoptError, match="proposer"):
        optimize(SOFTMAX, proposer="magic")
    with pytest.raises(StochoptError, match="llm needs a model"):
        optimize(SOFTMAX, proposer="llm")
    with pytest.raises(StochoptError, match="run.json"):
        optimize(resume=str(tmp_path))
    r = subprocess.run([sys.executable, "-m", "stochopt", "optimize", SOFTMAX, "--budget",
                        "ten"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2 and "duration" in r.stderr and "Traceback" not in r.stderr
