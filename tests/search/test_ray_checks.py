"""The check pool's workers as Ray actors (RayCheckWorkers, CheckActor), without a
cluster: a fake Ray runs each actor in this process, call by call. A verdict and its
counterexample reach the driver, a lost actor is started again and its candidate
checked anew, a failing check is reported and its candidate cut, and an idle actor
prepares the shared inputs. The real cluster runs them in tests/search/test_ray.py."""

import multiprocessing as mp
import pickle
import queue
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from stochopt import load_spec
from stochopt.backend.cost import cost
from stochopt.leir import parse, render
from stochopt.lower import lower
from stochopt.machine import MNCORE2
from stochopt.search.checks import CheckerJob, CheckPool, Pending
from stochopt.search.ray_executor import RayCheckWorkers, import_paths
from stochopt.verify.replay import load_inputs

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "specs" / "softmax.py"
FAST = (ROOT / "docs" / "examples" / "softmax_fast.leir").read_text().replace(
    "def kernel(", "def softmax(")
WRONG = FAST.replace("store(e * r)", "store(e)")  # forgets to normalise


class RayError(Exception):
    pass


class RayActorError(RayError):
    pass


class Ref:
    """A call already made: its value, or the exception it raised."""

    def __init__(self, call) -> None:
        try:
            self.value, self.error = call(), None
        except Exception as e:  # noqa: BLE001 - handed back by get(), as Ray does
            self.value, self.error = None, RayError(str(e))


class FakeRay:
    """Enough of Ray for RayCheckWorkers: actors made and called in this process."""

    exceptions = SimpleNamespace(RayError=RayError, RayActorError=RayActorError)

    def __init__(self, cpus: int = 2) -> None:
        self.actors: list = []
        self.killed: list = []
        self.cpus = cpus
        self.asked: list[float] = []   # the CPUs each actor asked for

    def remote(self, cls):
        ray = self

        class Handle:
            def __init__(self, instance) -> None:
                self.instance, self.dead = instance, False
                for name in ("check", "give_way", "warm_up"):
                    setattr(self, name, SimpleNamespace(remote=self._caller(name)))

            def _caller(self, name):
                def call(*args):
                    if self.dead:
                        ref = Ref(lambda: None)
                        ref.error = RayActorError("the actor died")
                        return ref
                    return Ref(lambda: getattr(self.instance, name)(*args))
                return call

        class Options:
            @staticmethod
            def options(**kwargs):
                assert kwargs["max_concurrency"] == 2 and kwargs["scheduling_strategy"]
                ray.asked.append(kwargs["num_cpus"])
                return SimpleNamespace(remote=lambda *args: ray._made(Handle(cls(*args))))

        return Options

    def _made(self, handle):
        self.actors.append(handle)
        return handle

    def wait(self, refs, num_returns, timeout):
        return list(refs), []

    def get(self, ref):
        if ref.error is not None:
            raise ref.error
        return ref.value

    def cluster_resources(self):
        return {"CPU": self.cpus}

    def kill(self, actor):
        self.killed.append(actor)


@pytest.fixture
def workers(tmp_path):
    made = []

    def make(examples: int = 5, cpus: int = 2, chains: int = 1):
        ray = FakeRay(cpus)
        executor = SimpleNamespace(ray=ray, outbox=mp.get_context("spawn").Queue(),
                                   run_dir=tmp_path, spec_text=SPEC.read_text(),
                                   import_paths=import_paths(),
                                   jobs={i: None for i in range(chains)})
        baseline = render(lower(load_spec(SPEC)))
        jobs = [CheckerJob(0, str(tmp_path), str(SPEC), None, MNCORE2, baseline, examples,
                           time.time() + 600, 7)]
        pickle.dumps(jobs[0])  # it travels to the actor
        where = RayCheckWorkers(executor, jobs)
        pool = CheckPool(None, jobs, executor.outbox, where)
        made.append(pool)
        return pool, executor.outbox, ray

    yield make
    for pool in made:
        pool.close()


