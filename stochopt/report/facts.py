"""The facts of a run directory as one plain dict: the single source of the terminal,
JSON and HTML reports, so the three always show the same numbers.

A run directory may belong to a finished run, to a run still going, or to a run that
was killed: events.jsonl may end in half a line, checkpoint.json may lag the events,
and best.json may describe a kernel newer than best.leir (it is written first). The
facts trust, in order: best.leir (costed here, always a verified kernel), the events,
then the checkpoint.
"""

from __future__ import annotations

import difflib
import json
import time
from array import array
from pathlib import Path

from stochopt.errors import StochoptError
from stochopt.machine import run_machine
from stochopt.report.credit import PathCredit
from stochopt.report.history import history_facts
from stochopt.report.llm_facts import llm_facts, llm_headline
from stochopt.report.words import (
    format_seconds,
    format_share,
    format_speedup,
    format_usd,
    plural,
)
from stochopt.rundir import (
    AGGREGATE,
    BASELINE_LEIR,
    BEST_JSON,
    BEST_LEIR,
    CHECKPOINT_JSON,
    COUNTEREXAMPLES,
    EVENTS_JSONL,
    LLM_TRANSCRIPTS,
    OUTCOMES,
    PROOF_LOWERING,
    PROOF_PENDING,
    PROOF_UNFINISHED,
    RUN_JSON,
    SPEC_PY,
    TAKEN,
)
from stochopt.tuning.runs import start_line

RUNNING_WITHIN_S = 15.0   # a run whose files changed this recently is still going
TIMELINE_BINS = 30        # bins of the acceptance-over-time series


