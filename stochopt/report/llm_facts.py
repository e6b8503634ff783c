"""What the LLM proposer did in a run, read from its transcripts (llm/chain*.json): how
many requests were answered, the prompt tokens and latency per request, why requests
failed, whether the proposer gave up, the yield of each form and prompt variant
(stochopt/llm/yields.py), and the improvements the LLM made with what made them."""

from __future__ import annotations

from pathlib import Path

from stochopt.llm.yields import read_transcripts, yield_table
from stochopt.rundir import LLM_TRANSCRIPTS


def llm_facts(rd: Path, run: dict, proved: set | None = None,
              steps: list[dict] | None = None) -> dict | None:
    """The LLM facts of run directory ``rd`` (None when the run had no LLM). ``proved``:
    the (request, candidate) of LLM candidates whose event says "best"; ``steps``: the
    best's steps with the LLM's moves on their paths (report/credit.py)."""
    transcripts = read_transcripts(rd / LLM_TRANSCRIPTS)
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
        "status": status, **_yield(transcripts, proved or set()),
        "improvements": llm_improvements(steps or [], transcripts),
        "notes": _notes(transcripts),
    }


def _yield(transcripts: list[dict], proved: set) -> dict:
    table = yield_table(transcripts, proved)
    return {"yield": table["forms"], "variants": table["variants"],
            "yield_total": table["total"]}


def llm_improvements(steps: list[dict], transcripts: list[dict]) -> list[dict]:
    """Each move of the LLM on the path to a step of the best: when, what it saved, its
    form, and what made it (the plan's steps, or the first lines of the text)."""
    by_id = {t.get("id"): t for t in transcripts}
    out = []
    for step in steps:
        for move in step.get("llm_moves", []):
            t = by_id.get(move["request"]) or {}
            cands = t.get("candidates") or []
            c = cands[move["candidate"]] if move["candidate"] < len(cands) else {}
            made_by = _describe_plan(move.get("steps") or c.get("steps")) if \
                move.get("steps") or c.get("steps") else _first_lines(c.get("code"))
            out.append({"t": move["t"], "step_cycles": step["cycles"], "saved": move["saved"],
                        "cycles": move["cycles"], "form": move["form"],
                        "request": move["request"], "candidate": move["candidate"],
                        "made_by": made_by})
    return out


def _describe_plan(steps) -> str:
    return " -> ".join(f"{s[0]}@{s[1]}" + (f"[{s[2]}]" if len(s) > 2 else "") for s in steps)


def _first_lines(code: str | None, lines: int = 3) -> str:
    if not code:
        return "(text not kept)"
    kept = [line.strip() for line in code.strip().splitlines() if line.strip()][:lines]
    return " / ".join(kept)[:200]


def _notes(transcripts: list[dict]) -> list[str]:
    """What constrained decoding found or gave up, in the order it happened, once each."""
    out: list[str] = []
    for t in transcripts:
        for line in (t.get("note") or "").split("; "):
            if line and line not in out:
                out.append(line)
    return out


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


# -- the tables the terminal and HTML reports show ------------------------------------------

# (key of a yield row, its column header, whether a narrow terminal may leave it out)
YIELD_COLUMNS = (("requests", "asked", False), ("replies", "replies", False),
                 ("candidates", "cands", True), ("parsed", "parsed", True),
                 ("well_typed", "well typed", False), ("screened_equal", "equal", False),
                 ("accepted", "accepted", False), ("new_bests", "new bests", False),
                 ("proved", "proved", False), ("tokens_per_accepted", "tokens/acc", True),
                 ("usd_per_accepted", "$/acc", True))


def yield_tables(llm: dict | None) -> list[tuple[str, str, list[list[str]]]]:
    """(title, first column's header, rows of cells) for the yield by form and by focus;
    nothing without an LLM."""
    if not llm or not llm.get("yield"):
        return []
    out = [("LLM yield by reply form", "form", [_cells(r) for r in llm["yield"]]
            + [_cells(llm["yield_total"])])]
    if llm.get("variants"):
        out.append(("LLM yield by prompt focus", "focus",
                    [_cells(r) for r in llm["variants"]]))
    return out


def _cells(row: dict) -> list[str]:
    cells = [str(row["name"])]
    for key, _, _ in YIELD_COLUMNS:
        value = row.get(key)
        if value is None:
            cells.append("-")
        elif key == "usd_per_accepted":
            cells.append(f"${value:.4f}")
        else:
            cells.append(str(value))
    return cells


IMPROVEMENT_COLUMNS = ("t", "saved", "to cycles", "form", "request", "made by")


def improvement_rows(llm: dict | None) -> list[list[str]]:
    """One row per move of the LLM on the path to the best (see llm_improvements)."""
    if not llm:
        return []
    return [[f"{m['t']:.1f}s", str(m["saved"]), str(m["cycles"]), str(m["form"]),
             f"{m['request']}#{m['candidate']}", m["made_by"]]
            for m in llm.get("improvements", [])]
