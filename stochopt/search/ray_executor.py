"""Chains as Ray actors spread over a cluster (``--ray ADDRESS``); see docs/scale.md.

``--ray auto`` joins the cluster this machine belongs to (as after ``ray start
--head``), ``--ray local`` starts a private one on this machine, ``--ray
ray://host:10001`` goes through Ray Client, and ``host:port`` names a head node. Each
chain is one actor asking for one CPU; one coordinating actor (stochopt/search/
ray_actors.py) holds what the chains share. The driver alone writes the run directory:
the chains' files come to it through the coordinator.

A chain whose node dies is started again elsewhere from the last state it sent (a
state comes with every batch of its events, so no event is repeated or lost), and the
events say so (``chain_restarted``). When the cluster has no free CPU left, the new
actor shares one rather than wait for a node that may never come.

The run's check workers are actors on the cluster too (``RayCheckWorkers``), spread
over its nodes as the chains are: a check worker whose node dies is started again and
its candidate checked anew.
"""

from __future__ import annotations

import logging
import os
import pickle
import queue
import time
from collections import deque
from dataclasses import replace
from pathlib import Path

from stochopt.errors import StochoptError
from stochopt.search.driver import FLUSH_S, Job

# Every call to an actor costs about a millisecond of CPU on each side, taken from the
# chains when the cluster's CPUs are also the driver's: the driver reads the coordinator
# four times a second, and between two reads sleeps on its own queue (the check pool's
# verdicts); a chain calls the coordinator every SYNC_S (see sync_period).
DRAIN_S = 0.25       # how often the driver reads what the chains said
SYNC_S = 0.5         # how often a chain sends its events and state and takes its inbox
SYNCS_PER_S = 500    # ... less often on a large cluster: the coordinator's calls a second
WATCH_S = 0.5        # how often it looks for chains whose actor died
CLOSE_S = 5.0        # how long close() waits for the chains to end before killing them
LOCAL_STORE_BYTES = 256 * 1024**2  # a private cluster needs little: messages, no tensors
INSTALL = "pip install 'stochopt[ray]'"


def check_ray_address(address: object) -> str:
    """auto, local, none (this machine's process pool: a resumed run leaves its cluster),
    ray://host:port or host:port; else a one-line error."""
    if not isinstance(address, str) or not address.strip():
        raise StochoptError(f"--ray takes auto, local, ray://HOST:PORT or HOST:PORT, got "
                            f"{address!r}")
    address = address.strip()
    if address in ("auto", "local", "none") or address.startswith("ray://"):
        return address
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise StochoptError(f"--ray takes auto, local, ray://HOST:PORT or HOST:PORT, got "
                            f"{address!r}")
    return address


def connect(address: str):
    """The ray module, connected to the cluster ``address`` names (once per process)."""
    try:
        import ray
    except ImportError:
        raise StochoptError("--ray needs Ray, which is not installed",
                            hint=f"install it: {INSTALL}") from None
    if ray.is_initialized():
        return ray
    # no runtime environment: a job that has one gets workers started for it alone,
    # seconds each (the actors' code finds stochopt by import_paths() instead)
    options = {"include_dashboard": False, "log_to_driver": False,
               "logging_level": logging.WARNING}
    try:
        if address == "local":
            ray.init(num_cpus=os.cpu_count() or 1, object_store_memory=LOCAL_STORE_BYTES,
                     **options)
        else:
            ray.init(address=address, **options)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise StochoptError(f"cannot join the Ray cluster at {address}: {first}",
                            hint="start one with `ray start --head`, or use --ray local"
                            ) from None
    return ray


def import_paths() -> list[str]:
    """Where this process imports stochopt from (a checkout, a venv), and its PYTHONPATH:
    a chain actor puts them first on its sys.path, so the workers run this stochopt."""
    root = str(Path(__file__).resolve().parents[2])
    return [root, *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                    if p and p != root)]


def sync_period(chains: int) -> float:
    """Seconds between two calls of a chain to the coordinator: SYNC_S, or longer when
    the chains would call it more than SYNCS_PER_S times a second."""
    return max(SYNC_S, chains / SYNCS_PER_S)


def cluster_cpus(address: str) -> int:
    """The CPUs of the cluster: the default number of chains."""
    ray = connect(address)
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


