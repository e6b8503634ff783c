"""Full checks beside the chains: a pool of check workers fed by the main process.

A chain hands over a kernel that passed its screening inputs and is faster than the
best known, and goes on from it at once. The main process keeps the candidates waiting
for their full check, fastest first, and gives each idle check worker the fastest one
that could still become the best. A verdict settles the candidate's event:

- ``best``: proved; it becomes best.leir, and every slower candidate still waiting is
  moot (it stays ``accepted``: the chain moved to it, nothing more);
- ``wrong``: refuted; the counterexample goes back to the chain that found it, and the
  global best the chains aim at rolls back to the last proved kernel (or to a faster
  candidate still waiting);
- ``unproved``: the run ended before its check did (see docs/search.md).

A starting kernel given with --init is checked the same way, as the slowest
candidate, so that the search never waits for it (the spec's own lowering is not
checked: it is the baseline every check compares against). A check gives way (it is
queued again) when no worker is free and a candidate waits that is faster than the
starting kernel's or 10% faster than the one being checked: a proved faster kernel
makes it moot.

Each check worker keeps one CheckContext (stochopt/verify/bank.py) for the run and checks
every candidate with the run's seed, so the inputs, references, the baseline's outputs
and magnitudes are computed once per run, not once per check; the contexts of a run's
workers share what they computed through the run directory's check_bank/. The workers
are processes on this machine (``ProcessCheckWorkers``) or, with --ray, actors on the
cluster (stochopt/search/ray_executor.py, ``RayCheckWorkers``): the pool does not know
which.
"""

from __future__ import annotations

import heapq
import math
import os
import queue
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from stochopt.leir.parser import parse
from stochopt.machine import load_machine
from stochopt.rundir import COUNTEREXAMPLES, SOURCE_START

START = SOURCE_START  # the check id of the starting kernel's own check
GIVE_WAY_RATIO = 0.9  # a check gives way to a waiting candidate at least 10% faster
WARM_STEP_S = 0.2    # an idle worker prepares shared inputs this long between looks


@dataclass
class WorkerJob:
    """What every worker process of a run starts from (a chain's Job, a CheckerJob), as
    plain data: it crosses a process boundary, and the worker rebuilds the rest."""
    index: int
    run_dir: str
    spec_path: str
    spec_name: str | None
    machine: object
    baseline_text: str

    def load(self):
        """The run's machine, spec and baseline kernel, rebuilt in the worker."""
        from stochopt.spec import load_spec
        machine = load_machine(self.machine)
        return machine, load_spec(self.spec_path, self.spec_name), \
            parse(self.baseline_text, machine)


@dataclass
class CheckerJob(WorkerJob):
    """What a check worker needs beyond the run's spec and baseline."""
    examples: int
    deadline: float             # wall-clock time at which every check stops
    seed: int = 0               # of every check: the run's, so that they share inputs
    # wall-clock time from which an idle worker prepares the final re-check's inputs:
    # late in the run, where the chains mostly polish, not in its first minutes, where
    # they make most of their gains and need the cores
    prepare_recheck_at: float = math.inf


@dataclass(order=True)
class Pending:
    """A candidate waiting for (or under) its full check."""
    cycles: int
    check_id: str = field(compare=False)
    chain: int | None = field(compare=False)
    text: str = field(compare=False)
    seed: int = field(compare=False)  # the chain's; a check worker uses the run's
    event: dict | None = field(compare=False, default=None)  # held until the verdict
    t: float = field(compare=False, default=0.0)             # when it was found

    def to_json(self) -> dict:
        return {"cycles": self.cycles, "check_id": self.check_id, "chain": self.chain,
                "text": self.text, "seed": self.seed, "event": self.event, "t": self.t}

    @classmethod
    def from_json(cls, data: dict) -> Pending:
        return cls(**data)


def ignore_stop_signals() -> None:
    """A chain or check process ignores Ctrl-C and SIGTERM: sent to the whole process
    group (a terminal, `kill -- -PGID`, a service manager), they reach the main process
    too, which stops its workers and keeps what they found; a worker that died on the
    signal instead would take its last events with it."""
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)


