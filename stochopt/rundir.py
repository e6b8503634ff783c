"""The run directory: its schema (the files, their fields, the outcomes and event kinds)
and the writes that keep it safe against kill -9. The search writes it and the report
reads it; both take the names from here.

    run.json  spec.py  baseline.leir  best.leir  best.json  events.jsonl
    checkpoint.json  counterexamples/  llm/  check_bank/  unproved.leir (when there is one)
    warm_start.leir, examples.json (when the tuning database gave them)

best.leir only ever holds a proved kernel (or the starting kernel while its own check
runs, as best.json says): it is written to a temporary file, fsynced and renamed over
the old one, so a kill at any moment leaves a kernel that verifies.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from stochopt.errors import StochoptError

# -- the schema ---------------------------------------------------------------------------
# the run's settings (spec, spec_path, name, machine, machine_name, budget_s, proposer,
# arms, chains, check_workers, seed, init, max_proposals, max_cost, config, llm, started,
# versions, host, settings, ray, tuning: the tuning database's part, docs/database.md;
# betas: each chain's beta on the tempering ladder) and, once set up, roofline_cycles,
# baseline_cycles and bound_cycles
RUN_JSON = "run.json"
SPEC_PY = "spec.py"                  # a copy of the spec, so the run resumes without it
BASELINE_LEIR = "baseline.leir"      # the spec's lowering: what speedups are measured from
BEST_LEIR = "best.leir"              # the proved best kernel (the commit point)
# best.leir's facts, written first: cycles, source (SOURCE_*), t, chain, plan (the steps
# from the run's start, plan_to_json, or null when unknown), plan_start (START_LOWERING
# or START_INIT), profile, verdict, certificate, proof (one of PROOFS), recheck, unproved
BEST_JSON = "best.json"
UNPROVED_LEIR = "unproved.leir"      # a faster kernel whose full check did not finish
EVENTS_JSONL = "events.jsonl"        # one line per candidate kept (search/event_log.py)
CHECKPOINT_JSON = "checkpoint.json"  # the chains' states and totals, for --resume
COUNTEREXAMPLES = "counterexamples"  # inputs (.npz) on which a candidate was wrong
LLM_TRANSCRIPTS = "llm"              # one JSON transcript per LLM request
# what the tuning database gave the run (stochopt/tuning/runs.py): the kernel it started
# from (run.json's init names it), and the slow -> fast pairs its LLM prompts may show
WARM_START_LEIR = "warm_start.leir"
EXAMPLES_JSON = "examples.json"
# what the full checks computed once per input (verify/bank.py): drawn recipes, each
# input's reference, magnitudes and baseline output; a cache, safe to delete
CHECK_BANK = "check_bank"

# What became of a candidate (an event's "outcome"); the strings are what events.jsonl says
PARSE_ERROR = "parse_error"  # the text is not LEIR (or names no kernel)
INVALID = "invalid"          # LEIR that does not type, or no move applied
WRONG = "wrong"              # differs from the spec on an input
REJECTED = "rejected"        # as right as the current kernel; the chain stayed
ACCEPTED = "accepted"        # the chain moved to it
UNPROVED = "unproved"        # screened, faster than the best, but its full check did not
                             # finish before the run ended
BEST = "best"                # proved, and the fastest kernel yet
OUTCOMES = (PARSE_ERROR, INVALID, WRONG, REJECTED, ACCEPTED, UNPROVED, BEST)
# the outcomes a live run shows (unproved is known only at the end)
LIVE_OUTCOMES = tuple(o for o in OUTCOMES if o != UNPROVED)
# a candidate waiting for its full check: its event is held until the verdict replaces it
CHECKING = "checking"
# the outcomes where the chain moved to the candidate
TAKEN = (ACCEPTED, BEST)
# the outcomes of a candidate that never became a well-typed kernel
NOT_TYPED = (PARSE_ERROR, INVALID)

# best.json's "source": where best.leir's kernel came from
SOURCE_START = "start"    # the run's starting kernel
SOURCE_SEARCH = "search"  # a chain found it
# best.json's "proof" while best.leir's kernel has no verdict of its own
PROOF_PENDING = "pending"        # its full check is running
PROOF_LOWERING = "lowering"      # the spec's own lowering: right by construction, none needed
PROOF_UNFINISHED = "unfinished"  # the starting kernel's check did not finish in the budget
PROOFS = (PROOF_PENDING, PROOF_LOWERING, PROOF_UNFINISHED)
# how the run started: best.json's "plan_start" (the lowering or an --init kernel), and
# run.json's tuning "start" (the database's two ways as well, docs/database.md)
START_LOWERING = "lowering"
START_INIT = "init"
START_TRANSFER = "transfer"  # the lowering with plans that won on similar specs
START_DATABASE = "database"  # a warm start: the database's best kernel for this spec
STARTS = (START_LOWERING, START_INIT, START_TRANSFER, START_DATABASE)
# an events.jsonl line with "kind": AGGREGATE counts an interval's candidates that were
# not written one by one; a line without "kind" is one candidate
AGGREGATE = "aggregate"



def atomic_write(path: Path, text: str) -> None:
    """Write, fsync, rename: readers see the old file or the new one, never a mix."""
    atomic_write_bytes(path, text.encode())


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """atomic_write for bytes (files a chain on another node sent the driver)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    try:
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def write_json(path: Path, data: Any) -> None:
    atomic_write(path, json.dumps(data, indent=2, default=str) + "\n")


def read_json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise StochoptError(f"cannot read {path}: {e}") from None


def new_run_dir(spec_name: str, root: str | Path = "runs", name: str | None = None) -> Path:
    """runs/<spec>-<YYYYmmdd-HHMMSS>/ (or the directory named by --run-dir)."""
    if name is not None:
        path = Path(name)
        if path.exists() and not path.is_dir():
            raise StochoptError(f"run directory {path} is a file, not a directory",
                                hint="choose another --run-dir")
        if path.exists() and any(path.iterdir()):
            raise StochoptError(f"run directory {path} exists and is not empty",
                                hint="choose another --run-dir, or --resume it")
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = Path(root) / f"{spec_name}-{stamp}"
        k = 1
        while path.exists():
            path = Path(root) / f"{spec_name}-{stamp}-{k}"
            k += 1
    try:
        path.mkdir(parents=True, exist_ok=True)
        (path / "counterexamples").mkdir(exist_ok=True)
    except OSError as e:
        raise StochoptError(f"cannot create run directory {path}: {e}") from None
    return path


def copy_spec(spec_path: str, run_dir: Path) -> None:
    shutil.copyfile(spec_path, run_dir / "spec.py")


def read_events(path: Path) -> list[dict]:
    """Events of a run, skipping a last line cut short by a kill."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    except FileNotFoundError:
        pass
    return out