def run_facts(run_dir: str | Path, now: float | None = None) -> dict:
    """Read a run directory into a dict of plain values (see docs/report.md)."""
    rd = Path(run_dir)
    if not rd.exists():
        raise StochoptError(f"run directory {rd} does not exist",
                            hint="pass a directory written by stochopt optimize (runs/...)")
    if not (rd / RUN_JSON).is_file():
        raise StochoptError(f"{rd} is not a run directory (no run.json)",
                            hint="pass a directory written by stochopt optimize")
    now = time.time() if now is None else now
    run = _read_json(rd / RUN_JSON)
    if run.get("baseline_cycles") is None:  # optimize writes run.json before its setup
        raise StochoptError(f"run {rd} has not finished its setup (lowering the spec); it "
                            "is still starting, or was stopped then",
                            hint=f"wait a few seconds, or continue it with stochopt "
                            f"optimize --resume {rd}")
    checkpoint = _read_json(rd / CHECKPOINT_JSON, missing={})
    notes: list[str] = []
    machine = _machine(run, notes)
    baseline_cycles = int(run["baseline_cycles"])
    start_cycles = _start_cycles(run, machine, baseline_cycles)
    events = _read_events(rd / EVENTS_JSONL, notes, start_cycles)
    baseline_text = _read_text(rd / BASELINE_LEIR)
    best_text = _read_text(rd / BEST_LEIR)
    best_json = _read_json(rd / BEST_JSON, missing={})
    baseline_profile = _profile(baseline_text, machine, None, run["baseline_cycles"], notes,
                                "baseline.leir")
    best_profile = _profile(best_text, machine, best_json.get("profile"),
                            best_json.get("cycles"), notes, "best.leir")
    best_error = _parse_error(best_text, machine)

    best_cycles = int(best_profile["cycles"])
    roofline_cycles = int(run["roofline_cycles"])
    elapsed_s = max(float(checkpoint.get("elapsed_s", 0.0)), events["last_t"])
    budget_s = float(run["budget_s"])
    proposals, accepted = events["proposals"], events["accepted"]
    improvements, proposers = _attribute(events, run.get("arms", []), start_cycles)
    status = _status(rd, checkpoint, now)
    verification = _verification(best_text, best_json, notes, best_error)
    verification.setdefault("untested", [])
    facts = {
        "run_dir": str(rd), "spec": run["spec"], "spec_path": run.get("spec_path"),
        "machine": run.get("machine_name") or run["machine"].get("name"),
        "status": status, "stopped_by": _stopped_by(status, run, proposals, events),
        "started": _iso(run.get("started")), "elapsed_s": round(elapsed_s, 3),
        "budget_s": budget_s, "budget_used": round(elapsed_s / budget_s, 4) if budget_s else 0,
        "proposer": run.get("proposer"), "arms": list(run.get("arms", [])),
        "chains": run.get("chains"), "seed": run.get("seed"),
        "baseline_cycles": baseline_cycles, "start_cycles": start_cycles,
        "best_cycles": best_cycles, "speedup": _ratio(baseline_cycles, best_cycles),
        "roofline_cycles": roofline_cycles,
        "roofline_share": _ratio(roofline_cycles, best_cycles),
        "baseline_roofline_share": _ratio(roofline_cycles, baseline_cycles),
        # the reachable bound (docs/machine.md section 6); runs from before it have none
        "bound_cycles": run.get("bound_cycles"),
        "bound_share": _ratio(run["bound_cycles"], best_cycles) if run.get("bound_cycles")
        else None,
        **verification, "best_path": str(rd / BEST_LEIR),
        # where and when the best was found, as long as best.json is about best.leir
        **{f"best_{k}": best_json.get(k) if verification["verification"] else None
           for k in ("source", "t", "chain")},
        "proposals": proposals, "accepted": accepted,
        "acceptance": round(accepted / proposals, 4) if proposals else 0.0,
        "rate": round(proposals / elapsed_s, 2) if elapsed_s else 0.0,
        "outcomes": events["outcomes"],
        "tokens": events["tokens"], "cost_usd": round(events["cost_usd"], 6),
        "llm_model": (run.get("llm") or {}).get("model"),
        "proposers": proposers, "improvements": improvements,
        "timeline": _timeline(events, elapsed_s),
        "profiles": {"baseline": baseline_profile, "best": best_profile},
        "kernels": {"baseline": baseline_text, "best": best_text},
        "diff": list(difflib.unified_diff(baseline_text.splitlines(), best_text.splitlines(),
                                          "baseline.leir", "best.leir", lineterm="")),
        "unproved": _unproved(best_json, baseline_cycles, notes),
        "relies_on": _relies_on(rd, run, best_text, machine, best_error, notes),
        # the inputs that refuted kernels (a refuted best's own .leir sits beside one)
        "counterexamples": _count_files(rd / COUNTEREXAMPLES, ".npz"),
        "llm_transcripts": _count_files(rd / LLM_TRANSCRIPTS),
        # requests, prompt sizes, failures, the yield per form and variant, improvements
        "llm": llm_facts(rd, run, events["llm_proved"], improvements),
        "restarts": events["restarts"],  # chains started again after their process died
        "tuning": run.get("tuning"),  # what the tuning database gave the run
        "history": history_facts(run, rd),  # this spec's runs in the tuning database
        "notes": notes,
    }
    _check_trajectory(facts, rd)
    if events["restarts"]:
        when = ", ".join(f"chain {r['chain']} at {r['t']:.0f}s" for r in events["restarts"][:5])
        notes.append(f"{plural(len(events['restarts']), 'chain')} restarted from "
                     f"{'its' if len(events['restarts']) == 1 else 'their'} last state ({when}; "
                     f"{events['restarts'][0]['why'].split(';')[0]})")
    if events["worker_restarts"]:
        first = events["worker_restarts"][0]
        notes.append(f"{plural(len(events['worker_restarts']), 'check worker')} started again "
                     f"(worker {first['worker']} at {first['t']:.0f}s; "
                     f"{first['why'].split(';')[0]}); the candidates they were checking "
                     "were checked again")
    if not facts["outcomes"].get("unproved"):  # rare: its column shows only when it occurs
        for counts in [facts["outcomes"]] + [p["outcomes"] for p in proposers.values()]:
            counts.pop("unproved", None)
    return facts