def _pending(text: str, check_id: str) -> Pending:
    return Pending(cost(parse(text)).cycles, check_id, 0, text, 3, {"outcome": "checking"})


def _messages(outbox, warmed: bool = False) -> list[tuple]:
    """What reached the driver, in order; an actor's ``warmed`` (sent whenever its few
    inputs are ready) only when asked for."""
    out = []
    while True:
        try:
            message = outbox.get(timeout=0.5)
        except queue.Empty:
            return out
        if warmed or message[0] != "warmed":
            out.append(message)


@pytest.mark.slow  # two full checks
def test_a_verdict_and_its_counterexample_reach_the_driver(workers, tmp_path):
    pool, outbox, _ = workers()
    pool.add(_pending(WRONG, "0-0"))
    pool.dispatch(float("inf"))  # sends the check; the fake runs it at once
    pool.dispatch(float("inf"))  # collects it
    (kind, worker, check_id, facts, interrupted, path), = _messages(outbox)
    assert (kind, check_id, interrupted, facts["equivalent"]) == ("verdict", "0-0", False,
                                                                  False)
    assert facts["seed"] == 7  # the run's seed, whatever the candidate's
    assert Path(path).parent == tmp_path / "counterexamples"
    assert set(load_inputs(path, load_spec(SPEC))) == {"x"}
    assert pool.finish(worker, check_id, interrupted).check_id == "0-0"


@pytest.mark.slow
def test_a_lost_actor_is_started_again_and_its_candidate_checked_anew(workers):
    pool, outbox, ray = workers()
    pool.add(_pending(FAST, "0-0"))
    ray.actors[0].dead = True  # its node goes away
    pool.dispatch(float("inf"))
    pool.dispatch(float("inf"))
    assert len(ray.actors) == 2  # a new actor for worker 0
    assert ray.asked == [1, 0]   # a spare CPU at first; started again, a shared one
    assert pool.running[0].check_id == "0-0"  # sent again, to the new actor
    pool.dispatch(float("inf"))
    verdicts = [m for m in _messages(outbox) if m[0] == "verdict"]
    assert [(m[2], m[3]["equivalent"]) for m in verdicts] == [("0-0", True)]


def test_a_check_actor_takes_no_cpu_a_chain_asked_for(workers):
    """Ray reports a chain's CPU as free until the chain is placed: counted from what
    the chains asked for, a check actor never waits for a CPU a chain took (it did,
    for the whole run, and the run proved nothing)."""
    _, _, ray = workers(cpus=2, chains=2)
    assert ray.asked == [0]
    _, _, ray = workers(cpus=4, chains=2)
    assert ray.asked == [1]


def test_a_check_that_fails_is_reported_and_its_candidate_cut(workers):
    pool, outbox, _ = workers()
    pool.add(Pending(1, "0-0", 0, "not a kernel", 3, {"outcome": "checking"}))
    pool.dispatch(float("inf"))
    pool.dispatch(float("inf"))
    messages = _messages(outbox)
    assert messages[0][0] == "check_error"
    assert messages[1][:3] == ("verdict", 0, "0-0") and messages[1][4] is True


def test_an_idle_actor_prepares_the_shared_inputs_and_says_what_it_cost(workers):
    """What preparing them cost reaches the supervisor, which keeps that much of the
    budget for the final re-check: on the driver, it prepares its inputs itself."""
    pool, outbox, ray = workers(examples=12)
    for _ in range(200):  # half a second of work per call; softmax's 12 inputs are few
        pool.dispatch(float("inf"))
        if pool.workers.warm[0]:
            break
    checker = ray.actors[0].instance.checker
    assert pool.workers.warm[0] and checker.warm
    assert checker.context.misses >= 12 - 2 - 1  # the fixed and drawn inputs, prepared
    (kind, worker, cpu_s), = _messages(outbox, warmed=True)
    assert (kind, worker) == ("warmed", 0)
    assert cpu_s == checker.warm_cpu_s > 0
