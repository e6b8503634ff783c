"""The path contract: every candidate made by rules carries its plan from the run's start
kernel, the chain follows it through accepted candidates, events that reach a full check
name it, best.json records it, restarts and checkpoints keep it; and the plan replays."""

import json
import queue
import random

import pytest

from stochopt import load_spec
from stochopt.backend.cost import cost
from stochopt.leir.parser import parse
from stochopt.leir.render import render
from stochopt.lower import lower
from stochopt.machine import MNCORE2
from stochopt.search.chain import ChainConfig
from stochopt.search.chain_run import ChainRun
from stochopt.search.driver import Heard, _hear
from stochopt.transform.plan import Step, apply_plan, plan_from_json, plan_to_json
from tests.search.test_fixpoint_first import ROOT, make_chain


@pytest.fixture(scope="module")
def softmax():
    spec = load_spec(ROOT / "specs" / "softmax.py")
    return spec, lower(spec)


def chain_of(softmax, arms, seed=0, **config) -> ChainRun:
    run = make_chain(softmax, arms, seed, **config)
    run.checks.checks_elsewhere = True  # submissions are queued, not checked here
    return run


def same_kernel(a, b) -> bool:
    """The same ops, types, layouts and order (names and line numbers aside)."""
    return a.terms == b.terms and [n.args for n in a.nodes] == [n.args for n in b.nodes] \
        and a.output == b.output


def replays_to(start, path, kernel) -> bool:
    result = apply_plan(start, path, MNCORE2)
    return result.stopped is None and same_kernel(result.kernel, kernel)


def test_rewrites_carry_the_plan_that_replays_to_the_current_kernel(softmax):
    """The opening's descent and every accepted rewrite extend the path, and the path
    replays from the start to the chain's kernel; a plan-carrying event names it."""
    _, baseline = softmax
    run = chain_of(softmax, ["rewrite"], seed=2, beta=2.0)  # hot: it takes slower rewrites
    planned = lengths = 0
    for _ in range(50):
        event, _, _ = run.step()
        if event["move"] == "fixpoint":
            assert run.current_path and len(run.current_path) >= 2
        if event["outcome"] in ("checking", "best"):
            assert event["plan"] == plan_to_json(run.current_path)
            sub = run.checks.submissions[-1]
            assert replays_to(baseline, plan_from_json(event["plan"]), sub.kernel)
            planned += 1
        if event["outcome"] != "rejected" and event["move"] != "fixpoint":
            lengths += len(run.current_path) > 2  # a rewrite past the opening's
        run.checks.submissions.clear()
    assert planned >= 1 and lengths >= 1
    assert replays_to(baseline, run.current_path, run.current)


def test_a_blind_mutation_makes_the_path_unknown(softmax):
    run = chain_of(softmax, ["mutate"], seed=1, fixpoint_first=False)
    for _ in range(200):
        event, _, _ = run.step()
        run.checks.submissions.clear()
        if event["outcome"] in ("accepted", "checking", "best"):
            break
    assert event["outcome"] in ("accepted", "checking", "best")
    assert run.current_path is None and "plan" not in event


def test_a_checkpoint_keeps_the_paths(softmax):
    run = chain_of(softmax, ["rewrite"], seed=2)
    for _ in range(10):
        run.step()
        run.checks.submissions.clear()
    state = json.loads(json.dumps(run.state()))  # as checkpoint.json holds it
    again = chain_of(softmax, ["rewrite"], seed=5)
    again.restore(state)
    assert again.current_path == run.current_path and again.best_path == run.best_path
    assert same_kernel(again.current, run.current)
    old = {k: v for k, v in state.items() if k not in ("current_path", "best_path")}
    again.restore(old)  # a checkpoint from before paths: unknown, not a crash
    assert again.current_path is None


def test_a_restart_from_the_global_best_takes_its_plan(softmax):
    _, baseline = softmax
    run = chain_of(softmax, ["rewrite"], seed=2)
    path = [Step("multiply_by_reciprocal", 0)]
    best = apply_plan(baseline, path, MNCORE2).kernel
    inbox: queue.Queue = queue.Queue()
    inbox.put(("best", render(best), cost(best).cycles, True, plan_to_json(path)))
    heard = Heard()
    _hear(run, inbox, heard, MNCORE2)
    assert heard.best == (render(best), plan_to_json(path)) and run.best_path == path
    run.restart_from(parse(heard.best[0]), plan_from_json(heard.best[1]))
    assert run.current_path == path and same_kernel(run.current, best)


@pytest.mark.slow  # a real run
def test_best_json_records_the_plan_that_replays_to_best_leir(tmp_path, softmax):
    from stochopt.search import optimize
    spec, baseline = softmax
    run_dir = tmp_path / "run"
    optimize(str(ROOT / "specs" / "softmax.py"), budget="60s", chains=1, seed=0,
             proposer="rewrite", max_proposals=6, run_dir=str(run_dir), check_workers=0,
             config=ChainConfig(full_examples=8, escape_kernels=300))
    best = json.loads((run_dir / "best.json").read_text())
    assert best["plan_start"] == "lowering" and best["source"] == "search"
    kernel = parse((run_dir / "best.leir").read_text())
    assert replays_to(baseline, plan_from_json(best["plan"]), kernel)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    bests = [e for e in events if e.get("outcome") == "best"]
    assert bests and bests[-1]["plan"] == best["plan"]
    state = json.loads((run_dir / "checkpoint.json").read_text())
    assert "current_path" in state["chains"][0]


@pytest.mark.slow  # a real run
def test_a_run_from_an_init_kernel_starts_its_plans_there(tmp_path, softmax):
    from stochopt.search import optimize
    _, baseline = softmax
    init = apply_plan(baseline, [Step("multiply_by_reciprocal", 0)], MNCORE2).kernel
    (tmp_path / "init.leir").write_text(render(init))
    run_dir = tmp_path / "run"
    optimize(str(ROOT / "specs" / "softmax.py"), budget="60s", chains=1, seed=0,
             proposer="rewrite", max_proposals=1, run_dir=str(run_dir), check_workers=0,
             init=str(tmp_path / "init.leir"),
             config=ChainConfig(full_examples=8, fixpoint_first=False))
    best = json.loads((run_dir / "best.json").read_text())
    assert best["plan_start"] == "init"
    kernel = parse((run_dir / "best.leir").read_text())
    assert replays_to(init, plan_from_json(best["plan"]), kernel)


def test_the_rewrite_proposer_draws_as_before(softmax):
    """Naming the step changed no draw: propose_rewrite and the rewrite arm agree."""
    from stochopt.transform.plan import propose_rewrite
    _, baseline = softmax
    run = chain_of(softmax, ["rewrite"], fixpoint_first=False)
    for seed in range(12):
        cand = run.proposer.propose(baseline, random.Random(seed))
        try:
            name, out = propose_rewrite(baseline, random.Random(seed), MNCORE2)
        except Exception:  # noqa: BLE001 - refused: the arm reports it as invalid
            assert cand.outcome == "invalid"
            continue
        if out is None:
            continue  # declined: the arm draws again
        assert cand.move == name and same_kernel(cand.kernel, out)
        assert cand.steps and cand.steps[0].rule == name
