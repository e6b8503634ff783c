"""The chain workers: one process per chain, and what they say to the main process.

The main process (stochopt/search/optimize.py) owns the run directory: it writes events
as they arrive, replaces best.leir atomically when a kernel is proved, checkpoints, and
shows progress. Workers own one chain each; they stop on the stop event (the main
process sets it when the search part of the budget is spent), at their deadline, at
their proposal quota, or when the main process is gone. A kernel that needs its full
check goes to the main process as a "candidate" (for the check pool,
stochopt/search/checks.py) and the chain goes on; with no check workers the chain runs
the check itself.

Beside other chains, a chain also offers its state for an exchange on the tempering
ladder every ``exchange_s`` (``temper``) and, when a restart is due, asks where to go
(``restart_due``); the main process answers with ``exchange`` or ``restart`` (the state
to move to, with its plan), and tells every chain the global best (``best``) and its
refuted candidates (``refuted``). stochopt/search/tempering.py decides the exchanges.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from stochopt.backend.cost import cost
from stochopt.displayable import Displayable
from stochopt.errors import StochoptError
from stochopt.leir.parser import parse
from stochopt.leir.render import render
from stochopt.rundir import CHECKPOINT_JSON, COUNTEREXAMPLES, read_json, write_json
from stochopt.search.chain import ChainConfig, path_from_json, path_json
from stochopt.search.chain_run import ChainRun
from stochopt.search.checks import WorkerJob, ignore_stop_signals

FLUSH_S = 0.25
STATE_S = 5.0
HEAR_S = 0.01  # how often a chain reads its inbox: a read costs ~20 us, a step ~0.2 ms


@dataclass
class Job(WorkerJob):
    """What a chain's worker needs beyond the run's spec and baseline."""
    start_text: str
    seed: int
    arms: list[str]
    config: dict
    t0: float                   # wall-clock time at which the run's t = 0
    deadline: float             # wall-clock time at which to stop at the latest
    max_proposals: int | None
    state: dict | None = None   # a checkpointed chain to restore
    llm: dict | None = None
    checks_in_pool: bool = True  # False: full checks on the chain's path (reproducible)
    # how often the chain's state goes to the main process: a Ray chain sends it with
    # every batch of events, so that a restart from it neither repeats nor loses one
    state_every_s: float = STATE_S
    # the plan from the run's start kernel to start_text (plan_to_json; None: unknown)
    start_path: list | None = field(default_factory=list)
    chains: int = 1             # the run's chains: with more, restarts and exchanges
                                # go through the main process


def worker(job: Job, outbox, inbox, stop) -> None:
    """Run one chain until told to stop; report events, bests and state to the parent."""
    ignore_stop_signals()  # the parent decides when to stop
    parent = os.getppid()
    from threadpoolctl import threadpool_limits
    threadpool_limits(1)  # numpy may have been imported before stochopt set its default
    try:
        _work(job, outbox, inbox, stop, parent)
    except BaseException as e:  # a dying worker must say why, never hang the run
        outbox.put(("error", job.index, f"{type(e).__name__}: {e}"))
    finally:
        outbox.put(("done", job.index))


def _work(job: Job, outbox, inbox, stop, parent, llm_gate=None) -> None:
    """The chain's loop. ``llm_gate``: the run's LLM limits when they are shared across
    machines (see LLMProposer.gate); None: this process's own."""
    machine, spec, baseline = job.load()
    start = parse(job.start_text, machine)
    start_path = path_from_json(job.start_path)
    llm = None
    if "llm" in job.arms and job.llm:
        from stochopt.search.llm_proposer import LLMProposer
        llm = LLMProposer.from_job(job, spec, machine, stop)
        llm.gate = llm_gate
    run = ChainRun(job.index, spec, baseline, cost(baseline, machine).cycles, start, machine,
                   job.arms, job.seed, ChainConfig(**job.config), llm, start_path,
                   job.chains)
    run.checks.counterexample_dir = Path(job.run_dir) / COUNTEREXAMPLES
    run.checks.checks_elsewhere = job.checks_in_pool
    if job.state:
        run.restore(job.state)
    heard = Heard()
    events: list[dict] = []
    last_flush = last_state = last_heard = last_report = time.time()
    run.checks.deadline = time.monotonic() + (job.deadline - time.time())
    _hear(run, inbox, heard, machine)
    tempering = job.chains > 1 and run.config.exchange_s > 0
    while not stop.is_set() and time.time() < job.deadline:
        if job.max_proposals is not None and run.chain.proposals >= job.max_proposals:
            break
        if time.time() - last_heard > HEAR_S:
            _hear(run, inbox, heard, machine)
            last_heard = time.time()
        event, best, facts = run.step()
        event["t"] = round(time.time() - job.t0, 4)
        if heard.mark:  # the chain was moved before this step: an exchange or a restart
            event.update(heard.mark)
            heard.mark = {}
        submissions = run.checks.submissions
        for sub in submissions:  # the main process holds its event until the verdict
            outbox.put(("candidate", job.index, sub.check_id, render(sub.kernel), sub.cycles,
                        sub.seed, dict(event)))
        if submissions:
            submissions.clear()
        else:
            events.append(event)
        if best is not None:
            outbox.put(("events", job.index, events))
            events = []
            outbox.put(("best", job.index, render(best), run.checks.best_cycles, facts,
                        path_json(run.best_path)))
        if run.restarts.due:  # no new best for a while: elsewhere
            if job.chains > 1:  # the main process picks: the best or another chain's state
                outbox.put(("restart_due", job.index))
                run.restarts.since_improvement = 0
            else:  # alone: back to the global best, here, so a seeded run repeats
                if heard.best is None:
                    run.restart_from(run.current, run.current_path)
                else:
                    run.restart_from(parse(heard.best[0], machine),
                                     path_from_json(heard.best[1]))
                event["restarted_from_best"] = True
        if tempering and time.time() - last_report >= run.config.exchange_s:
            outbox.put(("temper", job.index, run.report()))
            last_report = time.time()
        now = time.time()
        if now - last_flush > FLUSH_S:
            outbox.put(("events", job.index, events))
            events, last_flush = [], now
            if os.getppid() != parent:  # the parent was killed: nobody is listening
                return
        if now - last_state > job.state_every_s:
            outbox.put(("state", job.index, run.state()))
            last_state = now
    if llm is not None:
        llm.close()
    outbox.put(("events", job.index, events))
    outbox.put(("state", job.index, run.state()))


