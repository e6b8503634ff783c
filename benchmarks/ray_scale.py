"""Candidates per second with the chains on one and on two one-CPU Ray nodes (a
loopback cluster made with ray.cluster_utils.Cluster), side by side, alternating, same
spec, seed and budget; and the local process pool with as many chains, for the
executor's overhead.

    python benchmarks/ray_scale.py --budget 60s --repeat 2
    python benchmarks/ray_scale.py --budget 2m --nodes 2 --local   # against the local pool

A run's rate is its candidates over its elapsed time (setup and final checks
included, as the summary prints it); its steady rate counts from its first event to its
last. Compare the rows with each other.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOFTMAX = str(ROOT / "specs" / "softmax.py")
NODE = {"num_cpus": 1, "object_store_memory": 80 * 1024**2}


def ray_run(nodes: int, budget: str, seed: int, run_dir: Path) -> dict:
    import ray
    from ray.cluster_utils import Cluster

    from stochopt.search import optimize
    from stochopt.search.ray_executor import connect

    cluster = Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False})
    try:
        for _ in range(nodes - 1):
            cluster.add_node(**NODE)
        cluster.wait_for_nodes()
        connect(cluster.address)
        result = optimize(SOFTMAX, budget=budget, seed=seed, run_dir=str(run_dir),
                          ray=cluster.address)
    finally:
        ray.shutdown()
        cluster.shutdown()
    return _row(f"ray, {nodes} node(s)", result, run_dir)


def local_run(chains: int, budget: str, seed: int, run_dir: Path) -> dict:
    from stochopt.search import optimize
    result = optimize(SOFTMAX, budget=budget, seed=seed, chains=chains, run_dir=str(run_dir))
    return _row(f"local, {chains} chain(s)", result, run_dir)


def _row(what: str, result, run_dir: Path) -> dict:
    """The run's rate over its whole budget, and its steady rate: candidates over the
    time from its first event to its last (without the setup and the start of the
    workers, which Ray makes longer and a long run does not notice)."""
    from stochopt.rundir import read_events
    lines = read_events(run_dir / "events.jsonl")
    # a candidate a line each for the first 10,000, then per-minute aggregate lines too
    times = [e["t"] for e in lines if "outcome" in e] + \
        [e["t1"] for e in lines if e.get("kind") == "aggregate"]
    span = max(times) - min(times) if len(times) > 1 else 0.0
    return {"what": what, "candidates": result.proposals, "elapsed_s": result.elapsed_s,
            "rate": round(result.proposals / result.elapsed_s, 1),
            "first_event_s": round(min(times), 1) if times else None,
            "steady_rate": round(result.proposals / span, 1) if span else None,
            "best_cycles": result.best_cycles, "verified": result.verified}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", default="60s")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--local", action="store_true", help="also the local pool")
    parser.add_argument("--nodes", default="1,2", help="node counts to run, e.g. 2")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="stochopt-scale-") as scratch:
        counts = [int(n) for n in args.nodes.split(",")]
        for k in range(args.repeat):
            for nodes in counts:
                rows.append(ray_run(nodes, args.budget, args.seed,
                                    Path(scratch) / f"ray{nodes}-{k}"))
                print(json.dumps(rows[-1]), flush=True)
                if args.local:
                    rows.append(local_run(nodes, args.budget, args.seed,
                                          Path(scratch) / f"local{nodes}-{k}"))
                    print(json.dumps(rows[-1]), flush=True)
    for what in dict.fromkeys(r["what"] for r in rows):
        rates = [r["steady_rate"] or 0 for r in rows if r["what"] == what]
        print(f"{what}: steady rate, mean {sum(rates) / len(rates):.1f} candidates/s")


if __name__ == "__main__":
    main()
