"""stochopt.optimize(): the main job, usable from a notebook or from the CLI."""

from __future__ import annotations

import json
import os
import platform
import queue
import signal
import time
from pathlib import Path

from stochopt.backend.cost import cost, roofline_of_kernel
from stochopt.backend.machine import PRESETS, load_machine
from stochopt.errors import StochoptError
from stochopt.leir.parser import parse
from stochopt.leir.render import render
from stochopt.search.budget import parse_duration
from stochopt.search.chain import ChainConfig
from stochopt.search.driver import Job, RunResult, load_checkpoint, save_checkpoint, start_workers
from stochopt.search.proposers import check_proposer
from stochopt.search.rundir import (
    EventLog,
    atomic_write,
    copy_spec,
    new_run_dir,
    read_json,
    write_json,
)
from stochopt.spec import load_spec
from stochopt.verify.check import certificate, check


def optimize(spec_path: str | None = None, *, budget: str | float = "10m",
             proposer: str = "mixed", chains: int | None = None, seed: int = 0,
             init: str | None = None, machine: str = "mncore2", run_dir: str | None = None,
             resume: str | None = None, max_proposals: int | None = None,
             max_cost: float | None = None, name: str | None = None, llm: dict | None = None,
             progress=None, config: ChainConfig | None = None) -> RunResult:
    """Search for a faster kernel for a spec; return what was found (see RunResult).

    ``progress`` is called with a stats dict a few times a second (the CLI draws it)."""
    if resume is not None:
        return _resume(Path(resume), budget_override=None, progress=progress)
    if spec_path is None:
        raise StochoptError("optimize needs a spec file (or resume=RUN_DIR)")
    budget_s = parse_duration(budget)
    if chains is None:
        chains = os.cpu_count() or 1
    if not isinstance(chains, int) or isinstance(chains, bool) or not 1 <= chains <= 64:
        raise StochoptError(f"chains must be between 1 and 64, got {chains!r}")
    if max_proposals is not None and (not isinstance(max_proposals, int) or max_proposals < 1):
        raise StochoptError(f"max_proposals must be a positive integer, got {max_proposals!r}")
    if max_cost is not None and not max_cost > 0:
        raise StochoptError(f"max_cost must be positive, got {max_cost!r}")
    from stochopt.search.llm import llm_options
    llm = llm_options(llm, max_cost)  # defaults filled, every value and template checked
    arms = check_proposer(proposer, llm_available=llm is not None)
    m = load_machine(machine)
    spec = load_spec(spec_path, name)
    baseline, start = _starting_kernels(spec, m, init)
    verdict = check(start, spec, machine=m, baseline=baseline, seed=seed)
    if not verdict.equivalent:
        raise StochoptError(
            f"the starting kernel is not equivalent to spec {spec.name}: "
            f"{verdict.counterexample.describe()}",
            hint="fix the --init kernel" if init else "this is a lowering bug: please report it")
    rd = new_run_dir(spec.name, name=run_dir)
    copy_spec(spec_path, rd)
    config = config or ChainConfig()
    baseline_text, start_text = render(baseline), render(start)
    roof = _roofline(spec, m, baseline)
    run = {"spec": spec.name, "spec_path": str(Path(spec_path).resolve()), "name": name,
           "machine": m.summary(), "machine_name": m.name, "budget_s": budget_s,
           "proposer": proposer, "arms": arms, "chains": chains, "seed": seed,
           "init": init, "max_proposals": max_proposals, "max_cost": max_cost,
           "config": vars(config), "llm": _public_llm(llm), "roofline_cycles": roof,
           "baseline_cycles": cost(baseline, m).cycles, "started": time.time(),
           "versions": _versions(), "host": platform.node()}
    write_json(rd / "run.json", run)
    atomic_write(rd / "baseline.leir", baseline_text)
    _write_best(rd, start, spec, verdict, m, source="start")
    state = {"elapsed_s": 0.0, "proposals": 0, "chains": [], "finished": False,
             "best_cycles": cost(start, m).cycles, "tokens": 0, "cost_usd": 0.0}
    save_checkpoint(rd, state)
    return _drive(rd, run, state, start_text, baseline_text, llm, progress)


def _starting_kernels(spec, machine, init: str | None):
    from stochopt.lower import lower

    try:
        baseline = lower(spec, machine)
    except StochoptError:
        if init is None:
            raise
        baseline = None
    if init is None:
        return baseline, baseline
    try:
        text = Path(init).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise StochoptError(f"cannot read --init kernel {init}: {e}") from None
    start = parse(text, machine)
    return (baseline or start), start


