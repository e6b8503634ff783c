"""The search against its peers, side by side: one command, every bundled spec.

    python benchmarks/compare_methods.py --budget 20s --seeds 3        # the full table
    python benchmarks/compare_methods.py --quick                        # CI smoke test

Methods, all with the same budget and seeds, one chain each:
  mutate   STOKE-style random moves under Metropolis-Hastings
  greedy   rewrite rules applied greedily to a fixpoint (the classical compiler)
  rewrite  the rewrite rules under Metropolis-Hastings
  mixed    the bandit over mutate and rewrite (the default)

For each: best cycles, speedup over the baseline, share of roofline, candidates per
second and the time to reach 90% of the run's final improvement; medians and spreads
over the seeds. Results go to a JSON file and a markdown table.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from stochopt.durations import parse_duration  # noqa: E402
from stochopt.lower.catalog import bundled_spec_paths  # noqa: E402
from stochopt.rundir import (  # noqa: E402
    AGGREGATE,
    BEST,
    PROOF_LOWERING,
    PROOF_PENDING,
    PROOF_UNFINISHED,
    read_events,
)

METHODS = ("mutate", "greedy", "rewrite", "mixed")


def run_search(spec: Path, method: str, seed: int, budget: str, out: Path) -> dict:
    run_dir = out / f"{spec.stem}-{method}-{seed}"
    cmd = [sys.executable, "-m", "stochopt", "optimize", str(spec), "--proposer", method,
           "--budget", budget, "--chains", "1", "--seed", str(seed), "--run-dir",
           str(run_dir), "--quiet", "--no-db"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()[-400:]}
    run = json.loads((run_dir / "run.json").read_text())
    best = json.loads((run_dir / "best.json").read_text())
    state = json.loads((run_dir / "checkpoint.json").read_text())
    lines = read_events(run_dir / "events.jsonl")
    events = [e for e in lines if "outcome" in e]  # a candidate a line each, then...
    counted = sum(e.get("candidates", 0) for e in lines if e.get("kind") == AGGREGATE)
    trajectory = [(e["t"], e["cycles"]) for e in events if e["outcome"] == BEST]
    elapsed = max(state["elapsed_s"], 1e-9)
    # the starting kernel's own check runs beside the search: a budget too short for it
    # leaves best.leir unproved (best.json says "proof"), which the results must show
    # the spec's own lowering needs no proof (PROOF_LOWERING); an --init start whose
    # check is still running or was cut says PROOF_PENDING or PROOF_UNFINISHED
    proof = best.get("proof")
    result = summarize(run["baseline_cycles"], best["cycles"], run["roofline_cycles"],
                       len(events) + counted, elapsed, trajectory,
                       bool((best.get("verdict") or {}).get("equivalent"))
                       or proof == PROOF_LOWERING)
    result["start_check_unfinished"] = proof in (PROOF_PENDING, PROOF_UNFINISHED)
    return result


def run_greedy(spec: Path, seed: int) -> dict:
    code = (
        "import json,sys,time\n"
        "from stochopt import load_spec\n"
        "from stochopt.lower import lower\n"
        "from stochopt.lower.roofline import spec_roofline\n"
        "from stochopt.backend.cost import cost\n"
        "from stochopt.machine import MNCORE2\n"
        "from stochopt.transform.greedy import greedy_fixpoint\n"
        f"s = load_spec({str(spec)!r}); k = lower(s)\n"
        f"r = greedy_fixpoint(k, s, MNCORE2, seed={seed})\n"
        "print(json.dumps({'baseline': cost(k).cycles, 'best': r.cycles,\n"
        "  'roofline': spec_roofline(s).cycles, 'candidates': r.candidates,\n"
        "  'seconds': r.seconds, 'verified': r.verified}))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()[-400:]}
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    return summarize(r["baseline"], r["best"], r["roofline"], r["candidates"],
                     max(r["seconds"], 1e-9), [(r["seconds"], r["best"])], r["verified"])


def summarize(baseline, best, roofline, candidates, elapsed, trajectory, verified) -> dict:
    gain = baseline - best
    t90 = 0.0
    for t, cycles in trajectory:
        if baseline - cycles >= 0.9 * gain:
            t90 = t
            break
    return {"baseline_cycles": baseline, "best_cycles": best, "roofline_cycles": roofline,
            "speedup": baseline / best, "roofline_share": roofline / best,
            "candidates": candidates, "candidates_per_s": candidates / elapsed,
            "t90_s": t90 if gain > 0 else None, "verified": verified}


def median_spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return None, None, None
    return statistics.median(values), min(values), max(values)


def table(results: dict, seeds: int, budget: str) -> str:
    lines = ["| spec | method | best cycles (median, min-max) | speedup | roofline share "
             "| candidates/s | t90 (s) |", "|---|---|---|---|---|---|---|"]
    for spec, methods in results.items():
        for method in METHODS:
            runs = [r for r in methods.get(method, []) if "error" not in r]
            if not runs:
                err = next((r["error"] for r in methods.get(method, []) if "error" in r), "")
                lines.append(f"| {spec} | {method} | failed: {err[:60]} | | | | |")
                continue
            b = median_spread([r["best_cycles"] for r in runs])
            s = median_spread([r["speedup"] for r in runs])
            f = median_spread([r["roofline_share"] for r in runs])
            c = median_spread([r["candidates_per_s"] for r in runs])
            t = median_spread([r["t90_s"] for r in runs])
            tt = "-" if t[0] is None else f"{t[0]:.1f} ({t[1]:.1f}-{t[2]:.1f})"
            lines.append(
                f"| {spec} | {method} | {b[0]:.0f} ({b[1]}-{b[2]}) | {s[0]:.2f}x | "
                f"{100 * f[0]:.1f}% | {c[0]:.0f} ({c[1]:.0f}-{c[2]:.0f}) | {tt} |")
    return "\n".join(lines) + (f"\n\n{seeds} seeds, budget {budget} per run, one chain "
                               "each.\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--budget", default="20s")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--specs", default=None, help="comma-separated spec names")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--jobs", type=int, default=2, help="runs at a time")
    ap.add_argument("--quick", action="store_true", help="smoke test: softmax, 1 seed, 15s")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args()
    if args.quick:
        args.budget, args.seeds, args.specs = "15s", 1, args.specs or "softmax"
    parse_duration(args.budget)
    out = Path(args.out)
    runs_dir = out / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    specs = [p for p in bundled_spec_paths()
             if not args.specs or p.stem in args.specs.split(",")]
    methods = args.methods.split(",")
    tasks = [(p, m, s) for p in specs for m in methods for s in range(args.seeds)]
    started = time.time()

    def one(task):
        p, m, s = task
        r = run_greedy(p, s) if m == "greedy" else run_search(p, m, s, args.budget, runs_dir)
        print(f"{p.stem:18s} {m:8s} seed {s}: "
              + (r.get("error", "")[:80] or f"{r['best_cycles']} cycles "
                 f"({r['speedup']:.2f}x, {r['candidates_per_s']:.0f}/s)"), flush=True)
        return task, r

    results: dict = {}
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for (p, m, s), r in pool.map(one, tasks):
            results.setdefault(p.stem, {}).setdefault(m, []).append({"seed": s, **r})
    meta = {"budget": args.budget, "seeds": args.seeds, "jobs": args.jobs,
            "machine": platform.machine(), "python": platform.python_version(),
            "cpus": __import__("os").cpu_count(), "wall_s": round(time.time() - started, 1),
            "date": time.strftime("%Y-%m-%d")}
    name = "quick" if args.quick else "methods"
    (out / f"{name}.json").write_text(json.dumps({"meta": meta, "results": results},
                                                 indent=2))
    md = table(results, args.seeds, args.budget)
    (out / f"{name}.md").write_text(md)
    print(md)
    failed = [t for t in results.values() for rs in t.values() for r in rs if "error" in r]
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
