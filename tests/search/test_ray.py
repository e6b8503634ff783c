"""Chains on a real two-node Ray cluster on loopback (a head and a node joining it, one
CPU each): a search across both, the worker node removed mid-run, the driver killed
and the run resumed. Each test starts and stops its own cluster."""

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from importlib.util import find_spec
from pathlib import Path

import pytest

from stochopt import load_spec
from stochopt.leir import parse
from stochopt.rundir import read_events, read_json
from stochopt.search import optimize
from stochopt.search.ray_executor import connect
from stochopt.verify import check

if find_spec("ray") is None:
    pytest.skip("Ray is not installed: pip install 'stochopt[ray]'", allow_module_level=True)
# Ray itself is imported by the tests that run (every one is slow): the fast tier, which
# collects this module and runs none of it, does not pay for importing it

pytestmark = [pytest.mark.slow, pytest.mark.ray]

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = str(ROOT / "specs" / "softmax.py")


def env() -> dict[str, str]:
    """The environment of a child process, read when it starts: the test's own tuning
    database (conftest.py sets XDG_CACHE_HOME per test) and this checkout on the path."""
    return {**os.environ, "PYTHONPATH": str(ROOT)}


NODE = {"num_cpus": 1, "object_store_memory": 80 * 1024**2}
# a node that goes away is noticed within a couple of seconds, not Ray's default ~30 s
FAST_HEALTH = {"health_check_period_ms": 500, "health_check_failure_threshold": 4}


@pytest.fixture
def cluster():
    """A head and one more node on loopback, one CPU each; torn down whatever happens."""
    import ray
    from ray.cluster_utils import Cluster
    c = Cluster(initialize_head=True, head_node_args={
        **NODE, "include_dashboard": False, "_system_config": FAST_HEALTH})
    worker = c.add_node(**NODE)
    c.wait_for_nodes()
    try:
        yield c, worker
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()


def _events_per_chain(run_dir: Path) -> Counter:
    """Candidates per chain, individual lines and per-interval aggregates together."""
    counts: Counter = Counter()
    for e in read_events(run_dir / "events.jsonl"):
        if e.get("kind") == "aggregate":
            for chain, n in e["chains"].items():
                counts[int(chain)] += n
        elif "outcome" in e:
            counts[e["chain"]] += 1
    return counts


def _check_no_event_or_counterexample_lost(run_dir: Path) -> None:
    state = read_json(run_dir / "checkpoint.json")
    per_chain = _events_per_chain(run_dir)
    # a chain's proposals count every step it made; each step is one event, once
    assert {c["index"]: c["proposals"] for c in state["chains"]} == dict(per_chain)
    assert sum(per_chain.values()) == state["proposals"]
    for chain in state["chains"]:
        paths = chain["counterexamples"]
        assert len(paths) == len(set(paths))
        assert all(Path(p).is_file() and Path(p).parent == run_dir / "counterexamples"
                   for p in paths)


def _verifies(run_dir: Path) -> None:
    spec = load_spec(str(run_dir / "spec.py"))
    kernel = parse((run_dir / "best.leir").read_text())
    assert check(kernel, spec, seed=7).equivalent


def test_a_search_across_two_nodes_survives_losing_one(cluster, tmp_path):
    c, worker = cluster
    ray = connect(c.address)
    assert ray.cluster_resources()["CPU"] == 2
    run_dir = tmp_path / "run"
    removed = threading.Event()

    def remove_the_worker_node():
        # once both chains have said something, the second node goes away
        deadline = time.time() + 120
        while time.time() < deadline:
            if len(_events_per_chain(run_dir)) == 2 if run_dir.is_dir() else False:
                time.sleep(2)
                c.remove_node(worker)
                removed.set()
                return
            time.sleep(0.5)

    thread = threading.Thread(target=remove_the_worker_node, daemon=True)
    thread.start()
    result = optimize(SOFTMAX, budget="45s", seed=3, run_dir=str(run_dir), ray=c.address)
    thread.join(timeout=5)
    assert removed.is_set()
    assert result.elapsed_s <= result.budget_s + 5
    assert result.stopped_by == "budget"
    assert result.verified and result.best_cycles < result.baseline_cycles
    assert read_json(run_dir / "run.json")["chains"] == 2  # the cluster's CPUs
    # the tempering ladder spans the nodes: the chains' reports met in the driver
    ladder = read_json(run_dir / "checkpoint.json")["tempering"]
    assert len(ladder["betas"]) == 2 and ladder["attempts"][0] >= 1
    restarts = [e for e in read_events(run_dir / "events.jsonl")
                if e.get("event") == "chain_restarted"]
    assert len(restarts) == 1 and "started again from its last state" in restarts[0]["why"]
    # the restarted chain went on: it made proposals after its restart
    after = [e for e in read_events(run_dir / "events.jsonl")
             if e.get("chain") == restarts[0]["chain"] and e.get("t", 0) > restarts[0]["t"]]
    assert after
    _check_no_event_or_counterexample_lost(run_dir)
    _verifies(run_dir)