class RayExecutor:
    """The Executor of stochopt/search/executor.py on a Ray cluster."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.buffer: deque = deque()
        self.actors: dict[int, object] = {}
        self.runs: dict[object, int] = {}         # the actor's run() -> chain index
        self.last_state: dict[int, dict] = {}
        self.done: set[int] = set()
        self.stop_requested = self.stop_sent = False
        self.stop_sent_at = self.last_watch = self.last_drain = 0.0

    def start(self, jobs: list[Job], outbox) -> None:
        self.ray = ray = connect(self.address)
        self.outbox = outbox
        self.run_dir = Path(jobs[0].run_dir)
        self.spec_text = Path(jobs[0].spec_path).read_text()
        # a chain's state comes right after each flush of its events (the two clocks of
        # the chain's loop run together); its link sends what came every sync_s
        self.jobs = {j.index: replace(j, state_every_s=FLUSH_S) for j in jobs}
        self.sync_s = sync_period(len(jobs))
        self.import_paths = import_paths()
        llm = jobs[0].llm if "llm" in jobs[0].arms else None
        # a resumed run's chains screen with counterexamples this machine holds: the
        # coordinator has them before any chain can ask
        names = {f"counterexamples/{Path(p).name}" for j in jobs if j.state
                 for p in j.state.get("counterexamples", [])}
        files = {n: (self.run_dir / n).read_bytes() for n in names
                 if (self.run_dir / n).is_file()}
        from stochopt.search import ray_actors
        # the actors' classes travel by value, so a worker loads them without importing
        # stochopt (ChainActor.run imports it from import_paths())
        ray.cloudpickle.register_pickle_by_value(ray_actors)
        self.coordinator = ray.remote(ray_actors.Coordinator).options(
            num_cpus=0, scheduling_strategy=_on_head(ray)).remote(
            len(jobs), (llm or {}).get("concurrency"), (llm or {}).get("max_cost"), files)
        self.chain_class = ray.remote(ray_actors.ChainActor)
        # chains beyond the cluster's CPUs share them (as processes would) rather than
        # wait forever for a CPU of their own; the chains' processes start while the
        # coordinator's does
        total = int(ray.cluster_resources().get("CPU", 1))
        for job in jobs:
            self._launch(self.jobs[job.index], cpus=1 if job.index < total else 0)

    def _launch(self, job: Job, cpus: float, restart: bool = False) -> None:
        ray = self.ray
        if restart:  # before the new chain's first call: what its predecessor had not taken
            ray.get(self.coordinator.attach.remote(job.index))
        actor = self.chain_class.options(num_cpus=cpus, max_restarts=0,
                                         scheduling_strategy="SPREAD").remote()
        self.actors[job.index] = actor
        self.runs[actor.run.remote(job.index, pickle.dumps(job), self.coordinator,
                                   self.spec_text, self.import_paths, self.sync_s)] = job.index

    # -- messages ---------------------------------------------------------------------
    def get(self, timeout: float) -> tuple | None:
        self._send_stop()
        if time.monotonic() - self.last_watch > WATCH_S:
            self._watch()
        for take in (self._take_buffered, self._take_local):
            message = take()
            if message is not None:
                return message
        if time.monotonic() - self.last_drain >= DRAIN_S:
            self._drain()
            message = self._take_buffered()
            if message is not None:
                return message
        # until the next read of the coordinator, only a verdict can arrive
        wait = min(timeout, max(0.0, self.last_drain + DRAIN_S - time.monotonic()))
        try:
            return self.outbox.get(timeout=wait)
        except queue.Empty:
            return None

    def _send_stop(self) -> None:
        """The stop flag to the coordinator, once (stop() may be a signal handler)."""
        if self.stop_requested and not self.stop_sent:
            self.coordinator.stop.remote()
            self.stop_sent, self.stop_sent_at = True, time.monotonic()

    def _take_buffered(self) -> tuple | None:
        return self.buffer.popleft() if self.buffer else None

    def _take_local(self) -> tuple | None:
        try:
            return self.outbox.get_nowait()
        except queue.Empty:
            return None

    def _drain(self) -> None:
        from stochopt.rundir import atomic_write_bytes
        self.last_drain = time.monotonic()
        for item in self.ray.get(self.coordinator.drain.remote()):
            if item[0] == "file":  # the driver alone writes the run directory
                atomic_write_bytes(self.run_dir / item[1], item[2])
            else:  # a chain's batch: pickled by our own chain code, in the same run
                for message in pickle.loads(item[1]):
                    self._arrived(message)

    def _arrived(self, message: tuple) -> None:
        """A chain's message, its counterexamples named in the run directory."""
        kind = message[0]
        if kind == "state":
            state = {**message[2], "counterexamples": [
                str(self.run_dir / n) for n in message[2]["counterexamples"]]}
            self.last_state[message[1]] = state
            message = ("state", message[1], state)
        elif kind == "done":
            self.done.add(message[1])
        self.buffer.append(message)

    def send(self, index: int | None, message: tuple) -> None:
        if message[0] == "refuted":  # the chain's node fetches the file by its name
            name = f"counterexamples/{Path(message[1]).name}"
            self.coordinator.put_files.remote({name: Path(message[1]).read_bytes()})
            message = ("refuted", name)
        self.coordinator.send.remote(index, message)

    def check_workers(self, jobs: list) -> RayCheckWorkers:
        """The check pool's workers as actors on this cluster (after start())."""
        return RayCheckWorkers(self, jobs)

    # -- faults -----------------------------------------------------------------------
    def _watch(self) -> None:
        """Chains whose actor ended: a death (its node went away) restarts the chain
        from its last state, on any node with room. Chains that have not ended CLOSE_S
        after the stop (an actor Ray never placed) are ended here."""
        self.last_watch = time.monotonic()
        if not self.runs:
            return
        if self.stop_sent and time.monotonic() - self.stop_sent_at > CLOSE_S:
            for ref, index in list(self.runs.items()):
                self.ray.kill(self.actors[index])
                del self.runs[ref]
                if index not in self.done:
                    self.done.add(index)
                    self.buffer.append(("done", index))
            return
        ended, _ = self.ray.wait(list(self.runs), num_returns=len(self.runs), timeout=0)
        for ref in ended:
            index = self.runs.pop(ref)
            try:
                self.ray.get(ref)
                continue  # it ended normally: its "done" is on its way
            except self.ray.exceptions.RayError as e:
                why = _first_line(e)
            self._drain()  # what it said before it died comes first
            if index in self.done:
                continue
            if self.stop_requested:
                self.buffer.append(("done", index))
                continue
            job = replace(self.jobs[index], state=self.last_state.get(index,
                                                                      self.jobs[index].state))
            free = self.ray.available_resources().get("CPU", 0) >= 1
            self._launch(job, cpus=1 if free else 0, restart=True)
            self.buffer.append(("restarted", index, f"its actor died ({why}); started again "
                                f"from its last state{'' if free else ' on a shared CPU'}"))

    # -- the end ----------------------------------------------------------------------
    def stop(self) -> None:
        self.stop_requested = True  # sent at the next get(): this may be a signal handler

    def stopping(self) -> bool:
        return self.stop_requested

    def close(self) -> None:
        self.stop_requested = True
        try:
            self._send_stop()
            if self.runs:
                self.ray.wait(list(self.runs), num_returns=len(self.runs), timeout=CLOSE_S)
        except Exception:  # noqa: BLE001 - a cluster going away must not hide the result
            pass
        for actor in [*self.actors.values(), self.coordinator]:
            try:
                self.ray.kill(actor)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.actors.clear()
        self.runs.clear()


