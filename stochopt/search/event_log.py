"""events.jsonl that stays small however long the run: every candidate counts, few are
written one by one.

A run's first candidates are written one line each (``FULL_DETAIL_EVENTS`` of them, or
``FULL_DETAIL_BYTES``, whichever comes first): a short run keeps every candidate, as
before. After that, a candidate gets a line of its own only when a person or the report
needs it:

- every new best and every unproved candidate (always);
- LLM candidates, candidates whose check found a counterexample, chains moved back to
  the global best, and the first candidate of each kind of error (proposer, move,
  outcome, and the error's text without its numbers): at most ``NOTABLE_PER_INTERVAL``
  per interval;
- every ``SAMPLE_EVERY``-th of the rest: at most ``SAMPLED_PER_INTERVAL`` per interval.

Every other candidate is counted in the interval's aggregate line (``"kind":
"aggregate"``, one per ``INTERVAL_S`` of run time): candidates per chain, outcomes per
proposer, tokens, dollars, moves taken, and a histogram of the candidates' cycles. The
report adds the aggregates to the individual lines, so its totals count every
candidate. A line written after candidates of its chain that were only counted carries
their part of the chain's path (``carry``: the cycles saved per proposer on the way),
so the report's credit for each improvement is the same as with every line written.

The bound: after the full-detail part (at most 4 MB), an interval holds at most
NOTABLE_PER_INTERVAL + SAMPLED_PER_INTERVAL = 50 lines of at most ``LINE_BYTES`` each
(40 KB), its aggregate (a few KB with 64 chains) and the run's new bests (each needs a
faster proved kernel: a few hundred in a long run). 48 hours are 2,880 intervals: under
135 MB whatever the candidate rate, stated as 200 MB (docs/scale.md). A run killed
with ``kill -9`` loses the aggregate of its last interval (at most a minute of counts;
its checkpoint has the totals).
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
from pathlib import Path

from stochopt.rundir import AGGREGATE, BEST, TAKEN, UNPROVED

INTERVAL_S = 60.0
FULL_DETAIL_EVENTS = 10_000
FULL_DETAIL_BYTES = 4_000_000
NOTABLE_PER_INTERVAL = 40
SAMPLED_PER_INTERVAL = 10
SAMPLE_EVERY = 100
LINE_BYTES = 800          # a longer line has its long texts cut
TEXT_CHARS = 240          # ... to this many characters
ERROR_KINDS = 10_000      # the kinds of error remembered for "first of its kind"
TOP_MOVES = 3             # the largest decreases a carry keeps (as the report does)
ALWAYS = (BEST, UNPROVED)


class BoundedEventLog:
    """events.jsonl as the driver writes it (write, flush, close)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._file = open(self.path, "a")  # flushed a batch at a time (write_many)
        self.detailed = 0             # candidates written in the full-detail part
        self.bytes = 0
        self.interval: int | None = None
        self.notable = self.sampled = self.rest = 0
        self.aggregate = _Aggregate()
        self.error_kinds: set[tuple] = set()
        self.error_texts: dict[str, str] = {}  # an error's text -> without its numbers
        self.current: dict[object, int] = {}   # chain -> cycles of its kernel now
        self.carry: dict[object, dict] = {}    # chain -> its path since its last line

    def write_many(self, events: list[dict]) -> None:
        """A chain's batch of events, then one flush: a chain sends thousands a second,
        and a flush per line cost the driver ~25 us an event."""
        for event in events:
            self._write(event)
        self._file.flush()

    def write(self, event: dict) -> None:
        self._write(event)
        self._file.flush()

    def _write(self, event: dict) -> None:
        if "outcome" not in event:  # not a candidate (a chain restarted): always
            self._line(event)
            return
        self._enter(float(event.get("t") or 0.0))
        if self.detailed < FULL_DETAIL_EVENTS and self.bytes < FULL_DETAIL_BYTES:
            self.detailed += 1
            self._follow(event)
            self._line(event)
            return
        if self._wanted(event):
            self._record(event)
        else:
            self._count(event)

    def _wanted(self, event: dict) -> bool:
        if event["outcome"] in ALWAYS:
            return True
        if self._notable(event):
            if self.notable < NOTABLE_PER_INTERVAL:
                self.notable += 1
                return True
            return False
        self.rest += 1
        if self.rest % SAMPLE_EVERY == 0 and self.sampled < SAMPLED_PER_INTERVAL:
            self.sampled += 1
            return True
        return False

    def _notable(self, event: dict) -> bool:
        if event.get("proposer") == "llm" or event.get("counterexample") or \
                event.get("restarted_from_best") or event.get("restarted_from") or \
                "exchanged_with" in event:  # the chain was moved: its route jumps
            return True
        error = event.get("error")
        if not isinstance(error, str):
            return False
        text = self.error_texts.get(error)
        if text is None:  # the same texts come again and again: each is read once
            if len(self.error_texts) >= ERROR_KINDS:
                self.error_texts.clear()
            text = self.error_texts[error] = re.sub(r"\d+", "#", error)[:80]
        kind = (event.get("proposer"), event.get("move"), event["outcome"], text)
        if kind in self.error_kinds or len(self.error_kinds) >= ERROR_KINDS:
            return False
        self.error_kinds.add(kind)
        return True

    # -- a chain's path through candidates that were only counted ----------------------
    def _follow(self, event: dict) -> None:
        if event.get("moved_to") is not None:  # an exchange or a restart moved the chain
            self.current[event.get("chain")] = int(event["moved_to"])
        if event["outcome"] in TAKEN and event.get("cycles") is not None:
            self.current[event.get("chain")] = int(event["cycles"])

    def _record(self, event: dict) -> None:
        chain = event.get("chain")
        carry = self.carry.pop(chain, None)
        if carry is not None:
            event = {**event, "carry": carry}
        self._follow(event)
        self._line(_bounded(event))

    def _count(self, event: dict) -> None:
        self.aggregate.add(event)
        restarted, cycles = event.get("restarted_from_best"), event.get("cycles")
        moved = event.get("moved_to")
        taken = event["outcome"] in TAKEN and cycles is not None
        if not (restarted or taken or moved is not None):  # not part of the chain's path
            return
        chain = event.get("chain")
        carry = self.carry.setdefault(chain, {"moves": 0, "downhill": {}, "top": []})
        if restarted:  # the route starts again (credit.py)
            carry.update(moves=0, downhill={}, top=[], restarted=True)
        if moved is not None:  # the chain stands elsewhere: no move of its made the jump
            self.current[chain] = carry["current"] = int(moved)
        if not taken:
            return
        cycles = int(cycles)
        before = self.current.get(chain)
        carry["moves"] += 1
        if before is not None and before > cycles:
            proposer = event.get("proposer", "?")
            carry["downhill"][proposer] = carry["downhill"].get(proposer, 0) + before - cycles
            carry["top"] = sorted(carry["top"] + [{"proposer": proposer,
                                                   "move": event.get("move"),
                                                   "saved": before - cycles}],
                                  key=lambda m: -m["saved"])[:TOP_MOVES]
        self.current[chain] = carry["current"] = cycles

    # -- intervals and lines ----------------------------------------------------------
    def _enter(self, t: float) -> None:
        interval = int(t // INTERVAL_S)
        if self.interval is not None and interval != self.interval:
            self._close_interval()
        if interval != self.interval:
            self.interval = interval
            self.notable = self.sampled = 0

    def _close_interval(self) -> None:
        if self.aggregate.counts:
            self._line(self.aggregate.line())
        self.aggregate = _Aggregate()

    def _line(self, data: dict) -> None:
        text = json.dumps(data, separators=(",", ":"), default=str) + "\n"
        self.bytes += len(text)
        self._file.write(text)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._close_interval()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()


class _Aggregate:
    """The candidates of one interval that have no line of their own. Counted under one
    key per (chain, proposer, outcome, cycles bucket), split into the line's tables when
    the interval closes: one dictionary update per candidate, for the driver reads
    thousands a second."""

    def __init__(self) -> None:
        self.tokens = 0
        self.cost_usd = 0.0
        self.t0 = math.inf
        self.t1 = 0.0
        self.counts: dict[tuple, int] = {}

    def add(self, event: dict) -> None:
        t = event.get("t") or 0.0
        if t < self.t0:
            self.t0 = float(t)
        if t > self.t1:
            self.t1 = float(t)
        if event.get("tokens"):
            self.tokens += int(event["tokens"])
        if event.get("cost_usd"):
            self.cost_usd += float(event["cost_usd"])
        cycles = event.get("cycles")
        key = (event.get("chain"), event.get("proposer", "?"), event["outcome"],
               None if cycles is None else cycles_bucket(int(cycles)))
        self.counts[key] = self.counts.get(key, 0) + 1

    def line(self) -> dict:
        chains: dict[str, int] = {}
        outcomes: dict[str, dict[str, int]] = {}
        cycles: dict[str, int] = {}
        for (chain, proposer, outcome, bucket), n in self.counts.items():
            chains[str(chain)] = chains.get(str(chain), 0) + n
            row = outcomes.setdefault(str(proposer), {})
            row[outcome] = row.get(outcome, 0) + n
            if bucket is not None:
                cycles[str(bucket)] = cycles.get(str(bucket), 0) + n
        taken = sum(n for (_, _, outcome, _), n in self.counts.items() if outcome in TAKEN)
        return {"kind": AGGREGATE, "t0": round(self.t0, 4), "t1": round(self.t1, 4),
                "candidates": sum(self.counts.values()), "taken": taken,
                "tokens": self.tokens,
                "cost_usd": round(self.cost_usd, 6), "chains": chains,
                "outcomes": outcomes, "cycles": cycles}


@functools.lru_cache(maxsize=65536)
def cycles_bucket(cycles: int) -> int:
    """The histogram's bucket of a cycle count: its lower bound, a power of 2**(1/4)."""
    if cycles <= 1:
        return max(cycles, 0)
    return int(2 ** (math.floor(4 * math.log2(cycles)) / 4))


def _bounded(event: dict) -> dict:
    """The event with its long texts cut, so that its line stays under LINE_BYTES."""
    if len(json.dumps(event, default=str)) <= LINE_BYTES:
        return event
    out = {k: (v[:TEXT_CHARS] + "…" if isinstance(v, str) and len(v) > TEXT_CHARS else v)
           for k, v in event.items()}
    if len(json.dumps(out, default=str)) > LINE_BYTES:  # many or nested fields: the core
        out = {k: out[k] for k in ("t", "chain", "proposer", "move", "outcome", "cycles",
                                   "error", "tokens", "cost_usd", "carry") if k in out}
        out["cut"] = True
    return out
