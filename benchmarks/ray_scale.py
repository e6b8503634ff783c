"""Candidates per second with the chains on one and on two one-CPU Ray nodes (a
loopback cluster made with ray.cluster_utils.Cluster), side by side: same spec, seed and
budget; and, with --local, the process pool with as many chains, for the executor's
overhead.

    python benchmarks/ray_scale.py --budget 60s --repeat 3
    python benchmarks/ray_scale.py --budget 2m --repeat 1 --local   # the pool beside

Every run starts from the same conditions: a fresh cluster, the driver connected to it
before the budget's clock starts, and nothing of the cluster's own start-up still
running (after its nodes register, their agents and prestarted workers import Python
for seconds; on a machine whose cores are the nodes', that would come out of the
chains of the run with more nodes). Pairs alternate which node count runs first, so a
drifting load favours neither.

``--pin``: each node as a one-CPU machine of its own. On one machine the nodes of a
loopback cluster share its cores with the driver, the check worker and Ray's own
processes: a one-node run's chain has one core to itself and the driver and checks
get the other core for nothing, while two nodes' chains share both cores with them, so
the ratio measures that more than the executor. With --pin the head node, and with it
the driver, its check worker and the coordinator, runs on core 0 and the second node on
core 1, as two one-CPU machines would; the process pool with N chains gets N cores.

Per run: ``rate``, candidates over the elapsed budget (setup, the chains' start and the
final checks included: the issue's figure, as the summary prints it); ``search_rate``,
candidates over the time from the first candidate to the last; and, on Ray, the CPU
seconds spent during the budget (``cpu_s``) by the chains' actors, the driver, the check
worker, the coordinator and Ray's own processes (raylets, GCS, agents, idle workers),
which a loaded machine changes far less than the rates.
Per pair: 2 nodes / 1 node of both rates; at the end, their medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's stochopt, not an installed one
SOFTMAX = str(ROOT / "specs" / "softmax.py")
NODE = {"num_cpus": 1, "object_store_memory": 80 * 1024**2}
SETTLED_CPU = 0.1    # the cluster is idle when its processes use less of a core than this
SETTLE_MAX_S = 60.0
SAMPLE_S = 2.0       # a sample of the process tree's CPU costs a few ms of it
TICKS = os.sysconf("SC_CLK_TCK")


def ray_run(nodes: int, budget: str, seed: int, run_dir: Path, proposer: str,
            pin: bool) -> dict:
    import ray
    from ray.cluster_utils import Cluster

    from stochopt.search import optimize
    from stochopt.search.ray_executor import connect

    # pinned: the head node (started from here) and this driver on core 0
    with _on_cores({0} if pin else None):
        cluster = Cluster(initialize_head=True,
                          head_node_args={**NODE, "include_dashboard": False})
        try:
            for k in range(1, nodes):
                before = set(_tree_cpu())
                cluster.add_node(**NODE)
                if pin:  # the node's raylet and agents; the workers it starts inherit it
                    _pin(set(_tree_cpu()) - before, k)
            cluster.wait_for_nodes()
            connect(cluster.address)
            settle_s = _settle()
            watch = CpuWatch()
            result = optimize(SOFTMAX, budget=budget, seed=seed, run_dir=str(run_dir),
                              ray=cluster.address, proposer=proposer, db=False)
            cpu_s = watch.stop()
        finally:
            ray.shutdown()
            cluster.shutdown()
    return {**_row(f"ray, {nodes} node(s)", result, run_dir), "settle_s": settle_s,
            "cpu_s": cpu_s, "pinned": pin}


def local_run(chains: int, budget: str, seed: int, run_dir: Path, proposer: str,
              pin: bool) -> dict:
    from stochopt.search import optimize
    # pinned: N chains on N cores, with the driver and the check worker
    with _on_cores(set(range(chains)) if pin else None):
        result = optimize(SOFTMAX, budget=budget, seed=seed, chains=chains,
                          run_dir=str(run_dir), proposer=proposer, db=False)
    return {**_row(f"local, {chains} chain(s)", result, run_dir), "pinned": pin}


@contextmanager
def _on_cores(cores: set[int] | None):
    """This process, and what it starts meanwhile, on these cores (None: as it was)."""
    everything = os.sched_getaffinity(0)
    if cores is not None:
        os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, everything)


def _pin(pids: set[int], core: int) -> None:
    for pid in pids:
        try:
            os.sched_setaffinity(pid, {core})
        except OSError:
            pass  # it ended


def _row(what: str, result, run_dir: Path) -> dict:
    from stochopt.rundir import read_events
    lines = read_events(run_dir / "events.jsonl")
    # a candidate a line each for the first 10,000, then per-minute aggregate lines too
    times = [e["t"] for e in lines if "outcome" in e] + \
        [e["t1"] for e in lines if e.get("kind") == "aggregate"]
    span = max(times) - min(times) if len(times) > 1 else 0.0
    return {"what": what, "candidates": result.proposals, "elapsed_s": result.elapsed_s,
            "rate": round(result.proposals / result.elapsed_s, 1),
            "first_candidate_s": round(min(times), 1) if times else None,
            "search_rate": round(result.proposals / span, 1) if span else None,
            "best_cycles": result.best_cycles, "verified": result.verified}


# -- the CPU of this process and everything it started (the cluster, the workers) ------
def _tree_cpu() -> dict[int, tuple[int, str, float]]:
    """pid -> (parent, command line, CPU seconds so far) of this process and its
    descendants."""
    table = {}
    for name in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{name}/stat").read_text() if name.isdigit() else ""
        except OSError:
            continue  # it ended
        if stat:
            fields = stat[stat.rfind(")") + 2:].split()
            table[int(name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS)
    mine = {}
    for pid, (parent, seconds) in table.items():
        ancestor, hops = pid, 0
        while ancestor > 1 and ancestor != os.getpid() and hops < 64:
            ancestor, hops = table.get(ancestor, (0, 0.0))[0], hops + 1
        if ancestor == os.getpid():
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            mine[pid] = (parent, command.decode(errors="replace"), seconds)
    return mine


class CpuWatch:
    """CPU seconds of the process tree while it runs, sampled every SAMPLE_S: a
    process that ends (a chain's actor, killed at the end) counts up to its last sample,
    a child this process reaps (the check worker) in full."""

    def __init__(self) -> None:
        import threading
        self.first = _tree_cpu()
        self.last = dict(self.first)
        self.reaped = _reaped_children_cpu()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        while not self.done.wait(SAMPLE_S):
            self.last.update(_tree_cpu())

    def stop(self) -> dict[str, float]:
        """CPU seconds since the start, by role: the chains' actors, the driver, the
        check workers, the coordinator, and Ray's own processes."""
        self.done.set()
        self.thread.join()
        alive = _tree_cpu()
        self.last.update(alive)
        used = {"chains": 0.0, "driver": 0.0, "checks": 0.0, "coordinator": 0.0, "ray": 0.0}
        for pid, (parent, command, seconds) in self.last.items():
            if pid not in alive and parent == os.getpid():
                continue  # a child of the driver that ended: os.times() has it, below
            used[_role(pid, command)] += seconds - self.first.get(pid, (0, "", 0.0))[2]
        used["checks"] += _reaped_children_cpu() - self.reaped
        return {role: round(seconds, 1) for role, seconds in used.items()}


def _role(pid: int, command: str) -> str:
    if pid == os.getpid():
        return "driver"
    if "ChainActor" in command:
        return "chains"
    if "Coordinator" in command:
        return "coordinator"
    if "multiprocessing" in command:  # the check pool's spawned workers
        return "checks"
    return "ray"


def _reaped_children_cpu() -> float:
    times = os.times()
    return times.children_user + times.children_system


def _settle() -> float:
    """Wait until this process's children (the cluster) are idle; the seconds waited."""
    start = time.monotonic()
    last = _children_cpu()
    while time.monotonic() - start < SETTLE_MAX_S:
        time.sleep(1.0)
        now = _children_cpu()
        if now - last < SETTLED_CPU:
            break
        last = now
    return round(time.monotonic() - start, 1)


def _children_cpu() -> float:
    return sum(s for pid, (_, _, s) in _tree_cpu().items() if pid != os.getpid())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", default="60s")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--local", action="store_true", help="also the local pool")
    parser.add_argument("--nodes", default="1,2", help="node counts to run, e.g. 2")
    parser.add_argument("--pin", action="store_true",
                        help="each node on a core of its own, as separate one-CPU machines "
                        "(the head's core also runs the driver and the check worker)")
    parser.add_argument("--proposer", default="mixed",
                        help="mixed (the default of optimize) or mutate: blind moves, whose "
                        "candidates cost about the same on every chain")
    args = parser.parse_args()
    counts = [int(n) for n in args.nodes.split(",")]
    pairs: list[dict[str, dict]] = []
    with tempfile.TemporaryDirectory(prefix="stochopt-scale-") as scratch:
        for k in range(args.repeat):
            pair = {}
            for nodes in counts if k % 2 == 0 else counts[::-1]:
                runs = [("ray", ray_run)] + ([("local", local_run)] if args.local else [])
                for executor, run in runs:
                    row = run(nodes, args.budget, args.seed,
                              Path(scratch) / f"{executor}{nodes}-{k}", args.proposer,
                              args.pin)
                    pair[f"{executor}{nodes}"] = row
                    print(json.dumps(row), flush=True)
            pairs.append(pair)
    if len(counts) < 2:
        return
    low, high = f"{counts[0]}", f"{counts[-1]}"
    for executor in ("ray", "local") if args.local else ("ray",):
        for rate in ("rate", "search_rate"):
            ratios = [p[executor + high][rate] / p[executor + low][rate] for p in pairs
                      if p[executor + low][rate] and p[executor + high][rate]]
            print(f"{executor}, {rate}: {high} / {low} = "
                  f"{', '.join(f'{r:.2f}x' for r in ratios)} (median "
                  f"{statistics.median(ratios):.2f}x)" if ratios else "no ratio")


if __name__ == "__main__":
    main()
