"""The two Ray actors of a run on a cluster (see stochopt/search/ray_executor.py).

``Coordinator``: the one small actor for what the chains share. It holds each chain's
inbox (the global best to beat, refuted candidates' counterexamples), the messages on
their way to the driver, the stop flag, the counterexample files (so that a chain
restarted on another node gets every input its predecessor screened with) and the
LLM's cluster-wide limits: requests in flight and dollars spent.

``ChainActor``: one chain, run by the same loop as a local worker process
(stochopt/search/driver.py) through a ``Link`` that batches what it says: every
batch carries the chain's events and then its state, in one call that also brings
back its inbox and the stop flag. A chain restarted from its last state therefore
neither repeats nor loses an event. Files the chain writes (its own counterexamples,
LLM transcripts) go to a scratch folder on its node and travel to the driver, which
alone writes the run directory.

``CheckActor``: one check worker of the run's check pool (stochopt/search/checks.py),
on whichever node Ray placed it, keeping its CheckContext for the run; a
counterexample's inputs travel back as the .npz's bytes with the verdict.

Ray ships this module by value (stochopt/search/ray_executor.py registers it): it
imports nothing of stochopt at its top, so a worker loads these classes as it is,
without a runtime environment, and ``ChainActor.run`` imports stochopt from where the
driver does.
"""

from __future__ import annotations

import os
import pickle
import queue
import tempfile
import threading
import time
from collections import deque
from pathlib import Path

SHIPPED = ("counterexamples", "llm")  # the folders of a chain's files the driver keeps


class Coordinator:
    def __init__(self, chains: int, llm_concurrency: int | None,
                 max_cost: float | None, files: dict[str, bytes]) -> None:
        self.inboxes: dict[int, list] = {i: [] for i in range(chains)}
        self.unacknowledged: dict[int, list] = {i: [] for i in range(chains)}
        self.outbox: list = []
        self.stopped = False
        self.best: tuple | None = None
        self.files: dict[str, bytes] = dict(files)  # counterexamples/<name> -> .npz bytes
        self.llm_limit = llm_concurrency
        self.llm_in_flight = 0
        self.max_cost = max_cost
        self.spent_usd = 0.0

    # -- the chains' side -------------------------------------------------------------
    def sync(self, index: int, batch: bytes, files: dict[str, bytes]) -> tuple[list, bool]:
        """A chain's batch (its files, then its messages pickled in one blob that only
        the driver opens, its state last); its inbox back. What it took last time is
        acknowledged by this batch's state."""
        for relative, data in files.items():
            if relative.startswith("counterexamples/"):
                self.files[relative] = data
            self.outbox.append(("file", relative, data))
        self.outbox.append(("batch", batch))
        delivered, self.inboxes[index] = self.inboxes[index], []
        self.unacknowledged[index] = delivered
        return delivered, self.stopped

    def files_named(self, names: list[str]) -> dict[str, bytes]:
        return {name: self.files[name] for name in names if name in self.files}

    def llm_acquire(self, wanted: int) -> int:
        """Request slots granted to a chain (the run's limit is shared by all)."""
        if self.max_cost is not None and self.spent_usd >= self.max_cost:
            return 0
        if self.llm_limit is None:
            return wanted
        granted = max(0, min(wanted, self.llm_limit - self.llm_in_flight))
        self.llm_in_flight += granted
        return granted

    def llm_release(self, slots: int, cost_usd: float) -> None:
        self.llm_in_flight = max(0, self.llm_in_flight - slots)
        self.spent_usd += cost_usd

    # -- the driver's side ------------------------------------------------------------
    def attach(self, index: int) -> None:
        """A (re)started chain: it gets what its predecessor took in but had not yet
        acknowledged with a state, what waits, and the global best."""
        again = self.unacknowledged[index] + self.inboxes[index]
        self.unacknowledged[index] = []
        if self.best is not None:
            again.append(self.best)
        self.inboxes[index] = again

    def send(self, index: int | None, message: tuple) -> None:
        if message[0] == "best":
            self.best = message
        for i in (list(self.inboxes) if index is None else [index]):
            self.inboxes[i].append(message)

    def put_files(self, files: dict[str, bytes]) -> None:
        self.files.update(files)

    def drain(self) -> list:
        out, self.outbox = self.outbox, []
        return out

    def stop(self) -> None:
        self.stopped = True