def _roofline(spec, machine, baseline) -> int:
    try:
        from stochopt.lower.roofline import spec_roofline
        return spec_roofline(spec, machine).cycles
    except StochoptError:
        return roofline_of_kernel(baseline, machine)


def _public_llm(llm: dict | None) -> dict | None:
    if not llm:
        return None
    return {k: v for k, v in llm.items() if k != "api_key"}


def _versions() -> dict:
    import hypothesis
    import numpy

    from stochopt import __version__
    return {"stochopt": __version__, "numpy": numpy.__version__,
            "hypothesis": hypothesis.__version__, "python": platform.python_version()}


def _write_best(rd: Path, kernel, spec, verdict, machine, source: str, t: float = 0.0,
                chain: int | None = None, recheck: dict | None = None) -> None:
    """best.json first, then best.leir: the kernel file is the commit point."""
    profile = cost(kernel, machine)
    facts = {"cycles": profile.cycles, "source": source, "t": t, "chain": chain,
             "profile": profile.to_json(), "verdict": verdict if isinstance(verdict, dict)
             else verdict.to_json(),
             "certificate": certificate(kernel, spec, _as_verdict(verdict), machine)}
    if recheck is not None:
        facts["recheck"] = recheck
    write_json(rd / "best.json", facts)
    atomic_write(rd / "best.leir", render(kernel))


def _as_verdict(v):
    from stochopt.verify.check import Verdict
    if isinstance(v, Verdict):
        return v
    return Verdict(v["equivalent"], v["examples"], v["seed"],
                   float(v["max_semantic_error"]), float(v["max_precision_error"]))


def _resume(rd: Path, budget_override, progress) -> RunResult:
    if not (rd / "run.json").is_file():
        raise StochoptError(f"{rd} is not a run directory (no run.json)")
    run = read_json(rd / "run.json")
    state = load_checkpoint(rd)
    if state.get("finished"):
        raise StochoptError(f"run {rd} already finished", hint="start a new run")
    if state["elapsed_s"] >= run["budget_s"]:
        raise StochoptError(f"run {rd} has no budget left")
    return _drive(rd, run, state, (rd / "best.leir").read_text(),
                  (rd / "baseline.leir").read_text(), run.get("llm"), progress)


def _drive(rd: Path, run: dict, state: dict, start_text: str, baseline_text: str,
           llm: dict | None, progress) -> RunResult:
    from stochopt.spec import load_spec as _load

    m = load_machine(run["machine_name"]) if run["machine_name"] in PRESETS \
        else _machine_from_run(run)
    spec = _load(rd / "spec.py", run.get("name"))
    started = time.time()
    elapsed_before = state["elapsed_s"]
    t0 = started - elapsed_before
    deadline = started + (run["budget_s"] - elapsed_before)
    quota = _quotas(run["max_proposals"], run["chains"], state)
    previous = {c["index"]: c for c in state.get("chains", [])}
    jobs = [Job(i, str(rd), str(rd / "spec.py"), run.get("name"), m, baseline_text, start_text,
                run["seed"] * 1000 + i, run["arms"], run["config"], t0, deadline, quota[i],
                previous.get(i), llm) for i in range(run["chains"])]
    procs, outbox, inboxes, stop = start_workers(jobs)
    stats = _Stats(run, state, t0)
    stopped_by = {"why": "budget"}

    def on_signal(signum, frame):
        stopped_by["why"] = "interrupted"
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    log = EventLog(rd / "events.jsonl")
    chain_states = dict(previous)
    last_ckpt = time.time()
    alive = len(procs)
    try:
        while alive:
            try:
                msg = outbox.get(timeout=0.1)
            except queue.Empty:
                msg = None
            if msg is not None:
                kind = msg[0]
                if kind == "events":
                    for e in msg[2]:
                        log.write(e)
                        stats.add(e)
                elif kind == "best":
                    _, index, text, cycles, facts = msg
                    if cycles < stats.best_cycles:
                        kernel = parse(text, m)
                        _write_best(rd, kernel, spec, facts, m, "search", stats.elapsed(), index)
                        stats.best_cycles = cycles
                        stats.keep_best(text, cycles, facts, index)
                        for q in inboxes:
                            q.put(("best", text, cycles))
                elif kind == "state":
                    chain_states[msg[1]] = msg[2]
                elif kind == "error":
                    stats.errors.append(f"chain {msg[1]}: {msg[2]}")
                elif kind == "done":
                    alive -= 1
            if run.get("max_cost") and stats.cost_usd >= run["max_cost"] and not stop.is_set():
                stopped_by["why"] = "max_cost"
                stop.set()
            now = time.time()
            if now - last_ckpt > 5.0:
                log.flush()
                _checkpoint(rd, stats, chain_states, finished=False)
                last_ckpt = now
            if progress is not None:
                progress(stats.snapshot())
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        stop.set()
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
        log.close()
    if stopped_by["why"] == "budget" and run.get("max_proposals") and \
            stats.proposals >= run["max_proposals"]:
        stopped_by["why"] = "max_proposals"
    llm_note = stats.llm_note()
    if llm_note:  # the LLM failed: say so where the user looks, and in the run's files
        stats.notes.append(llm_note)
        if run["arms"] == ["llm"] and stats.llm_stopped and stopped_by["why"] != "interrupted":
            stopped_by["why"] = "llm_failed"   # the CLI exits 1
        _record_llm_status(rd, stats)
    finished = stopped_by["why"] != "interrupted"
    _checkpoint(rd, stats, chain_states, finished=finished)
    if finished:
        note = _recheck_best(rd, spec, m, run["seed"], baseline_text, stats.bests)
        if note:
            stats.notes.append(note)
            stats.best_cycles = json.loads((rd / "best.json").read_text())["cycles"]
            _checkpoint(rd, stats, chain_states, finished=True)
    if stats.errors and stats.proposals == 0:
        raise StochoptError("every chain failed: " + "; ".join(stats.errors[:3]))
    return _result(rd, run, stats, m, stopped_by["why"])


