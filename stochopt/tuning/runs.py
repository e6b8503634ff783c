"""A run and the tuning database: where the run starts from (a warm start from the
database's best kernel for its spec and machine, or plans from similar specs), and what
it writes as it goes (each new proved best at once, its rule statistics, how it ended).

optimize() calls ``prepare`` when it makes a run and ``starting_point`` once the setup
has lowered the spec; the main process holds a ``RunRecorder`` (stochopt/search/
supervisor.py). Nothing here stops a run: a database that cannot be opened, or that
fails during the run, is named in one line and the run goes on without it; the run
directory stays the record of the run (``stochopt db import RUN_DIR`` adds it later).
"""

from __future__ import annotations

import sqlite3
import sys
import time
from pathlib import Path

from stochopt.errors import StochoptError
from stochopt.rundir import (
    BEST_JSON,
    BEST_LEIR,
    COUNTEREXAMPLES,
    EXAMPLES_JSON,
    SOURCE_SEARCH,
    SOURCE_START,
    START_DATABASE,
    START_INIT,
    START_LOWERING,
    START_TRANSFER,
    WARM_START_LEIR,
    atomic_write,
    read_json,
    write_json,
)
from stochopt.tuning.fingerprints import machine_print, spec_print, verifier_version
from stochopt.tuning.store import (
    DatabaseUnavailable,
    TuningDB,
    default_path,
    kernel_sha256,
    sha256_text,
    uid_of,
)
from stochopt.tuning.transfer import transfer

WARM_CANDIDATES = 3     # the database's fastest kernels a warm start tries, in order
RECHECK_SHARE = 0.25    # of the budget a warm start's re-check may take


def say(line: str) -> None:
    """One line on stderr (the live view keeps it above itself)."""
    print(line, file=sys.stderr, flush=True)


def prepare(run: dict, spec, machine, db: str | Path | None = None, use: bool = True,
            cold: bool = False) -> None:
    """run["tuning"]: the database's path and the fingerprints, or why there is none.
    A database that cannot be opened is said in one line; the run goes on without it."""
    if not use:
        run["tuning"] = {"db": None, "why": "off (--no-db)"}
        return
    path = Path(db) if db is not None else default_path()
    sp = spec_print(spec)
    fingerprint, name, constants = machine_print(machine)
    try:
        with TuningDB(path) as store:
            store.add_spec(sp)
            store.add_machine(fingerprint, name, constants)
    except DatabaseUnavailable as e:
        say(f"warning: {e.message}; this run goes on without it ({e.hint})")
        run["tuning"] = {"db": None, "why": e.message}
        return
    run["tuning"] = {"db": str(path.resolve()), "spec_fingerprint": sp.fingerprint,
                     "family": sp.family, "machine_fingerprint": fingerprint, "cold": cold,
                     "verifier": verifier_version(), "start": None, "warm_start": None,
                     "transfer": None}


def starting_point(rd: Path, run: dict, spec, machine, baseline, screening,
                   started: float) -> tuple[object, dict] | None:
    """After the lowering: (the kernel to start from, its verdict) when the database
    holds a usable kernel for this spec and machine (the run's init then names
    warm_start.leir); else None, with the plans and move weights of similar specs put
    in run["config"] when there are any. A kernel proved elsewhere or under another
    verifier is checked first, within a quarter of the budget; one that fails is marked
    refuted and the next is tried."""
    tuning = run.get("tuning") or {}
    if not tuning.get("db") or run.get("init") is not None:
        return None  # no database, or the user chose the start
    tuning["start"] = START_LOWERING
    if tuning.get("cold"):
        return None
    try:
        with TuningDB(tuning["db"], check=False) as store:
            own = store.best_kernels(tuning["spec_fingerprint"],
                                     tuning["machine_fingerprint"], WARM_CANDIDATES)
            deadline = time.monotonic() + max(
                0.0, RECHECK_SHARE * run["budget_s"] - (time.time() - started))
            for row in own:
                usable = _usable(store, row, spec, machine, baseline, screening, run,
                                 deadline)
                if usable is not None:
                    return _warm(store, rd, run, row, machine, *usable)
            _transfer(store, run, spec, machine, baseline, own)
    except (DatabaseUnavailable, sqlite3.Error, OSError) as e:
        say(f"warning: tuning database {tuning['db']}: {e}; this run starts from the "
            "lowering")
    except StochoptError as e:  # a stored plan or kernel this stochopt cannot read
        say(f"warning: the tuning database's entries for {spec.name} could not be used: {e}")
    return None


