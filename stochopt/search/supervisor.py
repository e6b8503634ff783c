"""The main process of a run: chains and check workers beside it, the run directory in
its hands, the budget on its clock.

The budget is wall time from the start of optimize() to its return. The search part ends
``reserve`` seconds before the deadline (see ``finish_reserve``): the chains stop, the
checks still running get the reserve to finish (the chains' cores are free by then), and
what is left of it goes to the final re-check of the best. Every check stops at the
deadline, so the run ends within a second or two of its budget; a faster kernel whose
check did not finish is kept as unproved.leir and named in best.json, the summary and
the report.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import signal
import time
from pathlib import Path

from stochopt.errors import StochoptError
from stochopt.leir.parser import parse
from stochopt.llm.yields import read_transcripts, yield_table
from stochopt.machine import run_machine
from stochopt.rundir import (
    ACCEPTED,
    BEST,
    BEST_JSON,
    BEST_LEIR,
    EVENTS_JSONL,
    LLM_TRANSCRIPTS,
    PROOF_LOWERING,
    PROOF_UNFINISHED,
    RUN_JSON,
    SOURCE_SEARCH,
    SOURCE_START,
    SPEC_PY,
    UNPROVED,
    WRONG,
    read_json,
    write_json,
)
from stochopt.search.best_kernel import recheck_best, write_best, write_unproved
from stochopt.search.chain import ChainConfig
from stochopt.search.checks import START, CheckerJob, CheckPool, Pending
from stochopt.search.driver import Job, RunResult, save_checkpoint
from stochopt.search.event_log import BoundedEventLog
from stochopt.search.executor import make_executor
from stochopt.search.stats import RunStats
from stochopt.search.tempering import Tempering, beta_ladder
from stochopt.search.values import Proofs
from stochopt.tuning.runs import RunRecorder
from stochopt.verify.coverage import untested_note, untested_sides

RESERVE_SHARE = 0.2     # the most of a budget kept back for the checks at its end
RESERVE_FLOOR_S = 2.0   # ... and the least (unless the budget is shorter)
RESERVE_CHECKS = 2.0    # the reserve holds this many of the slowest check seen so far
CHECKPOINT_S = 5.0
# the share of the budget after which idle check workers prepare the final re-check's
# inputs (checks.CheckerJob.prepare_recheck_at)
RECHECK_PREPARE_AT = 0.6


def finish_reserve(budget_s: float, longest_check_s: float, recheck_s: float = 0.0) -> float:
    """Seconds of the budget kept back at its end for the last checks and the re-check:
    enough for two of the slowest check seen so far (one to finish, the re-check), or
    for the slowest and ``recheck_s`` (the re-check's inputs prepared, as a worker
    timed them: a warm check reuses the run's inputs, the re-check builds new ones),
    never more than a fifth of the budget; a fifth until a check has been timed."""
    most = RESERVE_SHARE * budget_s
    if longest_check_s <= 0:
        return most
    return min(most, max(RESERVE_FLOOR_S, RESERVE_CHECKS * longest_check_s,
                         longest_check_s + recheck_s))


def supervise(rd: Path, run: dict, state: dict, start_text: str, baseline_text: str,
              llm: dict | None, progress, started: float, previous_s: float) -> RunResult:
    """Run the chains and the checks until the budget is spent; finish and report."""
    from stochopt.spec import load_spec

    machine = run_machine(run)
    spec = load_spec(rd / SPEC_PY, run.get("name"))
    # the run's clock started when this session did, less the sessions before a resume
    t0 = started - previous_s
    deadline = t0 + run["budget_s"]
    run_state = _RunState(rd, run, state, spec, machine, t0, deadline)
    quota = _quotas(run["max_proposals"], run["chains"])
    previous = {c["index"]: c for c in state.get("chains", [])}
    workers = run.get("check_workers", 0)
    # every chain opens with greedy's descent for the run's seed (docs/search.md)
    config = dict(run["config"])
    if config.get("opening_seed") is None:
        config["opening_seed"] = run["seed"]
    betas = run_betas(run)  # each chain its own beta on the ladder
    run_state.tempering = Tempering(betas, run["seed"],
                                    config.get("restart_best_share", 0.5))
    jobs = [Job(i, str(rd), str(rd / SPEC_PY), run.get("name"), machine, baseline_text,
                start_text, run["seed"] * 1000 + i, run["arms"], {**config, "beta": betas[i]},
                t0, deadline, quota[i], previous.get(i), llm, checks_in_pool=workers > 0,
                start_path=run_state.proved_plan, chains=run["chains"])
            for i in range(run["chains"])]
    executor = make_executor(run.get("ray"))
    # a process that holds a Ray connection must not fork (its gRPC threads do not
    # survive it): beside Ray, the queue is a spawn context's
    context = mp.get_context("fork" if run.get("ray") is None else "spawn")
    outbox = context.Queue()  # the check pool's verdicts, and local chains'
    executor.start(jobs, outbox)
    run_state.executor = executor
    if workers:
        examples = run_state.full_examples
        prepare_recheck_at = t0 + RECHECK_PREPARE_AT * run["budget_s"]
        checker_jobs = [CheckerJob(i, str(rd), str(rd / SPEC_PY), run.get("name"), machine,
                                   baseline_text, examples, deadline, run["seed"],
                                   prepare_recheck_at)
                        for i in range(workers)]
        # with Ray the check workers are actors on the cluster, where the chains run
        where = None if run.get("ray") is None else executor.check_workers(checker_jobs)
        run_state.pool = CheckPool(context, checker_jobs, outbox, where)
        run_state.queue_start_and_pending(start_text)
    stopped = {"signal": None, "why": "budget"}

    def on_signal(signum, frame):
        stopped.update(signal=signum, why="interrupted")
        executor.stop()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    alive = len(jobs)
    try:
        while True:
            message = executor.get(timeout=0.1)
            if message is not None and message[0] == "done":
                alive -= 1
                if alive == 0 and not executor.stopping() and run.get("max_proposals"):
                    stopped["why"] = "max_proposals"  # every chain made its quota
            elif message is not None:
                run_state.take(message)
            now = time.time()
            if not executor.stopping():
                if run_state.fatal:
                    stopped["why"] = "error"
                    executor.stop()
                elif run.get("max_cost") and run_state.stats.cost_usd >= run["max_cost"]:
                    stopped["why"] = "max_cost"
                    executor.stop()
                elif now >= deadline - finish_reserve(run["budget_s"],
                                                      run_state.longest_check_s(),
                                                      run_state.recheck_s):
                    executor.stop()  # the search part is over; the checks go on
            if alive == 0 and (stopped["why"] in ("interrupted", "error")
                               or not run_state.checks_left() or now >= deadline):
                break
            run_state.dispatch()
            if now - run_state.last_checkpoint > CHECKPOINT_S:
                run_state.checkpoint(finished=False)
            if progress is not None:
                progress(run_state.stats.snapshot())
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        executor.close()
        if run_state.pool is not None:
            run_state.pool.close()
    try:
        if run_state.fatal:
            run_state.checkpoint(finished=False)
            raise StochoptError(run_state.fatal[0], hint=run_state.fatal[1])
        if run_state.stats.errors and run_state.stats.proposals == 0:
            raise StochoptError("every chain failed: " + "; ".join(run_state.stats.errors[:3]))
        llm_note = run_state.stats.llm_note()
        if llm_note:  # the LLM failed: say so where the user looks, and in the run's files
            run_state.stats.notes.append(llm_note)
            if run["arms"] == ["llm"] and run_state.stats.llm_stopped and \
                    stopped["why"] != "interrupted":
                stopped["why"] = "llm_failed"   # the CLI exits 1
        result = run_state.finish(stopped["why"], stopped["signal"], baseline_text)
        if llm_note:  # after the final re-check, which writes best.json anew
            for name in ("run.json", "best.json"):
                write_json(rd / name, {**read_json(rd / name),
                                       "llm_status": run_state.stats.llm_status()})
        if llm:  # what each reply form and prompt focus yielded, as the report counts it
            result.llm_yield = yield_table(read_transcripts(rd / LLM_TRANSCRIPTS),
                                           run_state.stats.llm_yield.proved)
            write_json(rd / RUN_JSON, {**read_json(rd / RUN_JSON),
                                       "llm_yield": result.llm_yield})
        return result
    finally:
        run_state.log.close()


class _RunState:
    """What the main process knows and holds: the proved best, the candidates waiting
    for a verdict, the events, the chains' states."""

    def __init__(self, rd: Path, run: dict, state: dict, spec, machine, t0: float,
                 deadline: float) -> None:
        self.rd, self.run, self.spec, self.machine = rd, run, spec, machine
        self.deadline = deadline
        self.stats = RunStats(run, state, t0)
        self.log = BoundedEventLog(rd / EVENTS_JSONL)
        self.chain_states = {c["index"]: c for c in state.get("chains", [])}
        self.saved_pending = [Pending.from_json(p) for p in state.get("pending", [])]
        self.pool: CheckPool | None = None
        self.executor = None   # where the chains run (stochopt/search/executor.py)
        best = read_json(rd / BEST_JSON)
        proved = best.get("verdict") is not None or best.get("proof") == PROOF_LOWERING
        self.proved_cycles: float = best["cycles"] if proved else math.inf
        self.proved_text = (rd / BEST_LEIR).read_text()
        # the best's plan from the run's start (None: unknown, or a run directory older
        # than plans); a resumed run's chains start from best.leir, hence from it
        self.proved_plan: list | None = best.get("plan")
        self.start_cycles = best["cycles"]
        self.announced: tuple[int, str] | None = None
        self.unproved: list[dict] = []   # candidates whose check was cut by the deadline
        self.fatal: tuple[str, str] | None = None
        self.last_checkpoint = time.time()
        self.proofs = Proofs()  # value graphs proved in this session, by any chain
        self.tuning = RunRecorder(rd, run, self.stats.notes)  # the tuning database
        self.tempering: Tempering | None = None  # the ladder's exchanges and restarts
        # what the final re-check is expected to cost: a check worker's CPU seconds
        # preparing the run's shared inputs (the re-check prepares as many new ones)
        self.recheck_s = 0.0
        # the best the chains were told of (text, plan): where restarts to the best go
        self.restart_best = (self.proved_text, self.proved_plan)

    # -- the pool ---------------------------------------------------------------------
    def queue_start_and_pending(self, start_text: str) -> None:
        if self.proved_cycles == math.inf:  # the starting kernel's own check
            self.pool.add(Pending(self.start_cycles, START, None, start_text,
                                  self.run["seed"]))
        for pending in self.saved_pending:  # candidates an interrupted session left
            self.pool.add(pending)
        self._announce()

    @property
    def full_examples(self) -> int:
        """Examples of every full check of the run, the final re-check's too."""
        return self.run["config"].get("full_examples", 200)

    def longest_check_s(self) -> float:
        return self.pool.longest_check_s if self.pool is not None else 0.0

    def checks_left(self) -> bool:
        return self.pool is not None and self.pool.fastest() is not None and \
            self.pool.fastest().cycles < self.proved_cycles

    def dispatch(self) -> None:
        if self.pool is None:
            return
        self.pool.make_way()
        for moot in self.pool.dispatch(self.proved_cycles):
            self._settle(moot, ACCEPTED, "a faster kernel was proved before its check")
        undecided = self.pool.undecided()
        self.stats.checking = len(undecided)
        self.stats.fastest_found = undecided[0].cycles if undecided else None

    def _announce(self) -> None:
        """Tell every chain the best to beat: the fastest kernel proved or waiting (which
        may be slower than the last one announced, when that one was refuted)."""
        targets = [(self.proved_cycles, self.proved_text, True, self.proved_plan)]
        fastest = self.pool.fastest() if self.pool is not None else None
        if fastest is not None:
            plan = [] if fastest.event is None else fastest.event.get("plan")
            targets.append((fastest.cycles, fastest.text, False, plan))
        target = min(targets, key=lambda target: target[0])
        if target[0] == math.inf:
            return
        if self.announced != target[:2]:
            self.announced = target[:2]
            self.restart_best = (target[1], target[3])
            self.executor.send(None, ("best", target[1], target[0], target[2], target[3]))

    # -- messages ---------------------------------------------------------------------
    def take(self, message: tuple) -> None:
        kind = message[0]
        if kind == "events":
            self.log.write_many(message[2])
            for event in message[2]:
                self.stats.add(event)
        elif kind == "candidate":
            _, chain, check_id, text, cycles, seed, event = message
            self._candidate(Pending(cycles, check_id, chain, text, seed, event, event["t"]))
        elif kind == "verdict":
            self._verdict(*message[1:])
        elif kind == "best":  # proved on the chain's path, or proved earlier
            _, chain, text, cycles, facts, plan = message
            self._proved(text, cycles, facts, chain, plan=plan)
            if self.pool is not None:
                self._announce()
        elif kind == "state":
            self.chain_states[message[1]] = message[2]
        elif kind == "temper":  # a chain's state, offered for an exchange on the ladder
            for chain, reply in self.tempering.report(message[1], message[2]):
                self.executor.send(chain, reply)
        elif kind == "restart_due":  # the best, or another chain's state
            self.executor.send(*self.tempering.restart_point(message[1], self.restart_best))
        elif kind == "restarted":  # its process or node died: it goes on from its last state
            _, chain, why = message
            t = round(self.stats.elapsed(), 4)
            self.log.write({"t": t, "event": "chain_restarted", "chain": chain, "why": why})
            self.stats.restarts += 1
        elif kind == "worker_restarted":  # a check worker's process died and came back
            _, worker, why = message
            self.log.write({"t": round(self.stats.elapsed(), 4), "event": "worker_restarted",
                            "worker": worker, "why": why})
        elif kind == "warmed":  # a worker's CPU seconds preparing the run's inputs
            self.recheck_s = max(self.recheck_s, message[2])
        elif kind in ("error", "check_error"):
            who = "chain" if kind == "error" else "check worker"
            self.stats.errors.append(f"{who} {message[1]}: {message[2]}")

    def _log(self, event: dict) -> None:
        self.log.write(event)
        self.stats.add(event)

    def _candidate(self, pending: Pending) -> None:
        fastest = self.pool.fastest()
        if pending.cycles >= min(self.proved_cycles,
                                 fastest.cycles if fastest else math.inf):
            # another chain got there first: the chain moved to it, nothing more
            self._settle(pending, ACCEPTED, "a kernel as fast was already found")
            return
        facts = self.proofs.earlier(parse(pending.text, self.machine))
        if facts is not None:  # the same values as a kernel proved before: no new check
            pending.event.update(outcome=BEST, proved_earlier=facts["value_graph"])
            pending.event.pop("check", None)
            self._log(pending.event)
            self._proved(pending.text, pending.cycles, facts, pending.chain, pending.t,
                         pending.event.get("plan"))
            self._announce()
            return
        self.pool.add(pending)
        self._announce()

    def _verdict(self, worker: int, check_id: str, facts: dict, interrupted: bool,
                 path: str | None) -> None:
        pending = self.pool.finish(worker, check_id, interrupted)
        if pending is None:
            return
        if check_id == START:
            self._start_verdict(pending, facts, interrupted)
        elif facts["equivalent"]:
            pending.event["outcome"] = BEST
            self._log(pending.event)
            facts = self.proofs.record(parse(pending.text, self.machine), facts)
            self._proved(pending.text, pending.cycles, facts, pending.chain, pending.t,
                         pending.event.get("plan"))
        elif interrupted:
            self._cut(pending)
        else:
            self._settle(pending, WRONG, facts.get("description"), counterexample=True)
            self.executor.send(pending.chain, ("refuted", path))
        self._announce()

    def _start_verdict(self, pending: Pending, facts: dict, interrupted: bool) -> None:
        if interrupted:
            best = read_json(self.rd / BEST_JSON)
            if best.get("source") == SOURCE_START:
                write_json(self.rd / BEST_JSON, {**best, "proof": PROOF_UNFINISHED})
        elif not facts["equivalent"]:
            self.fatal = (f"the starting kernel is not equivalent to spec {self.spec.name}: "
                          f"{facts.get('description')}",
                          "fix the --init kernel" if self.run.get("init")
                          else "this is a lowering bug: please report it")
        elif self.proved_cycles == math.inf:
            write_best(self.rd, parse(pending.text, self.machine), self.spec, facts,
                       self.machine, SOURCE_START, plan=[])
            self.proved_cycles = pending.cycles
            self.tuning.best(self.rd)

    def _proved(self, text: str, cycles: int, facts: dict, chain: int,
                t: float | None = None, plan: list | None = None) -> None:
        if cycles >= self.proved_cycles:
            return
        t = self.stats.elapsed() if t is None else t
        write_best(self.rd, parse(text, self.machine), self.spec, facts, self.machine,
                   SOURCE_SEARCH, t, chain, plan=plan)
        self.tuning.best(self.rd)
        self.proved_cycles, self.proved_text, self.proved_plan = cycles, text, plan
        self.stats.best_cycles = cycles
        self.stats.keep_best(text, cycles, facts, chain, plan)
        if self.pool is None:
            self.restart_best = (text, plan)
            self.executor.send(None, ("best", text, cycles, True, plan))

    def _settle(self, pending: Pending, outcome: str, error: str | None,
                counterexample: bool = False) -> None:
        if pending.event is None:
            return  # the starting kernel's check has no event
        pending.event.update(outcome=outcome, error=error)
        pending.event.pop("check", None)
        if counterexample:
            pending.event["counterexample"] = True
        self._log(pending.event)

    def _cut(self, pending: Pending, why: str = "its full check did not finish before "
             "the run ended") -> None:
        self.unproved.append({"cycles": pending.cycles, "text": pending.text,
                              "chain": pending.chain, "t": pending.t, "why": why})
        self._settle(pending, UNPROVED, why)

    # -- the end ----------------------------------------------------------------------
    def checkpoint(self, finished: bool, pending: list[Pending] | None = None,
                   stopped_by: str | None = None) -> None:
        """checkpoint.json: the chains' states and the candidates still undecided (a
        resumed run checks them first)."""
        waiting = self.pool.undecided() if pending is None and self.pool else pending or []
        save_checkpoint(self.rd, {
            "elapsed_s": round(self.stats.elapsed(), 3), "proposals": self.stats.proposals,
            "chains": [self.chain_states[i] for i in sorted(self.chain_states)],
            "finished": finished, "best_cycles": self.stats.best_cycles,
            "tokens": self.stats.tokens, "cost_usd": self.stats.cost_usd,
            "bests": self.stats.bests, "stopped_by": stopped_by,
            "tempering": self.tempering.state() if self.tempering else None,
            "pending": [p.to_json() for p in waiting if p.check_id != START]})
        self.log.flush()
        self.tuning.stats(self.stats.moves)
        self.last_checkpoint = time.time()

    def finish(self, why: str, signum: int | None, baseline_text: str) -> RunResult:
        """Settle every undecided candidate, checkpoint, re-check the best (within the
        budget) and name a faster unproved kernel."""
        undecided = self.pool.undecided() if self.pool is not None else []
        interrupted = why == "interrupted"
        for pending in undecided:
            if pending.check_id == START:
                self._start_verdict(pending, {}, True)
            elif pending.cycles >= self.proved_cycles:
                self._settle(pending, ACCEPTED, "a faster kernel was proved before its "
                             "check")
            elif not interrupted:  # an interrupted run keeps them for --resume
                self._cut(pending, "the run ended before its full check finished")
        keep = [p for p in undecided if interrupted and p.check_id != START
                and p.cycles < self.proved_cycles]
        self.checkpoint(finished=not interrupted, pending=keep, stopped_by=why)
        if interrupted:
            self.unproved += [{"cycles": p.cycles, "text": p.text, "chain": p.chain, "t": p.t,
                               "why": "the run was interrupted before its full check "
                               "finished"} for p in keep]
        else:
            left = self.deadline - time.time()
            note = recheck_best(self.rd, self.spec, self.machine, self.run["seed"],
                                baseline_text, self.stats.bests,
                                deadline=time.monotonic() + max(0.0, left),
                                examples=self.full_examples)
            if note:
                self.stats.notes.append(note)
                self.stats.best_cycles = read_json(self.rd / BEST_JSON)["cycles"]
        self.tuning.end(self.rd, why)
        return self._result(why, signum)

    def _result(self, why: str, signum: int | None) -> RunResult:
        best = read_json(self.rd / BEST_JSON)
        found = min(self.unproved, key=lambda u: u["cycles"], default=None)
        record = None
        if found is not None and found["cycles"] < best["cycles"]:
            record = write_unproved(self.rd, found, best["cycles"])
        lowering = best.get("proof") == PROOF_LOWERING
        if best.get("proof") is not None and not lowering:
            self.stats.notes.append("the starting kernel's own full check did not finish "
                                    "within the budget: best.leir is unproved")
        untested = untested_sides(best.get("verdict"), best.get("recheck"))
        if untested:
            self.stats.notes.append(untested_note(untested))
        run, stats = self.run, self.stats
        base, roof = run["baseline_cycles"], run["roofline_cycles"]
        return RunResult(
            str(self.rd), run["spec"], self.machine.name, base, best["cycles"],
            round(base / best["cycles"], 4), roof, round(roof / best["cycles"], 4),
            str(self.rd / BEST_LEIR), stats.proposals, stats.accepted,
            lowering or (best.get("verdict") is not None and bool(best["verdict"]["equivalent"])),
            round(stats.elapsed(), 2), run["budget_s"], why, stats.tokens,
            round(stats.cost_usd, 6), list(stats.errors), list(stats.notes),
            record["cycles"] if record else None, record["path"] if record else None, signum,
            stats.start)


def run_betas(run: dict) -> list[float]:
    """The ladder of a run, from its config (a run.json older than tempering: one beta)."""
    config = run["config"]
    beta = config.get("beta", ChainConfig.beta)
    return beta_ladder(beta, config.get("hottest_beta", beta), run["chains"])


def _quotas(max_proposals, chains: int) -> list[int | None]:
    if not max_proposals:
        return [None] * chains
    return [max_proposals // chains + (1 if i < max_proposals % chains else 0)
            for i in range(chains)]

