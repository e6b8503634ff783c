"""What the LLM's requests yielded, per form and per prompt variant: the funnel from a
request to a proved best, and what an accepted candidate cost.

    requests        sent
    replies         answered
    candidates      read from the replies (a block, an edit set, a plan; per choice)
    parsed          read into a kernel or a plan (not a parse error)
    well_typed      a kernel the chain may evaluate (types, layouts and signature hold)
    screened_equal  equal to the spec on the chain's screening inputs
    accepted        the chain moved to it
    new_bests       faster than the best known: sent to its full check
    proved          became the run's best (its full check passed)

The report and run.json count from the transcripts (llm/chain*.json, where the chain's
verdict on each candidate is kept) and the events' "best" lines (proved); the live view
counts from the events as they arrive (``LiveYield``).
"""

from __future__ import annotations

import json
from pathlib import Path

from stochopt.rundir import ACCEPTED, BEST, NOT_TYPED, PARSE_ERROR, UNPROVED

FUNNEL = ("requests", "replies", "candidates", "parsed", "well_typed", "screened_equal",
          "accepted", "new_bests", "proved")
NOT_READ = (PARSE_ERROR,)


def read_transcripts(folder: Path) -> list[dict]:
    """Every transcript of a run's llm/ folder, oldest first (one being rewritten right
    now is left out: the next reading has it)."""
    out = []
    for path in sorted(folder.glob("chain*.json")) if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            out.append(data)
    return sorted(out, key=lambda t: (str(t.get("started")), str(t.get("id"))))


def yield_table(transcripts: list[dict], proved: set[tuple[str, int]]) -> dict:
    """{"forms": [row per form], "variants": [row per focus], "total": row}; ``proved``:
    the (request id, candidate number) of the LLM candidates that became the best."""
    forms: dict[str, dict] = {}
    variants: dict[str, dict] = {}
    total = _row("total")
    for t in transcripts:
        variant = t.get("variant") or {}
        form = variant.get("form") or "kernel"
        focus = variant.get("focus") or "(none)"
        rows = (forms.setdefault(form, _row(form)), variants.setdefault(focus, _row(focus)),
                total)
        counts = _count(t, proved)
        for row in rows:
            for key, value in counts.items():
                row[key] += value
    for row in [*forms.values(), *variants.values(), total]:
        _per_accepted(row)
    order = {"plan": 0, "edit": 1, "kernel": 2}
    return {"forms": sorted(forms.values(), key=lambda r: order.get(r["name"], 9)),
            "variants": sorted(variants.values(), key=lambda r: (-r["proved"], -r["accepted"],
                                                                 -r["well_typed"], r["name"])),
            "total": total}


def _row(name: str) -> dict:
    return {"name": name, **dict.fromkeys(FUNNEL, 0), "tokens": 0, "cost_usd": 0.0}


def _count(t: dict, proved: set[tuple[str, int]]) -> dict:
    out = dict.fromkeys(FUNNEL, 0)
    out["requests"] = 1
    ok = t.get("status") == "ok"
    out["replies"] = int(ok)
    usage = t.get("usage") or {}
    out["tokens"] = 0 if t.get("cached") else int(usage.get("prompt_tokens") or 0) + int(
        usage.get("completion_tokens") or 0)
    out["cost_usd"] = float(t.get("cost_usd") or 0.0)
    if not ok:
        return out
    for number, c in enumerate(t.get("candidates") or []):
        out["candidates"] += 1
        read_as = c.get("read_as")
        outcome = c.get("outcome")
        parsed = read_as not in NOT_READ and outcome not in NOT_READ
        typed = c.get("well_typed", read_as is None and outcome not in NOT_TYPED)
        out["parsed"] += parsed
        out["well_typed"] += bool(parsed and typed)
        out["screened_equal"] += bool(c.get("screened_equal"))
        out["accepted"] += bool(c.get("accepted"))
        out["new_bests"] += bool(c.get("new_best"))
        out["proved"] += outcome == BEST or (t.get("id"), number) in proved
    return out


def _per_accepted(row: dict) -> None:
    accepted = row["accepted"]
    row["cost_usd"] = round(row["cost_usd"], 6)
    row["tokens_per_accepted"] = round(row["tokens"] / accepted) if accepted else None
    row["usd_per_accepted"] = round(row["cost_usd"] / accepted, 6) if accepted else None


class LiveYield:
    """Per form, from the events as the main process receives them: requests, well-typed
    and accepted candidates, bests. One short line for the live view."""

    def __init__(self) -> None:
        self.forms: dict[str, dict[str, int]] = {}
        self.proved: set[tuple[str, int]] = set()

    def add(self, event: dict) -> None:
        form = event.get("llm_form")
        if form is None:
            return
        row = self.forms.setdefault(form, {"requests": 0, "well_typed": 0, "accepted": 0,
                                           "best": 0})
        outcome = event["outcome"]
        if event.get("llm_candidate") == 0:
            row["requests"] += 1
        if event.get("move") == "request_failed":
            return
        row["well_typed"] += outcome not in NOT_TYPED
        row["accepted"] += outcome in (ACCEPTED, BEST, UNPROVED) or bool(
            event.get("counterexample"))
        if outcome == BEST:
            row["best"] += 1
            self.proved.add((event.get("llm_request"), event.get("llm_candidate")))

    def line(self) -> str | None:
        if not self.forms:
            return None
        parts = [f"{form} {r['requests']} asked, {r['well_typed']} well-typed, "
                 f"{r['accepted']} accepted, {r['best']} best"
                 for form, r in sorted(self.forms.items())]
        return "LLM yield: " + "; ".join(parts)
