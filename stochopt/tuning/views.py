"""What the database holds, as plain values for people: the listing (`stochopt db list`)
and one spec's history (`stochopt db show`, the report's history section)."""

from __future__ import annotations

from stochopt.errors import StochoptError
from stochopt.tuning.store import TuningDB


def listing(db: TuningDB) -> list[dict]:
    """One row per spec and machine: name, machine, best and baseline cycles, runs,
    kernels, the last run's start time, and the fingerprints."""
    return db.summary()


def history(db: TuningDB, spec: str, machine: str | None = None) -> dict:
    """Every version of a spec (by name or fingerprint) the database has, on every
    machine (or the one named): its runs in order, each with its start and the bests it
    proved, and the fastest kernel with its plan."""
    specs = db.specs_named(spec)
    if not specs:
        names = sorted({r["spec"] for r in db.summary()})
        raise StochoptError(f"the tuning database {db.path} has no spec {spec!r}",
                            hint=f"it has {', '.join(names)}" if names else
                            "it is empty: runs of stochopt optimize fill it")
    entries = []
    for row in specs:
        machines = [r for r in db.summary() if r["spec_fingerprint"] == row["fingerprint"]]
        for m in machines:
            if machine is not None and machine not in (m["machine"],
                                                      m["machine_fingerprint"]):
                continue
            entries.append(spec_history(db, row, m["machine_fingerprint"], m["machine"]))
    if not entries:
        raise StochoptError(f"the tuning database {db.path} has nothing for {spec!r} on "
                            f"machine {machine}")
    return {"spec": spec, "db": str(db.path), "entries": entries}


def spec_history(db: TuningDB, spec_row: dict, machine: str, machine_name: str) -> dict:
    """One spec on one machine: its runs with their bests, and its best kernel."""
    runs = []
    kernels_by_uid = {}
    for run in db.runs_of(spec_row["fingerprint"], machine):
        bests = db.kernels_of_run(run["uid"])
        kernels_by_uid.update({k["uid"]: k for k in bests})
        runs.append({key: run[key] for key in (
            "uid", "run_dir", "host", "started", "ended", "seed", "budget_s", "start",
            "warm_from", "baseline_cycles", "bound_cycles", "best_cycles", "stopped_by",
            "stochopt_version")} | {
            "bests": [{"cycles": k["cycles"], "created": k["created"], "t": k["t"],
                       "source": k["source"], "refuted": k["refuted"], "uid": k["uid"]}
                      for k in bests]})
    for run in runs:  # where a warm start began: the cycles of the kernel it took
        warm = kernels_by_uid.get(run["warm_from"]) or (db.kernel(run["warm_from"])
                                                        if run["warm_from"] else None)
        run["start_cycles"] = warm["cycles"] if warm else run["baseline_cycles"]
        if run["best_cycles"] is None:  # still going, or killed: its bests so far
            run["best_cycles"] = min([b["cycles"] for b in run["bests"] if not b["refuted"]]
                                     + [run["start_cycles"] or 0], default=None) or None
    best = db.best_kernels(spec_row["fingerprint"], machine, limit=1)
    return {"spec": spec_row["name"], "fingerprint": spec_row["fingerprint"],
            "shapes": spec_row["shapes"], "machine": machine_name,
            "machine_fingerprint": machine, "runs": runs,
            "best": _kernel_facts(best[0]) if best else None}


def _kernel_facts(k: dict) -> dict:
    verdict = (k["proof"] or {}).get("verdict") or {}
    return {"uid": k["uid"], "cycles": k["cycles"], "text": k["text"], "plan": k["plan"],
            "run": k["run"], "created": k["created"], "verifier": k["verifier"],
            "checked_here": bool(k["checked_here"]), "examples": verdict.get("examples"),
            "seed": verdict.get("seed"), "precision_margin": k["precision_margin"]}
