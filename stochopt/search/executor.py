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
from typing import Protocol

from stochopt.search.checks import abandon
from stochopt.search.driver import Job, start_workers


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
    """One forked worker process per chain (stochopt/search/driver.py)."""

    def __init__(self) -> None:
        self.procs: list = []
        self.inboxes: list = []
        self.outbox = None
        self.stop_event = None

    def start(self, jobs: list[Job], outbox) -> None:
        self.procs, self.inboxes, self.stop_event = start_workers(jobs, outbox)
        self.outbox = outbox

    def get(self, timeout: float) -> tuple | None:
        try:
            return self.outbox.get(timeout=timeout)
        except queue.Empty:
            return None

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