@dataclass
class Heard:
    """What a chain keeps of what the main process said."""
    best: tuple | None = None   # the global best's text and plan: a lone chain's restart
    mark: dict = field(default_factory=dict)  # facts for the event of the next step


def _hear(run: ChainRun, inbox, heard: Heard, machine) -> None:
    """Take what the main process said since the last step: the global best, refuted
    candidates, exchanges with a neighbour on the ladder, restart points."""
    try:
        while True:
            message = inbox.get_nowait()
            kind = message[0]
            if kind == "best":
                _, text, cycles, proved, plan = message
                if run.hear_best(text, cycles, proved, path_from_json(plan)):
                    heard.best = (text, plan)
            elif kind == "refuted":
                run.checks.refuted(message[1])
            elif kind == "exchange":  # the replica-exchange rule took the neighbour's state
                _, text, plan, _, partner = message
                run.chain.set_current(parse(text, machine), path_from_json(plan))
                heard.mark.update(exchanged_with=partner, moved_to=run.chain.current_cycles)
            elif kind == "restart":
                _, text, plan, source = message
                run.restart_from(parse(text, machine), path_from_json(plan))
                heard.mark.update({"restarted_from_best": True} if source == "best"
                                  else {"restarted_from": source})
                heard.mark["moved_to"] = run.chain.current_cycles
    except queue.Empty:
        pass


@dataclass
class RunResult(Displayable):  # Displayable: Jupyter shows its summary and chart
    run_dir: str
    spec: str
    machine: str
    baseline_cycles: int
    best_cycles: int
    speedup: float
    roofline_cycles: int
    roofline_share: float
    best_path: str
    proposals: int
    accepted: int
    verified: bool
    elapsed_s: float
    budget_s: float
    stopped_by: str
    tokens: int = 0
    cost_usd: float = 0.0
    errors: list[str] = field(default_factory=list)  # chains that stopped on an error
    notes: list[str] = field(default_factory=list)   # e.g. a best that failed its re-check
    # the fastest kernel found whose full check did not finish (unproved.leir), if any
    unproved_cycles: int | None = None
    unproved_path: str | None = None
    signal: int | None = None   # the signal that interrupted the run (SIGINT, SIGTERM)
    start: str | None = None    # what the tuning database gave the start, if anything
    llm_yield: dict | None = None  # per reply form and prompt focus (stochopt/llm/yields.py)

    def to_json(self) -> dict:
        return asdict(self)


def start_workers(jobs: list[Job], outbox):
    """One forked process per chain, all saying what they do on ``outbox``."""
    stop = mp.get_context("fork").Event()
    started = [start_worker(j, outbox, stop) for j in jobs]
    return [p for p, _ in started], [inbox for _, inbox in started], stop


def start_worker(job: Job, outbox, stop):
    """One chain's forked process and its inbox (a new one for a chain started again:
    a process killed while reading may leave its old inbox locked)."""
    ctx = mp.get_context("fork")
    inbox = ctx.Queue()
    proc = ctx.Process(target=worker, args=(job, outbox, inbox, stop), daemon=True,
                       name=f"stochopt-chain-{job.index}")
    proc.start()
    return proc, inbox


def load_checkpoint(run_dir: Path) -> dict:
    path = run_dir / CHECKPOINT_JSON
    if not path.is_file():
        raise StochoptError(f"{run_dir} has no checkpoint.json",
                            hint="--resume takes a run directory made by stochopt optimize")
    return read_json(path)


def save_checkpoint(run_dir: Path, data: dict) -> None:
    write_json(run_dir / CHECKPOINT_JSON, data)
