"""What the LLM proposer did in a run, read from its transcripts (llm/chain*.json): how
many requests were answered, the prompt tokens and latency per request, why requests
failed, whether the proposer gave up, and what each prompt variant produced."""

from __future__ import annotations

import json
from pathlib import Path

from stochopt.rundir import LLM_TRANSCRIPTS

TAKEN = ("accepted", "best")


def llm_facts(rd: Path, run: dict) -> dict | None:
    """The LLM facts of run directory ``rd`` (None when the run had no LLM)."""
    transcripts = _transcripts(rd / LLM_TRANSCRIPTS)
    if not transcripts and not run.get("llm"):
        return None
    ok = [t for t in transcripts if t.get("status") == "ok"]
    failed = [t for t in transcripts if t.get("status") == "failed"]
    prompt_tokens = [t["usage"]["prompt_tokens"] for t in ok
                     if (t.get("usage") or {}).get("reported") and not t.get("cached")]
    latencies = [t["latency_s"] for t in ok if isinstance(t.get("latency_s"), int | float)]
    outcomes: dict[str, int] = {}
    for t in transcripts:
        for c in t.get("candidates") or []:
            key = str(c.get("outcome") or c.get("read_as") or "not evaluated")
            outcomes[key] = outcomes.get(key, 0) + 1
    stopped = next((t["stopped"] for t in transcripts if t.get("stopped")), None) or (
        run.get("llm_status") or {}).get("stopped")
    last_error = failed[-1].get("error") if failed else None
    status = ""
    if stopped:
        status = stopped
    elif failed and not ok:
        status = f"every LLM request failed ({len(failed)}); the last: {last_error}"
    return {
        "model": (run.get("llm") or {}).get("model"),
        "requests": len(transcripts), "answered": len(ok), "failed": len(failed),
        "prompt_tokens_mean": round(sum(prompt_tokens) / len(prompt_tokens))
        if prompt_tokens else None,
        "prompt_tokens_max": max(prompt_tokens, default=None),
        "latency_s_mean": round(sum(latencies) / len(latencies), 2) if latencies else None,
        "outcomes": outcomes, "stopped": stopped, "last_error": last_error,
        "status": status, "variants": _variants(transcripts),
    }


def _transcripts(folder: Path) -> list[dict]:
    out = []
    for path in sorted(folder.glob("chain*.json")) if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a transcript being rewritten right now: the next report has it
        if isinstance(data, dict):
            out.append(data)
    return sorted(out, key=lambda t: (str(t.get("started")), str(t.get("id"))))


def _variants(transcripts: list[dict]) -> list[dict]:
    """Per prompt focus: requests, answers, candidates that were kernels, and those the
    chain took (accepted) or that became a best; most productive first."""
    rows: dict[str, dict] = {}
    for t in transcripts:
        focus = (t.get("variant") or {}).get("focus") or "(none)"
        row = rows.setdefault(focus, {"focus": focus, "requests": 0, "answered": 0,
                                      "candidates": 0, "kernels": 0, "accepted": 0,
                                      "best": 0})
        row["requests"] += 1
        row["answered"] += t.get("status") == "ok"
        for c in t.get("candidates") or []:
            if c.get("move") in ("request_failed",):
                continue
            row["candidates"] += 1
            outcome = c.get("outcome")
            row["kernels"] += outcome not in (None, "parse_error", "invalid") and \
                not str(outcome).startswith("not evaluated")
            row["accepted"] += outcome in TAKEN
            row["best"] += outcome == "best"
    return sorted(rows.values(), key=lambda r: (-r["best"], -r["accepted"], -r["kernels"],
                                                r["focus"]))


def llm_headline(llm: dict | None) -> list[tuple[str, str]]:
    """Rows for the summary: requests and prompt size, and what went wrong if anything."""
    if not llm:
        return []
    size = (f", {llm['prompt_tokens_mean']} prompt tokens per request (at most "
            f"{llm['prompt_tokens_max']})" if llm["prompt_tokens_mean"] is not None else "")
    latency = f", {llm['latency_s_mean']:.1f} s each" if llm["latency_s_mean"] else ""
    rows = [("LLM requests", f"{llm['requests']} ({llm['answered']} answered, "
                             f"{llm['failed']} failed){size}{latency}")]
    if llm["status"]:
        rows.append(("LLM status", llm["status"]))
    return rows
