"""The check pool: full checks in worker processes, fastest candidate first; a wrong
kernel comes back refuted with its counterexample; the starting kernel's check gives way
to a candidate; a faster proved kernel makes the slower ones moot."""

import multiprocessing as mp
import queue
import time
from pathlib import Path

import pytest

from stochopt import load_spec
from stochopt.backend.cost import cost
from stochopt.leir import parse, render
from stochopt.lower import lower
from stochopt.machine import MNCORE2
from stochopt.search.checks import START, CheckerJob, CheckPool, MovableDeadline, Pending
from stochopt.verify.replay import load_inputs

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "specs" / "softmax.py"
FAST = (ROOT / "docs" / "examples" / "softmax_fast.leir").read_text().replace(
    "def kernel(", "def softmax(")
WRONG = FAST.replace("store(e * r)", "store(e)")  # forgets to normalise


@pytest.fixture
def pool_of(tmp_path):
    pools = []

    def make(workers: int = 1, examples: int = 5):
        (tmp_path / "counterexamples").mkdir(exist_ok=True)
        baseline = render(lower(load_spec(SPEC)))
        outbox = mp.get_context("fork").Queue()
        jobs = [CheckerJob(i, str(tmp_path), str(SPEC), None, MNCORE2, baseline, examples,
                           time.time() + 600) for i in range(workers)]
        pool = CheckPool(mp.get_context("fork"), jobs, outbox)
        pools.append(pool)
        return pool, outbox, baseline

    yield make
    for pool in pools:
        pool.close()


def pending(text: str, check_id: str, chain: int | None = 0) -> Pending:
    return Pending(cost(parse(text)).cycles, check_id, chain, text, 3, {"outcome": "checking"})


def verdict(outbox, timeout: float = 300):
    end = time.time() + timeout
    while time.time() < end:
        try:
            message = outbox.get(timeout=1)
        except queue.Empty:
            continue
        if message[0] == "verdict":
            return message
    raise AssertionError("no verdict came")


@pytest.mark.slow
def test_a_wrong_kernel_is_refuted_with_a_counterexample_and_a_right_one_proved(pool_of):
    pool, outbox, _ = pool_of()
    pool.add(pending(WRONG, "0-0"))
    pool.add(pending(FAST, "1-0", chain=1))
    assert pool.fastest().check_id == "0-0"  # WRONG is faster: it goes first
    pool.dispatch(proved_cycles=float("inf"))
    _, worker, check_id, facts, interrupted, path = verdict(outbox)
    assert (check_id, interrupted, facts["equivalent"]) == ("0-0", False, False)
    assert pool.finish(worker, check_id, interrupted).check_id == "0-0"
    assert set(load_inputs(path, load_spec(SPEC))) == {"x"} and facts["description"]
    pool.dispatch(proved_cycles=float("inf"))
    _, worker, check_id, facts, interrupted, _ = verdict(outbox)
    assert (check_id, facts["equivalent"]) == ("1-0", True)
    assert pool.finish(worker, check_id, interrupted) is not None
    assert pool.fastest() is None


@pytest.mark.slow
def test_the_starting_kernels_check_gives_way_to_a_candidate(pool_of):
    pool, outbox, baseline = pool_of(examples=100_000)  # a check that would run for hours
    pool.add(Pending(cost(parse(baseline)).cycles, START, None, baseline, 0))
    pool.dispatch(proved_cycles=float("inf"))
    time.sleep(1.0)  # the worker is in the middle of it
    pool.add(pending(FAST, "0-0"))
    pool.make_way()
    _, worker, check_id, facts, interrupted, _ = verdict(outbox, timeout=120)
    assert (check_id, interrupted) == (START, True)
    assert pool.finish(worker, check_id, interrupted) is None  # it waits again
    assert {p.check_id for p in pool.undecided()} == {START, "0-0"}
    pool.dispatch(proved_cycles=float("inf"))
    assert pool.running[0].check_id == "0-0"  # the candidate goes first


def test_a_proved_kernel_makes_the_slower_waiting_ones_moot(pool_of):
    pool, _, _ = pool_of(workers=0)
    slow, fast = pending(WRONG, "0-0"), pending(FAST, "0-1")
    slow.cycles, fast.cycles = 3000, 2000
    pool.add(slow)
    pool.add(fast)
    moot = pool.dispatch(proved_cycles=2500)
    assert [p.check_id for p in moot] == ["0-0"]
    assert [p.check_id for p in pool.undecided()] == ["0-1"]


def test_a_check_that_gives_way_stops_at_its_next_example():
    deadline = MovableDeadline(time.monotonic() + 1000)
    assert not time.monotonic() > deadline
    deadline.at = float("-inf")
    assert time.monotonic() > deadline


def test_a_process_exits_with_messages_no_worker_will_read():
    """What is queued for workers that have ended is dropped at close: at exit Python
    waits to flush every queue, and a message no process reads can fill the pipe (a
    run printed its result and never exited)."""
    import subprocess
    import sys

    code = ("import multiprocessing as mp\n"
            "from stochopt.search.checks import abandon\n"
            "q = mp.get_context('fork').Queue()\n"
            "q.put(b'x' * 10_000_000)\n"   # far more than a pipe holds, and no reader
            "abandon([q])\n")
    done = subprocess.run([sys.executable, "-c", code], timeout=60, capture_output=True,
                          text=True, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