def _usable(store: TuningDB, row: dict, spec, machine, baseline, screening, run: dict,
            deadline: float) -> tuple[object, dict, bool] | None:
    """(the kernel, the verdict a warm start from it carries, whether it was checked
    now), or None when it is not usable."""
    from stochopt.backend.cost import cost
    from stochopt.leir.parser import parse
    from stochopt.verify.check import check, check_signature

    try:
        kernel = parse(row["text"], machine)
        check_signature(kernel, spec)
        cycles = cost(kernel, machine).cycles
    except StochoptError as e:  # written by an older stochopt, or for another machine
        say(f"warning: the tuning database's {row['cycles']}-cycle kernel no longer reads "
            f"({e}); skipping it")
        return None
    if cycles >= cost(baseline, machine).cycles:
        return None  # no faster than today's lowering (the cost model changed since)
    if screening.error(kernel) > 0:
        store.mark_refuted(row["uid"], "fails a screening input of a later run")
        return None
    if row["checked_here"] and row["verifier"] == verifier_version():
        return kernel, row["proof"]["verdict"], False
    verdict = check(kernel, spec, machine=machine, baseline=baseline, seed=run["seed"],
                    examples=run["config"].get("full_examples", 200), deadline=deadline)
    if verdict.interrupted:
        say(f"the tuning database's {row['cycles']}-cycle kernel was proved under another "
            "verifier and its check did not finish within a quarter of the budget: this "
            "run starts from the lowering (with the kernel's plan, where it is known)")
        return None
    if not verdict.equivalent:
        store.mark_refuted(row["uid"], f"fails a check under verifier {verifier_version()}: "
                           f"{verdict.counterexample.describe()}")
        return None
    store.mark_checked(row["uid"], verifier_version(),
                       {**row["proof"], "verdict": verdict.to_json()})
    return kernel, verdict.to_json(), True


def _warm(store: TuningDB, rd: Path, run: dict, row: dict, machine, kernel, verdict: dict,
          rechecked: bool) -> tuple[object, dict]:
    """Start from the database's kernel: warm_start.leir, named by run.json's init."""
    from stochopt.backend.cost import cost

    path = rd / WARM_START_LEIR
    atomic_write(path, row["text"])
    run["init"] = str(path.resolve())
    origin = store.run(row["run"])
    run["tuning"].update(start=START_DATABASE, warm_start={
        "kernel": row["uid"], "cycles": cost(kernel, machine).cycles,
        "run_dir": origin["run_dir"] if origin else None, "found": row["created"],
        "plan": row["plan"], "rechecked": rechecked})
    return kernel, verdict


def _transfer(store: TuningDB, run: dict, spec, machine, baseline, own: list[dict]) -> None:
    found = transfer(store, spec_print(spec), run["tuning"]["machine_fingerprint"], machine,
                     baseline, own)
    if found is None:
        return
    config = run["config"]
    config["seed_plans"] = found["seed_plans"]
    # the user's own weights win over the learned ones
    config["move_weights"] = {**found["move_weights"], **config.get("move_weights", {})}
    run["tuning"]["transfer"] = {"from": found["from"],
                                 "move_weights": found["move_weights"]}
    if found["seed_plans"]:
        run["tuning"]["start"] = START_TRANSFER


def start_line(tuning: dict | None) -> str | None:
    """What the database gave the run's start, in one line (the live view and the
    summary); None when it gave nothing."""
    tuning = tuning or {}
    warm, moved = tuning.get("warm_start"), tuning.get("transfer")
    if warm:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(warm["found"]))
        again = ", checked again under this verifier" if warm.get("rechecked") else ""
        return (f"warm start: {warm['cycles']} cycles, the tuning database's best for this "
                f"spec and machine (found {when} by {warm['run_dir']}{again})")
    if moved:
        plans = "; ".join(f"{p['spec']} ({len(p['plan'])} of {p['steps']} steps, "
                          f"{p['cycles_after']} cycles)" for p in moved["from"])
        weights = f"{len(moved['move_weights'])} move weights" \
            if moved["move_weights"] else "no move weights"
        return (f"from similar specs in the tuning database: "
                f"{'plans of ' + plans if plans else 'no plan'}; {weights}")
    return None


def with_examples(rd: Path, run: dict, llm: dict | None, machine) -> dict | None:
    """The LLM settings with the run's slow -> fast pairs (stochopt/tuning/memory.py):
    examples.json, taken from the database when the run was made, so that a resumed
    run shows the same ones."""
    from stochopt.tuning.memory import example_pool
    if llm is None:
        return None
    path = rd / EXAMPLES_JSON
    tuning = run.get("tuning") or {}
    if path.is_file():
        pool = read_json(path).get("examples", [])
    elif tuning.get("db"):
        try:
            with TuningDB(tuning["db"], check=False) as store:
                pool = example_pool(store, tuning["spec_fingerprint"],
                                    tuning["machine_fingerprint"], machine)
        except (sqlite3.Error, OSError, StochoptError) as e:
            say(f"warning: no examples for the LLM from the tuning database: {e}")
            pool = []
        if pool:
            write_json(path, {"examples": pool})
    else:
        pool = []
    return {**llm, "examples": pool} if pool else llm