def check_worker(job: CheckerJob, inbox, outbox, stop) -> None:
    """Check candidates the main process sends until told to stop."""
    ignore_stop_signals()  # the parent decides when to stop
    parent = os.getppid()
    from threadpoolctl import threadpool_limits
    threadpool_limits(1)
    try:
        _check_loop(job, inbox, outbox, stop, parent)
    except BaseException as e:  # a dying worker must say why, never hang the run
        outbox.put(("check_error", job.index, f"{type(e).__name__}: {e}"))
    finally:
        outbox.put(("check_done", job.index))


def abandon(inboxes) -> None:
    """Drop what is still queued for worker processes that have ended: at exit Python
    waits for each queue's feeder thread to flush it, and a message no process will read
    (an exchange, a best) can fill a pipe, so the run printed its result and never
    exited."""
    for inbox in inboxes:
        inbox.cancel_join_thread()


class MovableDeadline:
    """A check's deadline (time.monotonic) that a signal can bring forward. check()
    compares ``time.monotonic() > deadline`` before each example; float's comparison
    gives way to this object's reflected one. (Raising from the signal handler instead
    is unsafe: a signal that lands in a gc callback has its exception swallowed.)"""

    def __init__(self, at: float) -> None:
        self.at = at

    def __lt__(self, now: float) -> bool:  # now > deadline
        return now > self.at

    def __gt__(self, now: float) -> bool:  # now < deadline
        return now < self.at


def _check_loop(job: CheckerJob, inbox, outbox, stop, parent) -> None:
    from stochopt.rundir import CHECK_BANK

    checker = Checker(job, Path(job.run_dir) / CHECK_BANK)

    def give_way(signum, frame):  # the main process wants this worker for a candidate
        checker.deadline.at = -math.inf

    signal.signal(signal.SIGUSR1, give_way)
    told = False  # whether the main process knows what preparing the inputs cost
    while not stop.is_set():
        if checker.warm and not told:
            outbox.put(("warmed", job.index, checker.warm_cpu_s))
            told = True
        try:  # while no candidate waits, prepare the inputs every check will try
            item = inbox.get(timeout=0.0 if checker.has_work() else 0.2)
        except queue.Empty:
            if os.getppid() != parent:
                return
            checker.warm_up(WARM_STEP_S)
            continue
        if item is None:
            return
        check_id, text = item
        facts, interrupted, cex = checker.check(text)
        path = None
        if cex is not None:
            path = cex.save(Path(job.run_dir) / COUNTEREXAMPLES / f"check-{check_id}.npz")
        outbox.put(("verdict", job.index, check_id, facts, interrupted, path))


