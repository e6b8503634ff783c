"""How much of a run a model that lands nothing may take: requests paced by yield.

A model's requests cost even when its replies help nothing: a server on this machine
takes the chains' cores while it generates (SmolLM2-135M beside two mla_decode chains
on two cores cost them a third of their candidates), and a hosted model costs dollars.
So each llm proposer keeps a *duty*, the share of the wall clock it may keep a request
in flight. The duty starts at 1 (a new request as soon as a slot is free) and halves
after every PATIENCE judged replies in a row that brought no candidate faster than the
kernel their prompt showed, down to FLOOR; the first reply that does bring one sets it
back to 1. After each reply the next request waits its latency times (1 / duty - 1): at
the floor, a 12-second reply is followed by 84 seconds without a request. The model is
never switched off: a plan that pays late is still found, at the floor's rate.

A server on this machine starts at LOCAL_START: its requests take the chains' cores from
the first one, so the first replies must earn the full rate.

A chain whose only arm is the llm is not paced (nothing else could use the time), nor
is a proposer with ``pace`` off (``optimize(llm={"pace": False})``).
"""

from __future__ import annotations

from dataclasses import dataclass

PATIENCE = 4          # judged replies in a row without a faster candidate per halving
FLOOR = 1.0 / 8.0     # the least duty: a model is slowed down, never switched off
LOCAL_START = 0.5     # the first duty of a server on this machine


@dataclass
class Pacer:
    duty: float = 1.0
    dry: int = 0               # judged replies in a row without a faster candidate
    not_before: float = 0.0    # the monotonic clock's time the next request may start

    def judged(self, latency_s: float, faster: bool, now: float) -> str | None:
        """One reply whose candidates the chain has all judged: ``faster`` when one was
        faster than the kernel its prompt showed; ``latency_s`` its time in flight.
        Returns a line for the user when the duty changed."""
        before = self.duty
        if faster:
            self.duty, self.dry = 1.0, 0
        else:
            self.dry += 1
            if self.dry % PATIENCE == 0:
                self.duty = max(FLOOR, self.duty / 2)
        self.not_before = max(self.not_before, now + latency_s * (1.0 / self.duty - 1.0))
        if self.duty < before:
            return (f"the model's last {self.dry} replies brought nothing faster: it now "
                    f"keeps a request in flight {self.duty:.0%} of the time")
        if self.duty > before:
            return "a reply brought a faster kernel: requests at full rate again"
        return None

    def ready(self, now: float) -> bool:
        return now >= self.not_before