def headline(f: dict) -> list[tuple[str, str]]:
    """The summary as (label, value) pairs, in the order the terminal and page show it."""
    verified = "yes" if f["verified"] else "NO"
    if f["verified"] and f.get("untested"):
        verified += f", NOT TESTED on {plural(len(f['untested']), 'side')} of its decisions"
    if f["verified"] and f["verification"]:
        v = f["verification"]
        verified += f" ({plural(v['examples'] or 0, 'example')}, seed {v['seed']}"
        verified += f"; re-checked, seed {v['recheck_seed']})" if v.get("recheck_seed") \
            is not None else "; the final re-check did not finish)" if v.get(
                "recheck_unfinished") else ")"
    elif f.get("proof") == PROOF_LOWERING:
        verified += " (the baseline: the spec's own lowering, which every check compares " \
                    "against)"
    elif f.get("proof"):
        verified += f" (the starting kernel's own full check {f['proof']})"
    status = f["status"] + (f" (stopped by {f['stopped_by']})" if f["stopped_by"] else "")
    rows = [
        ("spec", f"{f['spec']} on {f['machine']}"),
        ("status", status),
        ("budget", f"{format_seconds(f['elapsed_s'])} of {format_seconds(f['budget_s'])} "
                   f"({format_share(f['budget_used'])})"),
        ("candidates", f"{f['proposals']} ({f['rate']:.1f}/s), {f['accepted']} accepted "
                       f"({format_share(f['acceptance'])})"),
        ("cycles", f"{f['baseline_cycles']} -> {f['best_cycles']} "
                   f"({format_speedup(f['speedup'])})"),
        ("roofline", f"{f['roofline_cycles']} cycles: best is at "
                     f"{format_share(f['roofline_share'])} of it (baseline "
                     f"{format_share(f['baseline_roofline_share'])})"),
        ("verified", verified),
        ("LLM", llm_summary(f)),
    ] + llm_headline(f.get("llm"))
    labels = [label for label, _ in rows]
    if f.get("bound_cycles"):
        rows.insert(labels.index("roofline") + 1,
                    ("bound", f"{f['bound_cycles']} cycles: best is at "
                              f"{format_share(f['bound_share'])} of it"))
    start = start_line(f.get("tuning"))
    if start:  # the tuning database gave the start: a warm start, or plans
        rows.insert(labels.index("cycles") + 1, ("start", start))
        labels = [label for label, _ in rows]
    if f.get("unproved"):  # never a bare 1.00x when a faster kernel was found
        u = f["unproved"]
        found = format_speedup(_ratio(f["baseline_cycles"], u["cycles"]))
        at = labels.index("cycles")
        rows[at] = ("cycles", f"{rows[at][1]} proved; {f['baseline_cycles']} -> {u['cycles']} "
                              f"({found}) found, unproved")
        rows.insert(at + 1, ("unproved", f"{u['cycles']} cycles ({found}), its full check "
                                         f"unfinished: {u['prove']}"))
    return rows


def llm_configured(f: dict) -> bool:
    return bool(f.get("llm_model") or f["tokens"] or f["cost_usd"])


def llm_summary(f: dict) -> str:
    """Tokens and dollars, or that the run had no LLM (not a misleading $0.0000)."""
    if not llm_configured(f):
        return "none configured (built-in proposers only)"
    return f"{plural(f['tokens'], 'token')}, {format_usd(f['cost_usd'])}"


# ---------------------------------------------------------------------------------
# reading the files
# ---------------------------------------------------------------------------------

def _read_json(path: Path, missing: dict | None = None) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        if missing is not None:
            return missing
        raise StochoptError(f"{path.parent} has no {path.name}") from None
    except (OSError, json.JSONDecodeError) as e:
        if missing is not None:
            return missing
        raise StochoptError(f"cannot read {path}: {e}") from None


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as e:
        raise StochoptError(f"cannot read {path}: {e}",
                            hint="a run directory always holds baseline.leir and best.leir"
                            ) from None


def _read_events(path: Path, notes: list[str], start_cycles: int) -> dict:
    """Stream events.jsonl into totals; keep only what the charts need per event."""
    credit = PathCredit(start_cycles)
    per = {"proposals": 0, "accepted": 0, "tokens": 0, "cost_usd": 0.0, "last_t": 0.0,
           "outcomes": dict.fromkeys(OUTCOMES, 0), "by_proposer": {}, "steps": credit.steps,
           "llm_proved": credit.llm_proved,
           "times": array("d"), "taken": array("b"), "spans": [], "restarts": [],
           "worker_restarts": []}
    skipped = 0
    try:
        f = open(path)
    except FileNotFoundError:
        return per
    with f:
        for line in f:
            try:
                e = json.loads(line)
                if "outcome" not in e and _other_line(e, per):
                    continue
                outcome, t = e["outcome"], float(e.get("t") or 0.0)
            except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
                skipped += 1
                continue
            per["proposals"] += 1
            per["outcomes"][outcome] = per["outcomes"].get(outcome, 0) + 1
            taken = outcome in TAKEN
            per["accepted"] += taken
            tokens, usd = int(e.get("tokens") or 0), float(e.get("cost_usd") or 0.0)
            per["tokens"] += tokens
            per["cost_usd"] += usd
            per["last_t"] = max(per["last_t"], t)
            per["times"].append(t)
            per["taken"].append(taken)
            p = per["by_proposer"].get(e.get("proposer", "?"))
            if p is None:  # (a new row per line would cost more than the rest of the loop)
                p = per["by_proposer"][e.get("proposer", "?")] = _proposer_row()
            p["proposals"] += 1
            p["outcomes"][outcome] = p["outcomes"].get(outcome, 0) + 1
            p["accepted"] += taken
            p["tokens"] += tokens
            p["cost_usd"] += usd
            try:
                credit.add(e, t)
            except (TypeError, ValueError):
                skipped += 1  # a line that parsed but whose cycles are no number
    if skipped:
        notes.append(f"{skipped} line(s) of events.jsonl could not be read and were skipped "
                     "(a run killed while writing leaves its last line cut short)")
    return per