class RayCheckWorkers:
    """The check pool's workers (checks.ProcessCheckWorkers's interface) as one
    CheckActor each, placed like the chains: a CPU of its own where one is free, else a
    shared one. A verdict is collected when its call returns; a counterexample's bytes
    are written to the run directory here, by the driver."""

    RESTARTS = 3  # a worker whose actor died this often is given up (it cannot start)
    WARM_UP_S = 0.5  # an idle actor prepares shared inputs this long per call

    def __init__(self, executor: RayExecutor, jobs: list) -> None:
        from stochopt.search import ray_actors
        self.ray, self.outbox, self.run_dir = executor.ray, executor.outbox, executor.run_dir
        self.spec_text, self.import_paths = executor.spec_text, executor.import_paths
        self.jobs = jobs
        self.actor_class = self.ray.remote(ray_actors.CheckActor)
        self.actors: list = [None] * len(jobs)
        self.restarts = [0] * len(jobs)
        self.calls: dict = {}  # the running check()'s ref -> (worker index, check id)
        self.warming: dict = {}  # a running warm_up()'s ref -> worker index
        self.warm = [False] * len(jobs)
        # the CPUs no chain asked for: the chains' requests are counted, not the free
        # CPUs Ray reports, which lag behind them (a check actor that took a CPU a
        # chain then needed waited for it forever, and the run proved nothing)
        total = int(self.ray.cluster_resources().get("CPU", 1))
        self.spare = max(0, total - len(executor.jobs))
        for job in jobs:
            self._launch(job.index)

    def _launch(self, index: int, again: bool = False) -> None:
        """A CPU of its own while one no chain asked for is left; a shared one otherwise,
        and always when started again after its node went away."""
        own = not again and index < self.spare
        self.actors[index] = self.actor_class.options(
            num_cpus=1 if own else 0, max_concurrency=2, max_restarts=0,
            scheduling_strategy="SPREAD").remote(index, pickle.dumps(self.jobs[index]),
                                                 self.spec_text, self.import_paths)

    def __len__(self) -> int:
        return len(self.actors)

    def ready(self, index: int) -> bool:
        return self.actors[index] is not None

    def send(self, index: int, pending) -> None:
        ref = self.actors[index].check.remote(pending.check_id, pending.text)
        self.calls[ref] = (index, pending.check_id)

    def give_way(self, index: int) -> None:
        if self.actors[index] is not None:
            self.actors[index].give_way.remote()

    def poll(self) -> list[int]:
        """Put the verdicts that came on the outbox; the workers lost meanwhile. An idle
        worker prepares the inputs every check shares (Checker.warm_up), a little at
        a time."""
        self._warm_idle()
        if not self.calls:
            return []
        done, _ = self.ray.wait(list(self.calls), num_returns=len(self.calls), timeout=0)
        lost = []
        for ref in done:
            index, check_id = self.calls.pop(ref)
            try:
                facts, interrupted, data = self.ray.get(ref)
            except self.ray.exceptions.RayActorError as e:  # its node went away
                lost.append(index)
                self.restarts[index] += 1
                if self.restarts[index] > self.RESTARTS:
                    self.actors[index] = None
                    self.outbox.put(("check_error", index, _first_line(e)))
                else:
                    self._launch(index, again=True)
                continue
            except self.ray.exceptions.RayError as e:  # the check itself failed: say so
                self.outbox.put(("check_error", index, _first_line(e)))
                facts, interrupted, data = {"equivalent": False}, True, None
            path = None
            if data is not None:
                from stochopt.rundir import COUNTEREXAMPLES, atomic_write_bytes
                path = self.run_dir / COUNTEREXAMPLES / f"check-{check_id}.npz"
                path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_bytes(path, data)
                path = str(path)
            self.outbox.put(("verdict", index, check_id, facts, interrupted, path))
        return lost

    def _warm_idle(self) -> None:
        if self.warming:
            done, _ = self.ray.wait(list(self.warming), num_returns=len(self.warming),
                                    timeout=0)
            for ref in done:
                index = self.warming.pop(ref)
                try:
                    cpu_s = self.ray.get(ref)
                except self.ray.exceptions.RayError:  # its check call will say why
                    self.warm[index] = True
                    continue
                if cpu_s is not None:  # as a process worker says it (checks._check_loop)
                    self.warm[index] = True
                    self.outbox.put(("warmed", index, cpu_s))
        busy = {index for index, _ in self.calls.values()} | set(self.warming.values())
        for index, actor in enumerate(self.actors):
            if actor is not None and not self.warm[index] and index not in busy:
                self.warming[actor.warm_up.remote(self.WARM_UP_S)] = index

    def close(self, busy) -> None:
        for index in busy:  # stop at the next example, not at the deadline
            self.give_way(index)
        try:
            if self.calls:
                self.ray.wait(list(self.calls), num_returns=len(self.calls), timeout=CLOSE_S)
        except Exception:  # noqa: BLE001 - a cluster going away must not hide the result
            pass
        for actor in self.actors:
            try:
                if actor is not None:
                    self.ray.kill(actor)
            except Exception:  # noqa: BLE001 - already gone
                pass


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:200]


def _on_head(ray):
    """Keep the coordinator on the head node when it can: a worker node may go away, the
    head is the cluster (and the driver's node may be any node sharing its address)."""
    try:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        head = next(n["NodeID"] for n in ray.nodes() if n.get("Alive") and
                    "node:__internal_head__" in n.get("Resources", {}))
        # hard: a soft affinity was seen to place it on a worker node
        return NodeAffinitySchedulingStrategy(head, soft=False)
    except Exception:  # noqa: BLE001 - no head in sight (Ray Client): anywhere will do
        return "DEFAULT"