class Link:
    """A chain's outbox, inbox, stop flag and LLM gate in one, over the coordinator."""

    def __init__(self, coordinator, index: int, scratch: Path, sync_s: float) -> None:
        self.coordinator, self.index, self.scratch = coordinator, index, scratch
        self.sync_s, self.last_sync = sync_s, time.monotonic()
        self.out: list = []
        self.inbox: deque = deque()
        self.stopped = False
        self.shipped: dict[str, int] = {}  # relative path -> mtime_ns sent

    # the outbox
    def put(self, message: tuple) -> None:
        if message[0] == "state":
            message = ("state", message[1], portable_state(message[2]))
        self.out.append(message)
        # a batch ends with a state, which the chain sends right after its events: a
        # chain restarted from the last state the driver has repeats and loses nothing
        if message[0] == "done" or message[0] == "state" and \
                time.monotonic() - self.last_sync >= self.sync_s:
            self.sync()

    def sync(self) -> None:
        import ray
        files = self._changed_files()  # before the state that may name them
        batch = pickle.dumps(self.out, protocol=pickle.HIGHEST_PROTOCOL)
        inbox, stopped = ray.get(self.coordinator.sync.remote(self.index, batch, files))
        self.out, self.last_sync = [], time.monotonic()
        self.stopped = self.stopped or stopped
        for message in inbox:
            if message[0] == "refuted":  # a counterexample's name: fetch it to this node
                message = ("refuted", self.materialize([message[1]])[0])
            self.inbox.append(message)

    # the inbox
    def get_nowait(self) -> tuple:
        if not self.inbox:
            raise queue.Empty
        return self.inbox.popleft()

    # the stop flag
    def is_set(self) -> bool:
        return self.stopped

    # the run's LLM limits (LLMProposer.gate)
    def acquire(self, wanted: int) -> int:
        import ray
        return ray.get(self.coordinator.llm_acquire.remote(wanted))

    def release(self, slots: int, cost_usd: float) -> None:
        self.coordinator.llm_release.remote(slots, cost_usd)

    def materialize(self, names: list[str]) -> list[str]:
        """Local paths of counterexample files (``counterexamples/<name>``), fetched from
        the coordinator when this node does not have them yet."""
        import ray
        missing = [n for n in names if not (self.scratch / n).is_file()]
        if missing:
            for name, data in ray.get(self.coordinator.files_named.remote(missing)).items():
                (self.scratch / name).parent.mkdir(parents=True, exist_ok=True)
                (self.scratch / name).write_bytes(data)
                self.shipped[name] = (self.scratch / name).stat().st_mtime_ns
        return [str(self.scratch / n) for n in names]

    def _changed_files(self) -> dict[str, bytes]:
        out = {}
        for folder in SHIPPED:
            try:
                entries = list(os.scandir(self.scratch / folder))
            except FileNotFoundError:
                continue
            for entry in entries:
                if entry.name.startswith(".") or not entry.is_file():
                    continue  # a temporary file being written
                relative = f"{folder}/{entry.name}"
                mtime = entry.stat().st_mtime_ns
                if self.shipped.get(relative) != mtime:
                    out[relative] = Path(entry.path).read_bytes()
                    self.shipped[relative] = mtime
        return out


def portable_state(state: dict) -> dict:
    """A chain's state with its counterexamples named relative to the run directory."""
    names = [f"counterexamples/{Path(p).name}" for p in state.get("counterexamples", [])]
    return {**state, "counterexamples": names}