class RunRecorder:
    """What the main process writes to the database during a run. Every method is a
    no-op once the database is gone; the first failure is said in one line and noted
    in ``notes`` (the run's summary)."""

    def __init__(self, rd: Path, run: dict, notes: list[str] | None = None) -> None:
        self.rd, self.run, self.notes = rd, run, notes if notes is not None else []
        self.tuning = run.get("tuning") or {}
        self.store: TuningDB | None = None
        self.session = time.time()
        self.recorded: dict[str, int] = {}   # kernel uid -> cycles, this session's
        self.last_counts: dict = {}
        self.uid = uid_of(run.get("host"), Path(rd).resolve(), run.get("started"))
        if not self.tuning.get("db"):
            return
        try:
            self.store = TuningDB(self.tuning["db"], check=False)
            self.store.add_run(run_row(rd, run, self.uid))
        except Exception as e:  # any failure: the database must never stop the run
            self._lost(e)

    def _lost(self, e: BaseException) -> None:
        """The database failed: say so once, and go on without it."""
        if self.store is not None:
            try:
                self.store.close()
            except Exception:  # already broken: nothing more to lose
                pass
        self.store = None
        why = e.message if isinstance(e, StochoptError) else f"{type(e).__name__}: {e}"
        line = (f"the tuning database {self.tuning.get('db')} stopped taking writes "
                f"({why}); the run directory keeps this run: stochopt db import {self.rd} "
                "adds it later")
        say(f"warning: {line}")
        self.notes.append(line)

    def best(self, rd: Path) -> None:
        """best.leir changed: remember it when it is proved."""
        if self.store is None:
            return
        try:
            row = kernel_row(rd, self.run, self.uid)
            if row is not None and self.store.add_kernel(row):
                self.recorded[row["uid"]] = row["cycles"]
        except Exception as e:  # as in __init__
            self._lost(e)

    def stats(self, moves: dict[tuple[str, str], list[int]]) -> None:
        """The session's tries, acceptances and improvements per move so far."""
        if self.store is None or moves == self.last_counts:
            return
        try:
            self.store.put_rule_stats(self.uid, self.session, self.tuning["family"], moves)
            self.last_counts = {k: list(v) for k, v in moves.items()}
        except Exception as e:  # as in __init__
            self._lost(e)

    def end(self, rd: Path, stopped_by: str) -> None:
        """The run ended: its best and how. A best that failed the final re-check is
        marked refuted with every kernel of this run faster than the one kept; the kept
        one's re-check joins its proof."""
        if self.store is None:
            return
        try:
            best = read_json(rd / BEST_JSON)
            if (rd / COUNTEREXAMPLES / "recheck.npz").is_file():
                for uid, cycles in self.recorded.items():
                    if cycles < best["cycles"]:
                        self.store.mark_refuted(uid, "failed the run's final re-check")
            row = kernel_row(rd, self.run, self.uid, best)
            if row is not None:
                self.store.add_kernel(row)
                if (best.get("recheck") or {}).get("equivalent"):
                    self.store.mark_checked(row["uid"], row["verifier"], row["proof"])
            self.store.end_run(self.uid, best_cycles=best["cycles"], stopped_by=stopped_by,
                               ended=time.time())
        except Exception as e:  # as in __init__
            self._lost(e)
        finally:
            if self.store is not None:
                self.store.close()
                self.store = None


def run_row(rd: Path, run: dict, uid: str) -> dict:
    """The runs-table row of a run (its end is filled in when it ends)."""
    from stochopt.version import __version__
    tuning = run.get("tuning") or {}
    warm = tuning.get("warm_start") or {}
    try:
        baseline = (rd / "baseline.leir").read_text()
    except OSError:
        baseline = None
    return {"uid": uid, "spec": tuning["spec_fingerprint"],
            "machine": tuning["machine_fingerprint"], "run_dir": str(rd.resolve()),
            "host": run.get("host") or "", "started": run["started"],
            "seed": run.get("seed"), "budget_s": run.get("budget_s"),
            "start": tuning.get("start") or (START_INIT if run.get("init") else START_LOWERING),
            "warm_from": warm.get("kernel"), "baseline": baseline,
            "baseline_cycles": run.get("baseline_cycles"),
            "bound_cycles": run.get("bound_cycles"), "stochopt_version": __version__}