def _record_llm_status(rd: Path, stats) -> None:
    """run.json and best.json say why the LLM gave no candidates."""
    status = {"stopped": stats.llm_stopped, "last_error": stats.llm_last_error,
              "candidates_from_replies": stats.llm_answered,
              "requests_failed": stats.llm_failed}
    for name in ("run.json", "best.json"):
        write_json(rd / name, {**read_json(rd / name), "llm_status": status})


def _recheck_best(rd: Path, spec, machine, seed: int, baseline_text: str,
                  earlier: list[dict]) -> str | None:
    """The final best is checked once more with a fresh seed; the verdict goes in
    best.json. A kernel that fails here slipped through the full check: the next
    fastest earlier best that passes the same re-check takes its place (else the
    baseline), so that best.leir keeps its promise; the returned note says so."""
    best = json.loads((rd / "best.json").read_text())
    if best.get("source") == "start" or "recheck" in best:
        return None
    baseline = parse(baseline_text, machine)

    def recheck(kernel):
        return check(kernel, spec, machine=machine, baseline=baseline, seed=seed + 104729)

    verdict = recheck(parse((rd / "best.leir").read_text(), machine))
    if verdict.equivalent:
        write_json(rd / "best.json", {**best, "recheck": verdict.to_json()})
        return None
    bad = verdict.counterexample
    bad.save(rd / "counterexamples" / "recheck.npz")
    failed = f"the best kernel ({best['cycles']} cycles) failed its final re-check: " \
             f"{bad.describe()}; the failing input is in {bad.path}"
    for entry in sorted(earlier, key=lambda e: e["cycles"]):
        if entry["cycles"] <= best["cycles"]:
            continue
        kernel = parse(entry["text"], machine)
        again = recheck(kernel)
        if again.equivalent:
            _write_best(rd, kernel, spec, entry["verdict"], machine, "search", entry["t"],
                        entry["chain"], recheck=again.to_json())
            return f"{failed}; best.leir holds the fastest earlier best that passes it " \
                   f"({entry['cycles']} cycles)"
    base_verdict = check(baseline, spec, machine=machine, baseline=baseline, seed=seed)
    _write_best(rd, baseline, spec, base_verdict, machine, source="start")
    return f"{failed}; no earlier best passes it, so best.leir is back to the baseline"


def _machine_from_run(run: dict):
    from stochopt.backend.machine import machine_from_dict
    data = dict(run["machine"])
    data.pop("name", None)
    return machine_from_dict({**data, "name": run["machine_name"]}, run["machine_name"])


def _quotas(max_proposals, chains: int, state: dict) -> list[int | None]:
    if not max_proposals:
        return [None] * chains
    return [max_proposals // chains + (1 if i < max_proposals % chains else 0)
            for i in range(chains)]


def _checkpoint(rd: Path, stats, chain_states: dict, finished: bool) -> None:
    save_checkpoint(rd, {"elapsed_s": round(stats.elapsed(), 3), "proposals": stats.proposals,
                         "chains": [chain_states[i] for i in sorted(chain_states)],
                         "finished": finished, "best_cycles": stats.best_cycles,
                         "tokens": stats.tokens, "cost_usd": stats.cost_usd,
                         "bests": stats.bests})


