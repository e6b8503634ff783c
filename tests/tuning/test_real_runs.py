"""The database under real runs and real processes: a second run starts from the first
one's best; two writers at once and a kill -9 in the middle of a write lose nothing and
corrupt nothing; a damaged file costs one line and the run still ends with its result;
the LLM's prompt shows the examples the database gave it."""

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from stochopt.errors import StochoptError
from stochopt.rundir import read_json
from stochopt.search import optimize
from stochopt.search.chain import ChainConfig
from stochopt.tuning.database import Database
from stochopt.tuning.store import TuningDB, kernel_sha256, sha256_text

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = str(ROOT / "specs" / "softmax.py")
QUICK = ChainConfig(full_examples=20, escape_kernels=300)  # escapes: tests/transform


def cli(*args, timeout=180, **kwargs):
    return subprocess.run([sys.executable, "-m", "stochopt", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, **kwargs)


def proved_texts(db_path: Path, run_dir: Path) -> set[str]:
    """The identities of the kernels the database holds for one run directory."""
    with Database(db_path) as db:
        runs = [r for s in db.list() for r in db.runs_of(s["spec_fingerprint"],
                                                          s["machine_fingerprint"])
                if r["run_dir"] == str(run_dir.resolve())]
        return {k["text_sha256"] for r in runs for k in db.kernels_of_run(r["uid"])}


def run_bests(run_dir: Path) -> set[str]:
    """Every proved best a run directory records: best.leir and the checkpoint's bests."""
    best = read_json(run_dir / "best.json")
    found = {kernel_sha256(b["text"]) for b in read_json(run_dir / "checkpoint.json")
             .get("bests", [])}
    if best.get("verdict"):
        found.add(kernel_sha256((run_dir / "best.leir").read_text()))
    return found


def committed_search_best(run_dir: Path) -> bool:
    """best.leir holds a kernel the search proved (best.json is written first)."""
    try:
        best = read_json(run_dir / "best.json")
        text = (run_dir / "best.leir").read_text()
    except (OSError, StochoptError):
        return False
    return best.get("source") == "search" and \
        best["certificate"]["kernel_sha256"] == sha256_text(text)


def quick_check(db_path: Path) -> str:
    with sqlite3.connect(db_path) as c:
        return c.execute("PRAGMA quick_check").fetchone()[0]


@pytest.mark.slow  # two short real searches
def test_a_second_run_starts_from_the_first_runs_best(tmp_path):
    db = tmp_path / "t.db"
    first = optimize(SOFTMAX, machine="small", chains=1, check_workers=0, budget="60s",
                     max_proposals=100, run_dir=str(tmp_path / "one"), config=QUICK, db=db)
    assert first.best_cycles < first.baseline_cycles and first.start is None
    seen = []
    second = optimize(SOFTMAX, machine="small", chains=1, check_workers=0, budget="60s",
                      max_proposals=20, run_dir=str(tmp_path / "two"), config=QUICK, db=db,
                      progress=seen.append)
    # the live view's first frame already shows the first run's best, proved, and why
    assert seen[0]["best_cycles"] == first.best_cycles and "warm start" in seen[0]["start"]
    assert second.start.startswith(f"warm start: {first.best_cycles} cycles")
    assert second.best_cycles <= first.best_cycles and second.verified
    best = read_json(tmp_path / "two" / "best.json")
    if best["source"] == "start":   # nothing faster was found: the warm start is the best
        assert (tmp_path / "two" / "best.leir").read_text() == \
            (tmp_path / "one" / "best.leir").read_text()
    run = read_json(tmp_path / "two" / "run.json")
    assert run["tuning"]["start"] == "database"
    assert run["init"] == str((tmp_path / "two" / "warm_start.leir").resolve())
    shown = json.loads(cli("db", "show", "softmax", "--json", "--db", db).stdout)
    assert [Path(r["run_dir"]).name for r in shown["entries"][0]["runs"]] == ["one", "two"]
    assert shown["entries"][0]["runs"][1]["start_cycles"] == first.best_cycles
    # --cold starts from the lowering, and still remembers
    cold = optimize(SOFTMAX, machine="small", chains=1, check_workers=0, budget="60s",
                    max_proposals=5, run_dir=str(tmp_path / "three"), config=QUICK, db=db,
                    cold=True)
    assert cold.start is None and read_json(tmp_path / "three" / "run.json")["init"] is None


WRITER = textwrap.dedent('''
    import sys, time
    from stochopt.tuning.store import TuningDB, uid_of
    db = TuningDB(sys.argv[1])
    db.add_spec(type("S", (), dict(fingerprint="s", name="s", family="f", ops=None,
                                    shapes={}, source=""))())
    db.add_machine("m", "m", {})
    run = uid_of(sys.argv[2])
    db.add_run({"uid": run, "spec": "s", "machine": "m", "run_dir": sys.argv[2],
                "host": "h", "started": time.time(), "start": "lowering",
                "stochopt_version": "0"})
    for i in range(int(sys.argv[3])):
        uid = uid_of(sys.argv[2], i)
        db.add_kernel({"uid": uid, "spec": "s", "machine": "m", "run": run,
                       "text": "x" * 20000, "text_sha256": uid, "cycles": i,
                       "proof": {"verdict": {"i": i}}, "verifier": "v", "checked_here": 1,
                       "created": time.time(), "stochopt_version": "0"})
        print(uid, flush=True)   # committed
''')


@pytest.mark.slow  # processes that write at once
def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    db = tmp_path / "t.db"
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(db), name, "150"],
                                stdout=subprocess.PIPE, text=True, cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
               for name in ("a", "b")]
    committed = set()
    for w in writers:
        out, _ = w.communicate(timeout=120)
        assert w.returncode == 0
        committed |= set(out.split())
    assert len(committed) == 300 and quick_check(db) == "ok"
    with TuningDB(db) as store:
        assert {r[0] for r in store.connection.execute("SELECT uid FROM kernels")} == committed


