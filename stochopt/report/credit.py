"""Who made the best kernel faster: each step of the global best is credited to the
moves along the path its chain took to it, not only to the move that happened to cross
the line.

A chain moves through accepted candidates before one of them becomes a new best; a move
that removed most of the work is often an accepted one, and the 'best' move at the end
may have saved a few cycles. So, per chain, the taken moves since the chain last stood
on the global best are summed by proposer (only their decreases: a move that went
uphill earns nothing), and each global step's saving is shared out in proportion. The
events stream through here one at a time; nothing grows with the length of the run but
the list of steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stochopt.rundir import BEST, TAKEN

TOP_MOVES = 3  # the largest moves of a step's path kept for the report
LLM_MOVES = 8  # the LLM's downhill moves of a step's path kept for the report


@dataclass
class _Path:
    """A chain's route since it last stood on the global best."""

    current: int                                    # cycles of the chain's kernel now
    best: int                                       # the chain's own best so far
    downhill: dict[str, int] = field(default_factory=dict)  # proposer -> cycles saved
    moves: int = 0                                  # taken moves along the route
    top: list[dict] = field(default_factory=list)   # its largest decreases
    llm: list[dict] = field(default_factory=list)   # the LLM's decreases, latest kept


class PathCredit:
    """Feed events in file order (add); read the steps of the global best (steps)."""

    def __init__(self, start_cycles: int) -> None:
        self.start_cycles = start_cycles
        self.running = start_cycles  # the global best so far
        self.paths: dict[object, _Path] = {}
        self.steps: list[dict] = []
        self.llm_proved: set[tuple[str, int]] = set()   # (request, candidate) that were best

    def add(self, event: dict, t: float) -> None:
        chain = event.get("chain")
        path = self.paths.get(chain)
        if path is None:
            path = self.paths[chain] = _Path(self.start_cycles, self.start_cycles)
        carry = event.get("carry")
        if carry:  # candidates before this one that events.jsonl only counted
            path = self._carry(chain, path, carry)
        if event.get("restarted_from_best") and self.running < path.best:
            # the driver moved the chain to the global best: its route starts again there
            self.paths[chain] = path = _Path(self.running, self.running)
        if event.get("moved_to") is not None:
            # an exchange on the tempering ladder or a restart moved the chain: it stands
            # there now, and no move of its made that jump
            path.current = int(event["moved_to"])
        if event.get("outcome") not in TAKEN or event.get("cycles") is None:
            return
        cycles = int(event["cycles"])
        proposer, decrease = event.get("proposer", "?"), path.current - cycles
        path.current, path.moves = cycles, path.moves + 1
        if decrease > 0:
            path.downhill[proposer] = path.downhill.get(proposer, 0) + decrease
            path.top = sorted(path.top + [{"proposer": proposer, "move": event.get("move"),
                                           "saved": decrease}],
                              key=lambda m: -m["saved"])[:TOP_MOVES]
            if event.get("llm_request"):
                path.llm = (path.llm + [llm_move(event, t, decrease, cycles)])[-LLM_MOVES:]
        if event["outcome"] != BEST:
            return
        if event.get("llm_request"):
            self.llm_proved.add((event["llm_request"], event.get("llm_candidate", 0)))
        path.best = min(path.best, cycles)
        if cycles >= self.running:  # another chain was already ahead: no global step
            return
        saved = self.running - cycles
        self.running = cycles
        self.steps.append({"t": t, "cycles": cycles, "proposer": proposer,
                           "move": event.get("move"), "chain": chain, "saved": saved,
                           "credit": apportion(saved, path.downhill or {proposer: 1}),
                           "path_moves": path.moves, "largest_moves": path.top,
                           **({"llm_moves": path.llm} if path.llm else {})})
        self.paths[chain] = _Path(cycles, cycles)


    def _carry(self, chain, path: _Path, carry: dict) -> _Path:
        """The route's part made of counted candidates (stochopt/search/event_log.py):
        the same sums as if each had its line."""
        if carry.get("restarted") and self.running < path.best:
            self.paths[chain] = path = _Path(self.running, self.running)
        for proposer, saved in carry.get("downhill", {}).items():
            path.downhill[proposer] = path.downhill.get(proposer, 0) + int(saved)
        path.moves += int(carry.get("moves", 0))
        path.top = sorted(path.top + list(carry.get("top", [])),
                          key=lambda m: -m["saved"])[:TOP_MOVES]
        if carry.get("current") is not None:
            path.current = int(carry["current"])
        return path


def llm_move(event: dict, t: float, saved: int, cycles: int) -> dict:
    """An LLM candidate that lowered its chain's cycles: which request and candidate, the
    form, and the plan's steps when it was a plan."""
    move = {"t": t, "request": event["llm_request"], "candidate": event.get("llm_candidate", 0),
            "form": event.get("llm_form") or event.get("move"), "saved": saved,
            "cycles": cycles}
    if event.get("llm_steps"):
        move["steps"] = event["llm_steps"]
    return move


def apportion(total: int, weights: dict[str, int]) -> dict[str, int]:
    """``total`` split in whole cycles in proportion to ``weights`` (largest remainders
    get the leftover cycles), so the credits of a step add up to its saving exactly."""
    weight = sum(weights.values())
    exact = {k: total * w / weight for k, w in weights.items()}
    out = {k: int(v) for k, v in exact.items()}
    leftover = total - sum(out.values())
    for k in sorted(exact, key=lambda k: out[k] - exact[k])[:leftover]:
        out[k] += 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))