def _other_line(e: dict, per: dict) -> bool:
    """A line that is no single candidate: an interval's aggregate (the candidates
    events.jsonl only counted, stochopt/search/event_log.py) or a chain's restart on
    another node. False for anything else (a broken line)."""
    if e.get("event") == "chain_restarted":
        per["restarts"].append({"t": float(e["t"]), "chain": e["chain"], "why": e["why"]})
        return True
    if e.get("event") == "worker_restarted":
        per["worker_restarts"].append({"t": float(e["t"]), "worker": e["worker"],
                                       "why": e["why"]})
        return True
    if e.get("kind") != AGGREGATE:
        return False
    n, taken = int(e["candidates"]), int(e["taken"])
    per["proposals"] += n
    per["accepted"] += taken
    per["tokens"] += int(e.get("tokens") or 0)
    per["cost_usd"] += float(e.get("cost_usd") or 0.0)
    per["last_t"] = max(per["last_t"], float(e["t1"]))
    per["spans"].append((float(e["t0"]), float(e["t1"]), n, taken))
    for proposer, outcomes in e["outcomes"].items():
        row = per["by_proposer"].setdefault(proposer, _proposer_row())
        for outcome, count in outcomes.items():
            count = int(count)
            per["outcomes"][outcome] = per["outcomes"].get(outcome, 0) + count
            row["outcomes"][outcome] = row["outcomes"].get(outcome, 0) + count
            row["proposals"] += count
            row["accepted"] += count if outcome in TAKEN else 0
    return True


def _proposer_row() -> dict:
    return {"proposals": 0, "outcomes": dict.fromkeys(OUTCOMES, 0), "accepted": 0,
            "improvements": 0, "cycles_saved": 0, "improvement_share": 0.0,
            "tokens": 0, "cost_usd": 0.0}


def _machine(run: dict, notes: list[str]):
    try:
        return run_machine(run)
    except (StochoptError, TypeError, KeyError) as e:
        name = run.get("machine_name") or run["machine"].get("name")
        notes.append(f"cannot rebuild machine {name} from run.json ({e}); "
                     "profiles come from best.json")
        return None


def _relies_on(rd: Path, run: dict, best_text: str, machine, parse_error: str | None,
               notes: list[str]) -> dict[str, list[str]] | None:
    """Which declared input ranges best.leir's safety rests on (the static range analysis,
    stochopt.verify.range_facts): a kernel that dropped a max shift because the spec's
    range allows it is right only inside that range. None where it cannot be known."""
    from stochopt.leir.parser import parse
    from stochopt.spec import load_spec
    from stochopt.verify.ranges import range_facts

    if machine is None or parse_error is not None or not (rd / SPEC_PY).is_file():
        return None
    try:
        relies = range_facts(parse(best_text, machine),
                             load_spec(rd / SPEC_PY, run.get("name"))).relies_on
    except StochoptError:
        return None
    for name, hazards in relies.items():
        notes.append(f"best.leir is right only inside the declared range of {name}: on a "
                     f"wider one, {hazards[0]}")
    return relies


def _parse_error(text: str, machine) -> str | None:
    """Why a kernel file does not parse as LEIR, or None when it does."""
    from stochopt.leir.parser import parse

    if machine is None:  # the machine could not be rebuilt: nothing to parse against
        return None
    try:
        parse(text, machine)
    except StochoptError as e:
        return str(e)
    return None