@pytest.mark.slow  # processes killed in the middle of their writes
def test_a_writer_killed_mid_write_leaves_every_committed_row_and_a_sound_file(tmp_path):
    db = tmp_path / "t.db"
    rng = random.Random(0)
    committed = set()
    for attempt in range(5):
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(db), f"w{attempt}",
                                   "100000"], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                                  env={**os.environ, "PYTHONPATH": str(ROOT)})
        for _ in range(rng.randint(5, 60)):   # let it commit a few, then kill it
            committed.add(writer.stdout.readline().strip())
        writer.send_signal(signal.SIGKILL)
        rest, _ = writer.communicate()
        committed |= set(rest.split())
        assert quick_check(db) == "ok"
        with TuningDB(db) as store:
            held = {r[0] for r in store.connection.execute("SELECT uid FROM kernels")}
        assert committed <= held


RUN = textwrap.dedent('''
    import sys
    from stochopt.search import optimize
    from stochopt.search.chain import ChainConfig
    optimize(sys.argv[1], machine="small", chains=1, check_workers=0, budget=sys.argv[4],
             max_proposals=int(sys.argv[5]), run_dir=sys.argv[2], db=sys.argv[3],
             cold=True, config=ChainConfig(full_examples=20))
''')


def start_run(spec, run_dir, db, budget="60s", proposals=100):
    """A real run in its own process (its full checks on the chain's path, 20 examples)."""
    return subprocess.Popen([sys.executable, "-c", RUN, str(spec), str(run_dir), str(db),
                             budget, str(proposals)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.slow  # two real runs at once, then a run killed with -9
def test_real_runs_at_once_and_a_killed_run_keep_every_proved_best(tmp_path):
    db = tmp_path / "t.db"
    other = tmp_path / "wide.py"   # softmax at other shapes: another spec of its family
    other.write_text(Path(SOFTMAX).read_text().replace("(128, 1024)", "(64, 2048)"))
    runs = [start_run(spec, tmp_path / name, db) for spec, name in ((SOFTMAX, "softmax"),
                                                                    (other, "wide"))]
    for run in runs:
        _, err = run.communicate(timeout=180)
        assert run.returncode == 0, err
    assert quick_check(db) == "ok"
    for name in ("softmax", "wide"):
        bests = run_bests(tmp_path / name)
        assert bests and bests <= proved_texts(db, tmp_path / name)
    killed = tmp_path / "killed"
    run = start_run(SOFTMAX, killed, db, budget="120s", proposals=100000)
    deadline = time.time() + 90
    while time.time() < deadline and not committed_search_best(killed):
        time.sleep(0.2)
    time.sleep(0.5)   # the database is written just after best.leir
    run.send_signal(signal.SIGKILL)
    run.communicate()
    assert quick_check(db) == "ok"
    best = read_json(killed / "best.json")
    assert best["source"] == "search", "the run proved nothing before it was killed"
    assert kernel_sha256((killed / "best.leir").read_text()) in proved_texts(db, killed)


@pytest.mark.slow  # a real search with a damaged database
def test_a_damaged_database_costs_one_line_and_the_run_ends_with_its_result(tmp_path):
    db = tmp_path / "t.db"
    db.write_bytes(b"SQLite format 3\x00" + b"\xee" * 8000)
    done = cli("optimize", SOFTMAX, "--machine", "small", "--chains", "1", "--budget", "20s",
               "--max-proposals", "20", "--quiet", "--db", db, "--run-dir", tmp_path / "run")
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if str(db) in line]
    assert len(lines) == 1 and "goes on without it" in lines[0]
    assert "softmax on small:" in done.stdout and (tmp_path / "run" / "best.leir").is_file()
    assert db.read_bytes().startswith(b"SQLite format 3\x00\xee")   # left for the user
    assert read_json(tmp_path / "run" / "run.json")["tuning"]["db"] is None


@pytest.mark.slow  # a whole run against the loopback LLM server
def test_the_llms_prompt_shows_the_examples_the_database_gave_the_run(tmp_path):
    from stochopt.machine import MNCORE2
    from tests.llm_server import NO_CODE, LLMServer, reply

    from .conftest import descended, remember, softmax_spec

    db = tmp_path / "t.db"
    near = softmax_spec(tmp_path, rows=64, cols=2048)   # softmax's family, other shapes
    _, fast, plan = descended(near, MNCORE2)
    with TuningDB(db) as store:
        remember(store, near, fast, plan, machine=MNCORE2, run_dir="runs/softmax-64x2048")
    run_dir = tmp_path / "run"
    with LLMServer(default=reply(NO_CODE)) as server:
        optimize(SOFTMAX, proposer="llm", chains=1, budget="60s", max_proposals=1,
                 run_dir=str(run_dir), config=QUICK, db=db,
                 llm={"model": "local", "base_url": server.url, "concurrency": 1,
                      "forms": ["kernel"]})   # plan prompts name rules only (test_memory)
        prompt = server.requests[0]["body"]["messages"][1]["content"]
    assert "# Examples from earlier runs" in prompt
    assert "spec softmax, " in prompt and "runs/softmax-64x2048" in prompt
    assert fast_text(fast) in prompt and f"1. {plan[0].describe()}" in prompt
    assert "# spec: " not in prompt.split("# Examples")[1]   # no paths of this machine
    (transcript,) = [json.loads(p.read_text()) for p in (run_dir / "llm").glob("chain0-*.json")]
    assert "runs/softmax-64x2048" in transcript["messages"][1]["content"]
    pool = read_json(run_dir / "examples.json")["examples"]
    assert [p["run_dir"] for p in pool] == ["runs/softmax-64x2048"]


def fast_text(kernel) -> str:
    from stochopt.leir.render import render
    from stochopt.machine import MNCORE2
    body = render(kernel, MNCORE2).strip().splitlines()
    return "\n".join(line for line in body if not line.startswith("#"))