class ChainActor:
    """One chain on whichever node Ray placed it."""

    def run(self, index: int, job_pickle: bytes, coordinator, spec_text: str,
            import_paths: list[str], sync_s: float) -> None:
        """Chain ``index``, of the pickled Job, with the stochopt the driver runs: its
        ``import_paths`` go first on this worker's sys.path before anything of stochopt
        is imported (the job's unpickling included). It calls the coordinator every
        ``sync_s`` seconds."""
        import sys
        from dataclasses import replace
        sys.path[:] = [*import_paths, *(p for p in sys.path if p not in import_paths)]
        scratch = Path(tempfile.mkdtemp(prefix=f"stochopt-chain{index}-"))
        link = Link(coordinator, index, scratch, sync_s)
        try:  # a chain that cannot start says why, as one that dies does
            _imports_from(Path(import_paths[0]))
            from threadpoolctl import threadpool_limits

            from stochopt.rundir import COUNTEREXAMPLES, SPEC_PY
            from stochopt.search.driver import _work
            threadpool_limits(1)
            (scratch / COUNTEREXAMPLES).mkdir()
            (scratch / SPEC_PY).write_text(spec_text)
            job = pickle.loads(job_pickle)
            state = job.state
            if state:  # its counterexamples, fetched to this node
                state = {**state, "counterexamples": link.materialize(
                    [f"{COUNTEREXAMPLES}/{Path(p).name}"
                     for p in state.get("counterexamples", [])])}
            job = replace(job, run_dir=str(scratch), spec_path=str(scratch / SPEC_PY),
                          state=state)
            _work(job, link, link, link, os.getppid(), llm_gate=link)
        except BaseException as e:  # a dying chain must say why, never hang the run
            link.put(("error", index, f"{type(e).__name__}: {e}"))
        finally:
            link.put(("done", index))


class CheckActor:
    """One check worker (stochopt/search/checks.py's Checker) on whichever node Ray
    placed it. It runs two calls at once (max_concurrency=2), so that ``give_way`` can
    bring forward the deadline of the check ``check`` is running; ``check`` and
    ``warm_up`` take turns on the check context."""

    def __init__(self, index: int, job_pickle: bytes, spec_text: str,
                 import_paths: list[str]) -> None:
        import sys
        from dataclasses import replace
        sys.path[:] = [*import_paths, *(p for p in sys.path if p not in import_paths)]
        _imports_from(Path(import_paths[0]))
        from threadpoolctl import threadpool_limits

        from stochopt.rundir import SPEC_PY
        from stochopt.search.checks import Checker
        threadpool_limits(1)
        self.scratch = Path(tempfile.mkdtemp(prefix=f"stochopt-check{index}-"))
        (self.scratch / SPEC_PY).write_text(spec_text)
        job = replace(pickle.loads(job_pickle), run_dir=str(self.scratch),
                      spec_path=str(self.scratch / SPEC_PY))
        self.checker = Checker(job, None)
        self.turn = threading.Lock()

    def warm_up(self, seconds: float) -> float | None:
        """Prepare shared inputs for about this long (Checker.warm_up): None while some
        are left, then the CPU seconds preparing them took (the driver's final re-check,
        which no actor prepares for, pays about as much: the run's reserve holds it)."""
        with self.turn:
            self.checker.warm_up(seconds)
            return self.checker.warm_cpu_s if self.checker.warm else None

    def check(self, check_id: str, text: str) -> tuple[dict, bool, bytes | None]:
        """(the verdict's facts, whether it was cut short, the counterexample's .npz)."""
        with self.turn:
            facts, interrupted, counterexample = self.checker.check(text)
        data = None
        if counterexample is not None:
            path = Path(counterexample.save(self.scratch / f"check-{check_id}.npz"))
            data = path.read_bytes()
            path.unlink()
        return facts, interrupted, data

    def give_way(self) -> None:
        self.checker.deadline.at = float("-inf")


def _imports_from(root: Path) -> None:
    """Fail, naming both, when stochopt comes from elsewhere than the driver's ``root``
    on a node that has that folder (a node without it uses its own installation)."""
    from importlib.util import find_spec
    found = Path(find_spec("stochopt").origin).resolve().parent.parent
    if root.is_dir() and found != root.resolve():
        raise ImportError(f"this node imports stochopt from {found}, the driver from {root}")
