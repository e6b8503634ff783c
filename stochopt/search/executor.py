"""Where the chains run: one small interface, two implementations.

The main process (stochopt/search/supervisor.py) starts the chains through an
``Executor``, reads what they say with ``get``, speaks to one chain (or all) with
``send``, asks them to stop with ``stop`` and ends them with ``close``. The chain, the
proposers and the verifier never know which executor runs them:

- ``LocalExecutor``: one forked process per chain on this machine (the default);
- ``RayExecutor`` (stochopt/search/ray_executor.py): one Ray actor per chain, spread
  over a cluster's CPUs, with a coordinating actor for what the chains share.

Messages are the tuples of stochopt/search/driver.py (``events``, ``candidate``,
``best``, ``state``, ``temper``, ``restart_due``, ``error``, ``done`` from the chains;
``best``, ``refuted``, ``exchange``, ``restart`` to them), the check pool's (``verdict``,
``check_error``, ``check_done``, which arrive on the same ``outbox``), and, from an
executor that restarts chains, ``("restarted", index, why)``.
"""

from __future__ import annotations

import queue
from dataclasses import replace
from typing import Protocol

from stochopt.search.checks import RESTARTS, abandon, exit_reason
from stochopt.search.driver import Job, start_worker, start_workers


class Executor(Protocol):
    def start(self, jobs: list[Job], outbox) -> None:
        """Start one chain per job; their messages, and the check pool's on ``outbox``,
        come out of get()."""

    def get(self, timeout: float) -> tuple | None:
        """The next message, or None after ``timeout`` seconds without one."""

    def send(self, index: int | None, message: tuple) -> None:
        """A message to chain ``index`` (None: to every chain)."""

    def stop(self) -> None:
        """Ask every chain to stop at its next step (safe in a signal handler)."""

    def stopping(self) -> bool:
        """Whether stop() was called."""

    def close(self) -> None:
        """Wait a few seconds for the chains to end, then end them."""


class LocalExecutor:
    """One forked worker process per chain (stochopt/search/driver.py). A chain whose
    process dies without saying it is done (the kernel's OOM killer, a stray kill) is
    started again from the last state it sent, as the Ray executor does with an actor;
    once the run is stopping it is counted as done, so the run never waits on it."""

    def __init__(self) -> None:
        self.procs: list = []
        self.inboxes: list = []
        self.outbox = None
        self.stop_event = None
        self.jobs: list[Job] = []
        self.last_state: dict[int, dict] = {}
        self.done: set[int] = set()
        self.restarts: dict[int, int] = {}
        self.buffer: list[tuple] = []

    def start(self, jobs: list[Job], outbox) -> None:
        self.jobs = list(jobs)
        self.procs, self.inboxes, self.stop_event = start_workers(jobs, outbox)
        self.outbox = outbox

    def get(self, timeout: float) -> tuple | None:
        if self.buffer:
            return self.buffer.pop(0)
        # found dead before reading: a chain that ended normally had put its "done" on
        # the queue before it exited, so if the queue then stays empty, none is coming
        dead = [i for i, p in enumerate(self.procs) if i not in self.done and not p.is_alive()]
        try:
            message = self.outbox.get(timeout=timeout)
        except queue.Empty:
            for index in dead:
                self._lost(index)
            return self.buffer.pop(0) if self.buffer else None
        if message[0] == "state":
            self.last_state[message[1]] = message[2]
        elif message[0] == "done":
            self.done.add(message[1])
        return message

    def _lost(self, index: int) -> None:
        """A chain's process died without a word: start it again, or give it up."""
        why = exit_reason(self.procs[index].exitcode)
        tries = self.restarts.get(index, 0)
        if self.stop_event.is_set() or tries >= RESTARTS:
            self.done.add(index)
            if not self.stop_event.is_set():
                self.buffer.append(("error", index, f"its process died {tries + 1} times, "
                                    f"the last time of {why}; the run goes on without it"))
            self.buffer.append(("done", index))
            return
        self.restarts[index] = tries + 1
        job = replace(self.jobs[index], state=self.last_state.get(index, self.jobs[index].state))
        abandon([self.inboxes[index]])
        self.procs[index], self.inboxes[index] = start_worker(job, self.outbox, self.stop_event)
        self.buffer.append(("restarted", index, f"its process died ({why}); started again "
                            "from its last state"))

    def send(self, index: int | None, message: tuple) -> None:
        for inbox in self.inboxes if index is None else [self.inboxes[index]]:
            inbox.put(message)

    def stop(self) -> None:
        self.stop_event.set()

    def stopping(self) -> bool:
        return self.stop_event.is_set()

    def close(self) -> None:
        self.stop_event.set()
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
        abandon(self.inboxes)


def make_executor(ray_address: str | None) -> Executor:
    """The local process pool, or Ray when the run names a cluster."""
    if ray_address is None:
        return LocalExecutor()
    from stochopt.search.ray_executor import RayExecutor
    return RayExecutor(ray_address)