def _result(rd: Path, run: dict, stats, machine, why: str) -> RunResult:
    best = json.loads((rd / "best.json").read_text())
    base = run["baseline_cycles"]
    roof = run["roofline_cycles"]
    return RunResult(str(rd), run["spec"], machine.name, base, best["cycles"],
                     round(base / best["cycles"], 4), roof, round(roof / best["cycles"], 4),
                     str(rd / "best.leir"), stats.proposals, stats.accepted,
                     bool(best["verdict"]["equivalent"]), round(stats.elapsed(), 2),
                     run["budget_s"], why, stats.tokens, round(stats.cost_usd, 6),
                     list(stats.errors), list(stats.notes))


KEEP_BESTS = 5  # verified bests the checkpoint keeps for the final re-check to fall back on


class _Stats:
    """Running totals the display, the checkpoint and the result read."""

    def __init__(self, run: dict, state: dict, t0: float) -> None:
        self.run, self.t0 = run, t0
        self.proposals = state.get("proposals", 0)
        self.accepted = 0
        self.best_cycles = state.get("best_cycles", run["baseline_cycles"])
        self.tokens = state.get("tokens", 0)
        self.cost_usd = state.get("cost_usd", 0.0)
        self.by_proposer: dict[str, dict[str, int]] = {}
        self.errors: list[str] = []
        self.llm_error: str | None = None  # the last failed LLM request, until one works
        self.llm_last_error: str | None = None
        self.llm_stopped: str | None = None  # why the LLM proposer gave up, if it did
        self.llm_answered = 0  # LLM candidates read from replies
        self.llm_failed = 0    # LLM requests that failed (each is one event)
        self.recent: list[float] = []
        self.bests: list[dict] = list(state.get("bests", []))  # the last verified bests
        self.notes: list[str] = []

    def keep_best(self, text: str, cycles: int, verdict: dict, chain: int) -> None:
        """Remember a few verified bests: the final re-check falls back on them."""
        self.bests = self.bests[-(KEEP_BESTS - 1):] + [
            {"cycles": cycles, "text": text, "verdict": verdict, "t": self.elapsed(),
             "chain": chain}]

    def elapsed(self) -> float:
        return time.time() - self.t0

    def add(self, e: dict) -> None:
        self.proposals += 1
        if e["outcome"] in ("accepted", "best"):
            self.accepted += 1
        self.tokens += e.get("tokens") or 0
        self.cost_usd += e.get("cost_usd") or 0.0
        if e["proposer"] == "llm" and e.get("move") != "no_reply":
            self.llm_error = e["error"] if e.get("move") == "request_failed" else None
            self.llm_last_error = self.llm_error or self.llm_last_error
            self.llm_failed += e.get("move") == "request_failed"
            self.llm_answered += e.get("move") != "request_failed"
            self.llm_stopped = e.get("llm_stopped") or self.llm_stopped
        counts = self.by_proposer.setdefault(e["proposer"], {})
        counts[e["outcome"]] = counts.get(e["outcome"], 0) + 1
        self.recent.append(time.time())

    def llm_note(self) -> str | None:
        """The LLM's failure as one line for the summary, or None when it worked."""
        if self.llm_stopped:
            if self.run["arms"] == ["llm"]:
                return self.llm_stopped
            return f"{self.llm_stopped}; the built-in proposers went on without it"
        if self.llm_failed and not self.llm_answered:
            return f"every LLM request failed ({self.llm_failed}); the last: " \
                   f"{self.llm_last_error}"
        return None

    def snapshot(self) -> dict:
        now = time.time()
        self.recent = [t for t in self.recent if now - t < 5.0]
        base = self.run["baseline_cycles"]
        return {"spec": self.run["spec"], "elapsed_s": self.elapsed(),
                "budget_s": self.run["budget_s"], "proposals": self.proposals,
                "rate": len(self.recent) / 5.0, "accepted": self.accepted,
                "best_cycles": self.best_cycles, "baseline_cycles": base,
                "speedup": base / self.best_cycles,
                "roofline_share": self.run["roofline_cycles"] / self.best_cycles,
                "by_proposer": self.by_proposer, "tokens": self.tokens,
                "cost_usd": self.cost_usd,
                "errors": self.errors + ([self.llm_stopped or self.llm_error]
                                         if self.llm_stopped or self.llm_error else [])}