class Checker:
    """One check worker's state for the run: the machine, spec and baseline, the
    CheckContext its checks share, and a deadline the pool can bring forward."""

    def __init__(self, job: CheckerJob, bank_directory: Path | None) -> None:
        from stochopt.verify.bank import CheckContext

        self.job = job
        self.machine, self.spec, self.baseline = job.load()
        self.context = CheckContext(self.spec, self.baseline, self.machine, bank_directory)
        self.run_deadline = time.monotonic() + (job.deadline - time.time())
        self.deadline = MovableDeadline(self.run_deadline)
        # what warm_up prepares, for the run's seed and for the final re-check's: True
        # (not begun), an iterator over the inputs, or None (done, or nothing to do: the
        # re-check reads what a worker prepared from the run's check_bank/ alone)
        self._warming: object = True
        self._rechecking: object = True if bank_directory is not None else None
        self.recheck_at = time.monotonic() + (job.prepare_recheck_at - time.time())
        self.warm_cpu_s = 0.0  # CPU seconds spent preparing the run's own inputs

    @property
    def warm(self) -> bool:
        """Whether every input the run's checks share is prepared."""
        return self._warming is None

    def has_work(self) -> bool:
        """Whether warm_up has inputs to prepare now."""
        return not self.warm or (self._rechecking is not None
                                 and time.monotonic() >= self.recheck_at)

    def warm_up(self, seconds: float) -> None:
        """Prepare the inputs every check of the run tries (check.shared_inputs: their
        arrays, references, the baseline's magnitudes and outputs, exact ones included,
        which a candidate shares where its values meet the baseline's) for about this
        long, so that the first candidates' checks find them ready; late in the run,
        those of the final re-check (their references and the baseline's outputs, which
        go to the run's check_bank/, where the re-check reads them: on mla_decode they
        are half of its work)."""
        from stochopt.search.best_kernel import recheck_seed

        end = time.monotonic() + seconds
        while time.monotonic() < end and self.has_work():
            if not self.warm:
                cpu = time.process_time()
                self._warming = self._prepare(self._warming, self.job.seed, True)
                self.warm_cpu_s += time.process_time() - cpu
            else:
                self._rechecking = self._prepare(self._rechecking,
                                                 recheck_seed(self.job.seed), False)

    def _prepare(self, inputs, seed: int, for_candidates: bool):
        """One more input of a seed's shared inputs prepared: the iterator, or None when
        none is left."""
        from stochopt.verify.check import shared_inputs

        if inputs is True:
            inputs = shared_inputs(self.context, self.job.examples, seed)
        one = next(inputs, None)
        if one is None:
            return None
        self.context.limits(one)
        if for_candidates:
            self.context.output(self.baseline, one, exact=True)
        return inputs

    def check(self, text: str) -> tuple[dict, bool, object]:
        """(the verdict's facts, whether it was cut short, the counterexample or None)."""
        from stochopt.verify.check import check

        self.deadline.at = self.run_deadline  # a give-way before this check is stale
        verdict = check(parse(text, self.machine), self.spec, examples=self.job.examples,
                        seed=self.job.seed, machine=self.machine, baseline=self.baseline,
                        deadline=self.deadline, context=self.context)
        facts = verdict.to_json()
        if verdict.counterexample is not None:
            facts["description"] = verdict.counterexample.describe()
        return facts, verdict.interrupted, verdict.counterexample


RESTARTS = 3  # a worker process that died this often is given up (it cannot run here)


def exit_reason(code: int | None) -> str:
    """What ended a process, from its exit code (negative: the signal)."""
    return f"signal {signal.Signals(-code).name}" if code and code < 0 else f"exit code {code}"


class ProcessCheckWorkers:
    """Check workers as processes on this machine: an inbox each, verdicts on the
    run's outbox, SIGUSR1 to give way. A worker whose process died (the OOM killer)
    is started again, and the candidate it was checking is checked again."""

    def __init__(self, ctx, jobs: list[CheckerJob], outbox) -> None:
        self.ctx, self.jobs, self.outbox = ctx, jobs, outbox
        self.stop = ctx.Event()
        self.inboxes: list = [None] * len(jobs)
        self.procs: list = [None] * len(jobs)
        self.restarts = [0] * len(jobs)
        for j in jobs:
            self._launch(j.index)

    def _launch(self, index: int) -> None:
        # a new inbox each time: a process killed while reading may leave its old one locked
        if self.inboxes[index] is not None:
            abandon([self.inboxes[index]])
        self.inboxes[index] = self.ctx.Queue()
        self.procs[index] = self.ctx.Process(
            target=check_worker, args=(self.jobs[index], self.inboxes[index], self.outbox,
                                       self.stop), daemon=True, name=f"stochopt-check-{index}")
        self.procs[index].start()

    def __len__(self) -> int:
        return len(self.procs)

    def ready(self, index: int) -> bool:
        return self.procs[index] is not None and self.procs[index].is_alive()

    def send(self, index: int, pending: Pending) -> None:
        self.inboxes[index].put((pending.check_id, pending.text))

    def give_way(self, index: int) -> None:
        try:
            os.kill(self.procs[index].pid, signal.SIGUSR1)
        except (ProcessLookupError, TypeError):  # it has exited (or never started)
            pass

    def poll(self) -> list[int]:
        """Workers lost since the last poll: each is started again (or, after RESTARTS,
        given up with a check_error), and a worker_restarted message says why."""
        lost = []
        for index, proc in enumerate(self.procs):
            if proc is None or proc.is_alive() or self.stop.is_set():
                continue
            lost.append(index)
            why = exit_reason(proc.exitcode)
            self.restarts[index] += 1
            if self.restarts[index] > RESTARTS:
                self.procs[index] = None
                self.outbox.put(("check_error", index, f"its process died "
                                 f"{self.restarts[index]} times, the last time of {why}"))
            else:
                self._launch(index)
                self.outbox.put(("worker_restarted", index, f"its process died ({why}); "
                                 "started again, its candidate checked again"))
        return lost

    def close(self, busy) -> None:
        self.stop.set()
        for index in busy:  # stop at the next example, not at the deadline
            self.give_way(index)
        for q in self.inboxes:
            q.put(None)
        for p in self.procs:
            if p is None:
                continue
            p.join(timeout=2)
            if p.is_alive():
                p.terminate()
        abandon(self.inboxes)