def _profile(text: str, machine, stored: dict | None, cycles: int | None,
             notes: list[str], what: str) -> dict:
    """The kernel's profile, costed now; else the stored one; else its cycles alone."""
    from stochopt.backend.cost import cost
    from stochopt.leir.parser import parse

    if machine is not None:
        try:
            kernel = parse(text, machine)
            profile = cost(kernel, machine).to_json()
        except StochoptError as e:
            notes.append(f"cannot cost {what} ({e})")
        else:
            # the line of each op in the kernel file, as the page and terminal number it
            for op in profile["ops"]:
                op["line"] = kernel.nodes[op["index"]].line
            return profile
    if stored and stored.get("ops"):
        return stored
    if cycles is None:
        raise StochoptError(f"cannot cost {what} and no cycle count of it is stored")
    return {"cycles": int(cycles), "ops": [], "resources": {}, "critical_path": []}


def _start_cycles(run: dict, machine, baseline_cycles: int) -> int:
    """The cycles the search started from: the --init kernel's, else the baseline's."""
    if not run.get("init") or machine is None:
        return baseline_cycles
    from stochopt.backend.cost import cost
    from stochopt.leir.parser import parse
    try:
        return cost(parse(Path(run["init"]).read_text(), machine), machine).cycles
    except (OSError, UnicodeDecodeError, StochoptError):
        return baseline_cycles


def _verification(best_text: str, best_json: dict, notes: list[str],
                  parse_error: str | None) -> dict:
    """Whether best.leir is verified, and how hard it was checked."""
    from stochopt.verify.check import sha256_text
    from stochopt.verify.coverage import untested_note, untested_sides

    if parse_error is not None:
        # the search only ever writes kernels that parse: this file was changed since
        notes.append(f"best.leir is not a valid kernel ({parse_error}): it was changed "
                     "after the run wrote it, so it is not verified")
        return {"verified": False, "verification": None}
    cert = best_json.get("certificate") or {}
    if best_json.get("proof") == PROOF_LOWERING and best_json.get("verdict") is None:
        # the spec's own lowering: the baseline every check compares against
        return {"verified": True, "verification": None, "proof": PROOF_LOWERING}
    if best_json.get("proof") and best_json.get("verdict") is None:
        # the starting kernel, whose own full check runs beside the search (or was cut)
        return {"verified": False, "verification": None, "proof": {
            PROOF_PENDING: "is still running",
            PROOF_UNFINISHED: "did not finish within the budget"
        }.get(best_json["proof"], best_json["proof"])}
    if not best_json:
        notes.append("best.json is missing or unreadable: the check details of best.leir "
                     "are unknown")
        return {"verified": True, "verification": None}
    if cert.get("kernel_sha256") != sha256_text(best_text):
        # best.json is written before best.leir: a kill in between leaves best.leir
        # holding the previous best, which was verified when it was written
        notes.append("best.json describes another kernel than best.leir (the run was "
                     "killed between the two writes); best.leir is the previous verified "
                     "best and its check details are not stored")
        return {"verified": True, "verification": None}
    verdict = best_json.get("verdict") or {}
    recheck = best_json.get("recheck")
    unfinished = recheck is not None and recheck.get("finished") is False
    verified = bool(cert.get("equivalent")) and bool(verdict.get("equivalent", True)) and \
        (recheck is None or unfinished or bool(recheck.get("equivalent")))
    untested = untested_sides(verdict, recheck)
    if verified and untested:
        notes.append(untested_note(untested))
    return {"verified": verified, "untested": untested, "verification": {
        "examples": cert.get("examples"), "seed": cert.get("seed"),
        "max_semantic_error": cert.get("max_semantic_error"),
        "max_precision_error": cert.get("max_precision_error"),
        "checked_at": cert.get("checked_at"),
        "recheck_seed": recheck.get("seed") if recheck and not unfinished else None,
        "recheck_unfinished": unfinished}}


def _unproved(best_json: dict, baseline_cycles: int, notes: list[str]) -> dict | None:
    """A kernel faster than best.leir that the run found but could not prove in time."""
    u = best_json.get("unproved")
    if not u:
        return None
    notes.append(f"a faster kernel was found but not proved: {u['cycles']} cycles "
                 f"({format_speedup(_ratio(baseline_cycles, u['cycles']))}) in "
                 f"{u['path']}; {u['why']}. Prove it with: {u['prove']}, or run the search "
                 "with a longer --budget")
    return u