def test_a_killed_driver_leaves_a_run_that_resumes_on_the_cluster(cluster, tmp_path):
    c, _ = cluster
    run_dir = tmp_path / "run"
    driver = subprocess.Popen(
        [sys.executable, "-m", "stochopt", "optimize", SOFTMAX, "--budget", "60s",
         "--seed", "4", "--run-dir", str(run_dir), "--ray", c.address, "--quiet"],
        env=env(), cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:  # both chains' states checkpointed
            if (run_dir / "checkpoint.json").is_file() and \
                    len(read_json(run_dir / "checkpoint.json")["chains"]) == 2:
                break
            assert driver.poll() is None, driver.stderr.read().decode()
            time.sleep(0.5)
        else:
            pytest.fail("the run never checkpointed both chains")
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=10)
    finally:
        if driver.poll() is None:
            driver.kill()
    before = read_json(run_dir / "checkpoint.json")
    assert not before["finished"]
    resumed = subprocess.run(
        [sys.executable, "-m", "stochopt", "optimize", "--resume", str(run_dir), "--quiet"],
        env=env(), cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert resumed.returncode == 0, resumed.stderr
    after = read_json(run_dir / "checkpoint.json")
    assert after["finished"] and after["proposals"] > before["proposals"]
    assert read_json(run_dir / "run.json")["ray"] == c.address  # the cluster it started on
    # each chain went on from its checkpointed state: the proposals before the kill that
    # the checkpoint had not seen are done again, so events can only be checked per state
    assert all(a["proposals"] >= b["proposals"]
               for a, b in zip(after["chains"], before["chains"], strict=True))
    _verifies(run_dir)


def test_ctrl_c_stops_every_actor_within_seconds(cluster, tmp_path):
    """Three chains on two CPUs (they share them, rather than one waiting for a CPU
    forever), then Ctrl-C."""
    c, _ = cluster
    run_dir = tmp_path / "run"
    driver = subprocess.Popen(
        [sys.executable, "-m", "stochopt", "optimize", SOFTMAX, "--budget", "5m",
         "--chains", "3", "--run-dir", str(run_dir), "--ray", c.address, "--quiet"],
        env=env(), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (
                run_dir.is_dir() and len(_events_per_chain(run_dir)) == 3):
            time.sleep(0.5)
        assert len(_events_per_chain(run_dir)) == 3  # every chain ran
        driver.send_signal(signal.SIGINT)
        out, err = driver.communicate(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 128 + signal.SIGINT, err
    assert read_json(run_dir / "checkpoint.json")["stopped_by"] == "interrupted"
    ray = connect(c.address)
    # the driver's actors are gone: nothing of the run holds a CPU
    deadline = time.time() + 30
    while time.time() < deadline and ray.available_resources().get("CPU", 0) < 2:
        time.sleep(0.5)
    assert ray.available_resources().get("CPU", 0) == 2


def test_the_llm_limit_holds_for_the_whole_cluster(cluster, tmp_path):
    """Two chains on two nodes, each allowed one request in flight on its own: with Ray
    the limit is the run's, so the server never sees two at once; the transcripts the
    chains wrote on their nodes reach the run directory."""
    from tests.llm_server import LLMServer, reply, slow

    c, _ = cluster
    connect(c.address)
    run_dir = tmp_path / "run"
    fast = (ROOT / "docs" / "examples" / "softmax_fast.leir").read_text().replace(
        "def kernel(", "def softmax(")
    # the LLM alone: both chains ask for a request slot all the time
    with LLMServer(default=slow(0.5, reply(f"```leir\n{fast}```"))) as server:
        result = optimize(SOFTMAX, proposer="llm", budget="60s", seed=5, run_dir=str(run_dir),
                          ray=c.address,
                          llm={"model": "m", "base_url": server.url, "concurrency": 1})
        arrivals = sorted(r["time"] for r in server.requests)
    assert result.verified and len(arrivals) >= 4
    # each reply takes 0.5 s, and a slot is free only once the reply is in: no request
    # arrives while another is being answered
    assert all(b - a >= 0.5 for a, b in zip(arrivals, arrivals[1:], strict=False))
    transcripts = {p.name.split("-")[0] for p in (run_dir / "llm").glob("chain*-*.json")}
    assert transcripts == {"chain0", "chain1"}