class CheckPool:
    """The main process's side: candidates waiting, workers busy, and what to do next.
    ``workers``: where the checks run (ProcessCheckWorkers by default)."""

    def __init__(self, ctx, jobs: list[CheckerJob], outbox, workers=None) -> None:
        self.waiting: list[Pending] = []            # a heap, fastest first
        self.running: dict[int, Pending] = {}       # worker index -> its candidate
        self.started: dict[int, float] = {}         # worker index -> when it began
        self.longest_check_s = 0.0                  # the slowest check seen so far
        self.preempted: set[int] = set()            # workers told to drop START
        self.workers = workers if workers is not None else \
            ProcessCheckWorkers(ctx, jobs, outbox)

    def add(self, pending: Pending) -> None:
        heapq.heappush(self.waiting, pending)

    def fastest(self) -> Pending | None:
        """The fastest candidate not yet decided (waiting or being checked)."""
        every = self.waiting[:1] + list(self.running.values())
        return min(every, default=None)

    def busy(self) -> bool:
        return bool(self.running)

    def dispatch(self, proved_cycles: float) -> list[Pending]:
        """Start the fastest waiting candidates on idle workers; return the waiting ones
        a proved kernel has made moot (no faster than it)."""
        moot = [p for p in self.waiting if p.cycles >= proved_cycles]
        if moot:
            self.waiting = [p for p in self.waiting if p.cycles < proved_cycles]
            heapq.heapify(self.waiting)
        for index in self.workers.poll():  # a worker lost (its node gone): check again
            lost = self.running.pop(index, None)
            self.started.pop(index, None)
            self.preempted.discard(index)
            if lost is not None:
                self.add(lost)
        for index in range(len(self.workers)):
            if index in self.running or not self.waiting or not self.workers.ready(index):
                continue
            pending = heapq.heappop(self.waiting)
            self.running[index] = pending
            self.started[index] = time.time()
            self.workers.send(index, pending)
        return moot

    def make_way(self) -> None:
        """When every worker is busy and a candidate waits that is much faster than one
        being checked (or any faster than the starting kernel), that check gives way: it
        is queued again, and is moot if the faster one is proved. The 10% step bounds the
        work thrown away to a few checks per run."""
        if not self.waiting or len(self.running) < len(self.workers):
            return
        fastest = self.waiting[0].cycles
        slowest = max((p for i, p in self.running.items() if i not in self.preempted),
                      default=None)
        if slowest is None:
            return
        if slowest.check_id == START or fastest <= GIVE_WAY_RATIO * slowest.cycles:
            index = next(i for i, p in self.running.items() if p is slowest)
            self.preempted.add(index)
            self.workers.give_way(index)

    def finish(self, worker: int, check_id: str, interrupted: bool) -> Pending | None:
        """The candidate a verdict is about (None for a stale verdict, or for a check that
        gave way: it waits again)."""
        pending = self.running.get(worker)
        if pending is None or pending.check_id != check_id:
            return None
        del self.running[worker]
        if worker in self.preempted:
            self.preempted.discard(worker)
            if interrupted:  # else it finished before the signal came: keep its verdict
                self.add(pending)
                self.started.pop(worker, None)
                return None
        self.longest_check_s = max(self.longest_check_s,
                                   time.time() - self.started.pop(worker))
        return pending

    def undecided(self) -> list[Pending]:
        """Every candidate without a verdict, fastest first (at the end of a run)."""
        return sorted(self.waiting + list(self.running.values()))

    def close(self) -> None:
        self.workers.close(list(self.running))
