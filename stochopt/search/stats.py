"""Running totals of a run, kept by the main process: the live display, the checkpoint
and the result read them."""

from __future__ import annotations

import time
from collections import deque

from stochopt.llm.yields import LiveYield
from stochopt.rundir import BEST, TAKEN
from stochopt.tuning.runs import start_line

KEEP_BESTS = 5  # verified bests the checkpoint keeps for the final re-check to fall back on


class RunStats:
    """Running totals the display, the checkpoint and the result read."""

    def __init__(self, run: dict, state: dict, t0: float) -> None:
        self.run, self.t0 = run, t0
        self.proposals = state.get("proposals", 0)
        self.accepted = 0
        self.best_cycles = state.get("best_cycles", run["baseline_cycles"])
        self.tokens = state.get("tokens", 0)
        self.cost_usd = state.get("cost_usd", 0.0)
        self.by_proposer: dict[str, dict[str, int]] = {}
        # (proposer, move) -> [tries, accepted, improvements]: the tuning database's rule
        # statistics (stochopt/tuning/runs.py)
        self.moves: dict[tuple[str, str], list[int]] = {}
        self.errors: list[str] = []
        self.llm_error: str | None = None  # the last failed LLM request, until one works
        self.llm_last_error: str | None = None
        self.llm_stopped: str | None = None  # why the LLM proposer gave up, if it did
        self.llm_answered = 0  # LLM candidates read from replies
        self.llm_failed = 0    # LLM requests that failed (each is one event)
        # events of the last 5 s, counted per quarter second: [its start, count]
        self.recent: deque[list] = deque()
        self.bests: list[dict] = list(state.get("bests", []))  # the last verified bests
        self.notes: list[str] = []
        self.checking = 0      # candidates waiting for or under their full check
        self.fastest_found: int | None = None  # the fastest of them
        self.restarts = 0      # chains started again after their process or node died
        self.start = start_line(run.get("tuning"))  # what the tuning database gave it
        self.llm_yield = LiveYield()   # per reply form: asked, well-typed, accepted, best

    def keep_best(self, text: str, cycles: int, verdict: dict, chain: int,
                  plan: list | None = None) -> None:
        """Remember a few verified bests (with their plans): the final re-check falls
        back on them."""
        self.bests = self.bests[-(KEEP_BESTS - 1):] + [
            {"cycles": cycles, "text": text, "verdict": verdict, "t": self.elapsed(),
             "chain": chain, "plan": plan}]

    def elapsed(self) -> float:
        return time.time() - self.t0

    def add(self, e: dict) -> None:
        self.proposals += 1
        if e["outcome"] in TAKEN:
            self.accepted += 1
        self.tokens += e.get("tokens") or 0
        self.cost_usd += e.get("cost_usd") or 0.0
        if e["proposer"] == "llm" and e.get("move") != "no_reply":
            self.llm_error = e["error"] if e.get("move") == "request_failed" else None
            self.llm_last_error = self.llm_error or self.llm_last_error
            self.llm_failed += e.get("move") == "request_failed"
            self.llm_answered += e.get("move") != "request_failed"
            self.llm_stopped = e.get("llm_stopped") or self.llm_stopped
            self.llm_yield.add(e)
            for note in (e.get("llm_note") or "").split("; "):
                if note and note not in self.notes:  # constrained decoding given up
                    self.notes.append(note)
        counts = self.by_proposer.setdefault(e["proposer"], {})
        counts[e["outcome"]] = counts.get(e["outcome"], 0) + 1
        move = self.moves.setdefault((e["proposer"], e.get("move") or "?"), [0, 0, 0])
        move[0] += 1
        move[1] += e["outcome"] in TAKEN
        move[2] += e["outcome"] == BEST
        now = time.time()
        if self.recent and now - self.recent[-1][0] < 0.25:
            self.recent[-1][1] += 1
        else:
            self.recent.append([now, 1])

    def snapshot(self) -> dict:
        now = time.time()
        while self.recent and now - self.recent[0][0] >= 5.0:
            self.recent.popleft()
        base = self.run["baseline_cycles"]
        return {"spec": self.run["spec"], "elapsed_s": self.elapsed(),
                "budget_s": self.run["budget_s"], "proposals": self.proposals,
                "rate": sum(n for _, n in self.recent) / 5.0, "accepted": self.accepted,
                "best_cycles": self.best_cycles, "baseline_cycles": base,
                "speedup": base / self.best_cycles,
                "roofline_share": self.run["roofline_cycles"] / self.best_cycles,
                "bound_share": (self.run.get("bound_cycles") or 0) / self.best_cycles,
                "by_proposer": self.by_proposer, "tokens": self.tokens,
                "cost_usd": self.cost_usd, "checking": self.checking,
                "fastest_found": self.fastest_found, "start": self.start,
                "llm_yield": self.llm_yield.line(),
                "errors": self.errors + ([self.llm_stopped or self.llm_error]
                                         if self.llm_stopped or self.llm_error else [])}

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

    def llm_status(self) -> dict:
        """Why the LLM gave no candidates, as run.json and best.json record it."""
        return {"stopped": self.llm_stopped, "last_error": self.llm_last_error,
                "candidates_from_replies": self.llm_answered,
                "requests_failed": self.llm_failed}
