"""End to end: budgets, determinism, atomic best, kill -9 and resume, signals."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stochopt import load_spec
from stochopt.backend.cost import cost
from stochopt.durations import format_duration, parse_duration
from stochopt.errors import StochoptError
from stochopt.leir import parse
from stochopt.rundir import read_events
from stochopt.search import optimize
from stochopt.search.chain import ChainConfig
from stochopt.search.display import summary_lines
from stochopt.search.supervisor import finish_reserve
from stochopt.verify import check

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = str(ROOT / "specs" / "softmax.py")


# the CLI of this checkout, whatever stochopt is installed
def env() -> dict[str, str]:
    """The environment of a child process, read when it starts: the test's own tuning
    database (conftest.py sets XDG_CACHE_HOME per test) and this checkout on the path."""
    return {**os.environ, "PYTHONPATH": str(ROOT)}


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


@pytest.mark.slow
def test_a_short_run_improves_softmax_with_a_verified_kernel(tmp_path):
    run_dir = tmp_path / "run"
    result = optimize(SOFTMAX, budget="240s", chains=1, seed=1, max_proposals=300,
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
                                              "accepted", "best"}  # every check finished
    assert "best" in {e["outcome"] for e in events} and result.unproved_cycles is None
    best = json.loads((run_dir / "best.json").read_text())
    assert best["cycles"] == result.best_cycles and best["recheck"]["equivalent"]
    kernel = parse((run_dir / "best.leir").read_text())
    assert check(kernel, load_spec(SOFTMAX), examples=50, seed=9).equivalent


@pytest.mark.slow
def test_the_same_seed_gives_the_same_events(tmp_path):
    """With the full checks on the chain's path (no check workers) a one-chain run is
    reproducible."""
    runs = []
    for k in range(2):  # no tuning database: the second run would start from the first's best
        optimize(SOFTMAX, budget="240s", chains=1, seed=4, max_proposals=150,
                 run_dir=str(tmp_path / f"r{k}"), check_workers=0, db=False)
        runs.append(_strip(read_events(tmp_path / f"r{k}" / "events.jsonl")))
    assert len(runs[0]) == 150
    assert runs[0] == runs[1]


def _start(args, cwd):
    return subprocess.Popen([sys.executable, "-m", "stochopt", "optimize", *args, "--quiet"],
                            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env())


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


@pytest.mark.slow
def test_kill_9_leaves_a_verified_best_and_resume_finishes(tmp_path):
    run_dir = tmp_path / "run"
    # a proposal cap long enough that the kill lands before the end (quiet, the first
    # searched best came 10 s in and the kill 5.5 s later, at 3,172 proposals; a loaded
    # machine makes fewer in those 5.5 s), short enough that the resumed run finishes
    # soon (about 800 proposals a second quiet: a cap of 100,000 cost two minutes)
    proc = _start([SOFTMAX, "--budget", "10m", "--max-proposals", "25000", "--chains", "1",
                   "--run-dir", str(run_dir)], tmp_path)
    assert _wait_for(lambda: _searched_best(run_dir), 240), proc.stderr.read() \
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
                          text=True, timeout=600, env=env())
    assert done.returncode == 0, done.stderr
    state = json.loads((run_dir / "checkpoint.json").read_text())
    assert state["finished"]
    events = read_events(run_dir / "events.jsonl")
    assert len(events) > before
    assert max(e.get("t", e.get("t1", 0)) for e in events) <= 600 + 3  # t1: an aggregate's end
    assert "cycles" in done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_run_non_zero_with_a_resume_hint(tmp_path, signum):
    """Ctrl-C (or SIGTERM) exits 128 + the signal, says how to go on, and the report run
    right after says "interrupted", not "running"."""
    run_dir = tmp_path / "run"
    proc = _start([SOFTMAX, "--budget", "10m", "--chains", "2", "--run-dir", str(run_dir)],
                  tmp_path)
    assert _wait_for(lambda: (run_dir / "events.jsonl").is_file()
                     and (run_dir / "events.jsonl").stat().st_size > 0, 90)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, err
    assert "interrupted after" in out and f"--resume {run_dir}" in out
    assert "Traceback" not in err
    state = json.loads((run_dir / "checkpoint.json").read_text())
    assert state["finished"] is False and state["stopped_by"] == "interrupted"
    assert len(state["chains"]) == 2
    report = subprocess.run([sys.executable, "-m", "stochopt", "report", str(run_dir)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env())
    assert report.returncode == 0, report.stderr
    status = next(line for line in report.stdout.splitlines() if line.startswith("status"))
    assert "interrupted" in status and "running" not in status
    assert f"--resume {run_dir}" in " ".join(report.stdout.split())  # the note, unwrapped


def _children(pid: int) -> list[int]:
    """The processes whose parent is pid (from /proc), oldest first."""
    out = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and \
                    int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue  # ended meanwhile
    return sorted(out)


def _logged(run_dir: Path, event: str) -> bool:
    try:
        return f'"{event}"' in (run_dir / "events.jsonl").read_text()
    except OSError:
        return False


@pytest.mark.slow
def test_a_chain_killed_mid_run_starts_again_and_a_signal_to_the_group_stops_the_run(
        tmp_path):
    """A chain process that dies without a word (the OOM killer's SIGKILL) is started
    again from its last state, and the run goes on; so is a check worker's process, its
    candidate checked again. SIGTERM to the whole process group
    (a service manager, `kill -- -PGID`) stops the run as SIGTERM to the main process
    does: the workers ignore it and the main process stops them."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "stochopt", "optimize", SOFTMAX, "--budget",
                             "10m", "--chains", "2", "--run-dir", str(run_dir), "--quiet"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env(), start_new_session=True)
    try:
        assert _wait_for(lambda: (run_dir / "events.jsonl").is_file()
                         and (run_dir / "events.jsonl").stat().st_size > 0, 90)
        first, *_, last = _children(proc.pid)  # chains start first, check workers last
        os.kill(first, signal.SIGKILL)
        assert _wait_for(lambda: _logged(run_dir, "chain_restarted"), 30)
        os.kill(last, signal.SIGKILL)
        assert _wait_for(lambda: _logged(run_dir, "worker_restarted"), 30)
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "interrupted after" in out and "Traceback" not in err
    state = json.loads((run_dir / "checkpoint.json").read_text())
    assert state["stopped_by"] == "interrupted" and len(state["chains"]) == 2
    restarts = [e for e in read_events(run_dir / "events.jsonl")
                if e.get("event") == "chain_restarted"]
    assert len(restarts) == 1 and "SIGKILL" in restarts[0]["why"]
    report = subprocess.run([sys.executable, "-m", "stochopt", "report", str(run_dir)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env())
    notes = " ".join(report.stdout.split())
    assert "1 chain restarted from its last state" in notes
    assert "1 check worker started again" in notes


@pytest.mark.slow
def test_a_check_cut_by_the_budget_leaves_a_named_unproved_kernel(tmp_path):
    """A faster kernel whose full check cannot finish in the budget is not lost nor
    called rejected: unproved.leir, best.json, the summary and the report name it and
    say how to prove it."""
    run_dir = tmp_path / "run"
    endless = ChainConfig(full_examples=10_000_000)  # no check can finish in 15 s
    result = optimize(SOFTMAX, budget="15s", chains=1, seed=1, run_dir=str(run_dir),
                      config=endless)
    assert result.unproved_cycles is not None
    assert result.unproved_cycles < result.baseline_cycles == result.best_cycles
    assert result.unproved_path == str(run_dir / "unproved.leir")
    unproved = parse((run_dir / "unproved.leir").read_text())
    assert cost(unproved).cycles == result.unproved_cycles
    best = json.loads((run_dir / "best.json").read_text())
    assert best["unproved"]["cycles"] == result.unproved_cycles
    assert best["unproved"]["prove"].startswith(f"stochopt verify {run_dir}/unproved.leir")
    # the start is the spec's lowering: it needs no check, so best.leir is the baseline
    assert best["proof"] == "lowering" and best["verdict"] is None and result.verified
    summary = "\n".join(summary_lines(result))
    assert f"-> {result.unproved_cycles} cycles" in summary and "UNPROVED" in summary
    assert "stochopt verify" in summary
    events = [e for e in read_events(run_dir / "events.jsonl") if "outcome" in e]  # candidates
    assert "unproved" in {e["outcome"] for e in events}
    assert not any(e["outcome"] == "rejected" and "full check" in str(e["error"])
                   for e in events)
    report = subprocess.run([sys.executable, "-m", "stochopt", "report", str(run_dir)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env())
    assert report.returncode == 0, report.stderr
    assert "a faster kernel was found but not proved" in report.stdout
    row = next(line for line in report.stdout.splitlines() if line.startswith("unproved"))
    assert f"{result.unproved_cycles} cycles" in row
    cycles = next(line for line in report.stdout.splitlines() if line.startswith("cycles"))
    assert f"-> {result.unproved_cycles}" in cycles  # never a bare 1.00x


@pytest.mark.slow
def test_the_run_directory_comes_before_the_setup_and_a_run_stopped_there_resumes(
        tmp_path, monkeypatch):
    import importlib

    from stochopt.search.optimize import SetupInterrupted

    # the module, not the function stochopt.search exports under the same name
    optimize_module = importlib.import_module("stochopt.search.optimize")

    run_dir = tmp_path / "run"
    seen = {}

    def interrupted_setup(spec, machine, init):
        seen.update(run_json=(run_dir / "run.json").is_file(),
                    spec=(run_dir / "spec.py").is_file())
        raise KeyboardInterrupt  # as Ctrl-C during the lowering would

    monkeypatch.setattr(optimize_module, "_starting_kernels", interrupted_setup)
    with pytest.raises(SetupInterrupted) as stopped:
        optimize(SOFTMAX, budget="120s", chains=1, max_proposals=20, run_dir=str(run_dir))
    assert seen == {"run_json": True, "spec": True}
    assert stopped.value.run_dir == run_dir
    monkeypatch.undo()
    result = optimize(resume=str(run_dir))
    assert result.proposals == 20 and result.stopped_by == "max_proposals"
    assert json.loads((run_dir / "checkpoint.json").read_text())["finished"]


def test_the_finish_reserve_stays_inside_the_budget():
    assert finish_reserve(30, 0.0) == pytest.approx(6.0)      # nothing timed: a fifth
    assert finish_reserve(30, 1.0) == pytest.approx(2.0)      # the floor
    assert finish_reserve(600, 20.0) == pytest.approx(40.0)   # two of the slowest check
    assert finish_reserve(600, 100.0) == pytest.approx(120.0)  # never above a fifth
    # a re-check that builds its own inputs: the slowest check and the inputs' cost
    assert finish_reserve(300, 12.0, 35.0) == pytest.approx(47.0)
    assert finish_reserve(300, 12.0, 5.0) == pytest.approx(24.0)   # two checks are more
    assert finish_reserve(300, 12.0, 90.0) == pytest.approx(60.0)  # never above a fifth
    for budget in (1, 10, 30, 600, 172800):
        for longest in (0.0, 0.5, 3.0, 45.0, 1e4):
            assert 0 < finish_reserve(budget, longest) <= 0.2 * budget


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
                        "ten"], capture_output=True, text=True, cwd=tmp_path, env=env())
    assert r.returncode == 2 and "duration" in r.stderr and "Traceback" not in r.stderr