def _count_files(path: Path, suffix: str = "") -> int:
    try:
        return sum(1 for p in path.iterdir() if p.is_file() and p.name.endswith(suffix))
    except OSError:
        return 0


# ---------------------------------------------------------------------------------
# what the events say
# ---------------------------------------------------------------------------------

def _attribute(events: dict, arms: list[str], start_cycles: int) -> tuple[list, dict]:
    """The steps of the global best in time order, and each proposer's credit: its share
    of every step's saving along the path the chain took there (see credit.py). A
    chain's 'best' that did not beat the global best (another chain was ahead) is no
    step."""
    proposers = {a: _proposer_row() for a in arms}
    proposers.update(events["by_proposer"])
    steps = sorted(events["steps"], key=lambda s: s["t"])
    for step in steps:
        proposers.setdefault(step["proposer"], _proposer_row())["improvements"] += 1
        for name, cycles in step["credit"].items():
            proposers.setdefault(name, _proposer_row())["cycles_saved"] += cycles
    total = start_cycles - min([start_cycles] + [s["cycles"] for s in steps])
    for row in proposers.values():
        row["improvement_share"] = round(row["cycles_saved"] / total, 4) if total else 0.0
        row["cost_usd"] = round(row["cost_usd"], 6)
    return steps, dict(sorted(proposers.items()))


def _timeline(events: dict, elapsed_s: float) -> list[dict]:
    """Proposals and accepted moves in equal bins of time, for the acceptance chart."""
    times, taken = events["times"], events["taken"]
    if not times and not events["spans"]:
        return []
    end = max(elapsed_s, events["last_t"], 1e-9)
    width = end / TIMELINE_BINS
    bins = [{"t0": round(i * width, 3), "t1": round((i + 1) * width, 3), "proposals": 0,
             "accepted": 0} for i in range(TIMELINE_BINS)]

    def index(t: float) -> int:
        return min(TIMELINE_BINS - 1, max(0, int(t / width)))

    for t, k in zip(times, taken, strict=True):
        b = bins[index(t)]
        b["proposals"] += 1
        b["accepted"] += k
    for t0, t1, n, k in events["spans"]:  # an aggregate: spread evenly over its bins
        first, last = index(t0), index(t1)
        for i in range(first, last + 1):
            share = 1 / (last - first + 1)
            bins[i]["proposals"] += n * share
            bins[i]["accepted"] += k * share
    if events["spans"]:
        for b in bins:
            b["proposals"], b["accepted"] = round(b["proposals"]), round(b["accepted"])
    return bins


def _status(rd: Path, checkpoint: dict, now: float) -> str:
    if checkpoint.get("finished"):
        return "finished"
    if checkpoint.get("stopped_by") == "interrupted":  # Ctrl-C or SIGTERM, checkpointed
        return "interrupted"
    touched = [p.stat().st_mtime for p in (rd / EVENTS_JSONL, rd / CHECKPOINT_JSON)
               if p.exists()]
    return "running" if touched and now - max(touched) < RUNNING_WITHIN_S else "stopped"


def _stopped_by(status: str, run: dict, proposals: int, events: dict) -> str | None:
    if status != "finished":
        return None
    if run.get("max_proposals") and proposals >= run["max_proposals"]:
        return "max_proposals"
    if run.get("max_cost") and events["cost_usd"] >= run["max_cost"]:
        return "max_cost"
    return "budget"


def _check_trajectory(f: dict, rd: Path) -> None:
    """Say so when the events and best.leir disagree about the best."""
    last = f["improvements"][-1]["cycles"] if f["improvements"] else f["start_cycles"]
    if last < f["best_cycles"]:
        why = ("the final re-check failed (see counterexamples/recheck.npz)"
               if (rd / COUNTEREXAMPLES / "recheck.npz").exists()
               else "the run stopped before it was written")
        f["notes"].append(f"the events record a best of {last} cycles that best.leir does "
                          f"not hold: {why}")
    if f["status"] in ("stopped", "interrupted") and f["elapsed_s"] < f["budget_s"]:
        f["notes"].append("the run stopped before its budget was spent; continue it with "
                          f"stochopt optimize --resume {rd}")


def _ratio(a: float, b: float) -> float:
    return round(a / b, 4) if b else 0.0


def _iso(t: float | None) -> str | None:
    if t is None:
        return None
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def to_json(facts: dict) -> str:
    """The facts as the JSON that --json prints."""
    return json.dumps(facts, indent=2, default=str, allow_nan=False)