def kernel_row(rd: Path, run: dict, run_uid: str, best: dict | None = None,
               text: str | None = None) -> dict | None:
    """The kernels-table row of a run's proved best (best.json and best.leir, or the
    ones given); None when it is not proved (the lowering, a start still being checked)."""
    from stochopt.version import __version__
    best = read_json(rd / BEST_JSON) if best is None else best
    verdict = best.get("verdict")
    tuning = run.get("tuning") or {}
    if not verdict or not verdict.get("equivalent"):
        return None
    if best.get("source") == SOURCE_START and tuning.get("start") == START_DATABASE:
        return None  # the warm start: the database has it, from the run that found it
    text = (rd / BEST_LEIR).read_text() if text is None else text
    certificate = best.get("certificate") or {}
    if certificate.get("kernel_sha256") not in (None, sha256_text(text)):
        return None  # best.json already describes a newer kernel than best.leir
    sha = kernel_sha256(text)
    proof = {"verdict": verdict, "certificate": certificate,
             **({"recheck": best["recheck"]} if best.get("recheck") else {})}
    return {"uid": uid_of(run_uid, sha), "spec": tuning["spec_fingerprint"],
            "machine": tuning["machine_fingerprint"], "run": run_uid, "text": text,
            "text_sha256": sha, "cycles": best["cycles"], "source": best.get("source"),
            "t": best.get("t"), "chain": best.get("chain"), "proof": proof,
            "verifier": tuning.get("verifier") or verifier_version(), "checked_here": 1,
            "precision_margin": _margin(verdict), "plan": plan_from_lowering(best, run),
            "refuted": None, "created": time.time(), "stochopt_version": __version__}


def _margin(verdict: dict) -> float | None:
    """The share of the allowed precision error the kernel leaves unused."""
    error = verdict.get("max_precision_error")
    return None if error is None else round(1.0 - float(error), 6)


def plan_from_lowering(best: dict, run: dict) -> list | None:
    """best.json's plan as a plan from the spec's lowering: as it is when the run started
    from the lowering, after the warm start's own plan when it started from the
    database's kernel; None when unknown."""
    from stochopt.transform.plan import PlanError, plan_from_json, plan_to_json
    plan, start = best.get("plan"), best.get("plan_start")
    if plan is None:
        return None
    warm = (run.get("tuning") or {}).get("warm_start")
    if start == START_INIT and warm is not None and warm.get("plan") is not None:
        plan = warm["plan"] + plan
    elif start != START_LOWERING:
        return None
    try:
        return plan_to_json(plan_from_json(plan))
    except PlanError:
        return None


def remember_run_dir(store: TuningDB, rd: Path) -> dict:
    """Add a run directory to the database: the run, its proved best and the earlier
    bests its checkpoint kept (a run made with --no-db, or while its database was
    unavailable). Adding it twice adds nothing."""
    from stochopt.rundir import CHECKPOINT_JSON, RUN_JSON, SPEC_PY
    from stochopt.spec import load_spec
    from stochopt.tuning.fingerprints import summary_print

    if not (rd / RUN_JSON).is_file():
        raise StochoptError(f"{rd} is not a run directory (no run.json)",
                            hint="pass a directory written by stochopt optimize, or a file "
                            "written by stochopt db export")
    run = read_json(rd / RUN_JSON)
    if run.get("baseline_cycles") is None:
        raise StochoptError(f"run {rd} stopped during its setup: it proved nothing to add")
    sp = spec_print(load_spec(rd / SPEC_PY, run.get("name")))
    fingerprint, name, constants = summary_print(run["machine"], run.get("machine_name"))
    store.add_spec(sp)
    store.add_machine(fingerprint, name, constants)
    run = {**run, "tuning": {**(run.get("tuning") or {}), "spec_fingerprint": sp.fingerprint,
                             "family": sp.family, "machine_fingerprint": fingerprint}}
    uid = uid_of(run.get("host"), rd.resolve(), run.get("started"))
    added = {"runs": int(store.add_run(run_row(rd, run, uid))), "kernels": 0}
    checkpoint = read_json(rd / CHECKPOINT_JSON) if (rd / CHECKPOINT_JSON).is_file() else {}
    rows = [kernel_row(rd, run, uid)] + [
        kernel_row(rd, run, uid, {"verdict": b["verdict"], "cycles": b["cycles"],
                                  "source": SOURCE_SEARCH, "t": b.get("t"),
                                  "chain": b.get("chain")},
                   b["text"]) for b in checkpoint.get("bests", [])]
    for row in rows:
        added["kernels"] += row is not None and store.add_kernel(row)
    best = read_json(rd / BEST_JSON)
    store.end_run(uid, best_cycles=best["cycles"], stopped_by=checkpoint.get("stopped_by"),
                  ended=(rd / CHECKPOINT_JSON).stat().st_mtime if checkpoint else None)
    return added
