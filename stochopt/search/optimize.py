"""stochopt.optimize(): the main job, usable from a notebook or from the CLI."""

from __future__ import annotations

import os
import platform
import shutil
import time
from pathlib import Path

from stochopt.backend.cost import cost, roofline_of_kernel
from stochopt.durations import parse_duration
from stochopt.errors import StochoptError
from stochopt.leir.parser import parse
from stochopt.leir.render import render
from stochopt.machine import load_machine, run_machine
from stochopt.rundir import (
    BASELINE_LEIR,
    BEST_LEIR,
    CHECKPOINT_JSON,
    PROOF_LOWERING,
    RUN_JSON,
    SOURCE_START,
    SPEC_PY,
    START_INIT,
    START_LOWERING,
    atomic_write,
    copy_spec,
    new_run_dir,
    read_json,
    write_json,
)
from stochopt.search.best_kernel import write_best
from stochopt.search.chain import ChainConfig, check_search_config
from stochopt.search.driver import RunResult, load_checkpoint, save_checkpoint
from stochopt.search.proposers import check_proposer
from stochopt.search.supervisor import supervise
from stochopt.search.tempering import beta_ladder
from stochopt.spec import load_spec
from stochopt.transform.weights import check_move_weights
from stochopt.tuning.runs import prepare as prepare_tuning
from stochopt.tuning.runs import starting_point, with_examples
from stochopt.verify.check import check
from stochopt.verify.screening import ScreeningSet

MAX_RAY_CHAINS = 1024  # chains on a cluster (64 on one machine)


def optimize(spec_path: str | None = None, *, budget: str | float = "10m",
             proposer: str = "mixed", chains: int | None = None, seed: int = 0,
             init: str | None = None, machine: str = "mncore2", run_dir: str | None = None,
             resume: str | None = None, max_proposals: int | None = None,
             max_cost: float | None = None, name: str | None = None, llm: dict | None = None,
             progress=None, config: ChainConfig | None = None,
             check_workers: int | None = None, started: float | None = None,
             settings: dict | None = None, ray: str | None = None,
             db: str | Path | bool | None = None, cold: bool = False) -> RunResult:
    """Search for a faster kernel for a spec; return what was found (see RunResult).

    The budget is wall time from this call to the return, setup and final checks
    included. ``check_workers`` run full checks beside the chains (default: one per two
    chains, at least one; processes here, or Ray actors on the cluster with ``ray``);
    0 runs them on the chains' path, which makes a
    seeded one-chain run reproducible. ``progress`` is called with a stats dict a few
    times a second (the CLI draws it). ``started`` (time.time()) is when the budget's
    clock started: now by default; the CLI passes its process's start. ``settings`` (each
    flag's value and where it came from) is recorded in run.json. ``ray`` runs the
    chains on a Ray cluster: auto, local, ray://HOST:PORT or HOST:PORT (docs/scale.md);
    a resumed run uses the cluster it was started with unless ``ray`` names another
    (or "none": this machine's processes). ``db``: the tuning database (None: the
    default file, False: none; docs/database.md): the run starts from its best kernel
    for the spec and machine unless ``cold``, or from plans of similar specs, and
    writes every new proved best to it."""
    from stochopt.search.ray_executor import check_ray_address, cluster_cpus
    started = time.time() if started is None else started
    ray = None if ray is None else check_ray_address(ray)
    if resume is not None:
        return _resume(Path(resume), progress=progress, started=started, ray=ray)
    ray = None if ray == "none" else ray
    if spec_path is None:
        raise StochoptError("optimize needs a spec file (or resume=RUN_DIR)")
    budget_s = parse_duration(budget)
    if chains is None:  # one per CPU: of this machine, or of the cluster
        chains = (os.cpu_count() or 1) if ray is None else cluster_cpus(ray)
    most = 64 if ray is None else MAX_RAY_CHAINS
    if not isinstance(chains, int) or isinstance(chains, bool) or not 1 <= chains <= most:
        raise StochoptError(f"chains must be between 1 and {most}, got {chains!r}")
    if check_workers is None:  # beside the chains: on this machine, or on the cluster
        check_workers = max(1, min(chains // 2, 64 if ray is not None else
                                   os.cpu_count() or 1))
    if not isinstance(check_workers, int) or isinstance(check_workers, bool) or \
            not 0 <= check_workers <= 64:
        raise StochoptError(f"check_workers must be between 0 and 64, got {check_workers!r}")
    if max_proposals is not None and (not isinstance(max_proposals, int) or max_proposals < 1):
        raise StochoptError(f"max_proposals must be a positive integer, got {max_proposals!r}")
    if max_cost is not None and not max_cost > 0:
        raise StochoptError(f"max_cost must be positive, got {max_cost!r}")
    from stochopt.llm.options import llm_options
    llm = llm_options(llm, max_cost)  # defaults filled, every value and template checked
    arms = check_proposer(proposer, llm_available=llm is not None)
    config = config or ChainConfig()
    config.move_weights = check_move_weights(config.move_weights)
    check_search_config(config)
    m = load_machine(machine)
    spec = load_spec(spec_path, name)
    # the run directory comes first, before the slow setup: a run killed at any moment
    # leaves something to resume, and the user sees where the run goes at once
    existed = run_dir is not None and Path(run_dir).exists()
    rd = new_run_dir(spec.name, name=run_dir)
    copy_spec(spec_path, rd)
    run = {"spec": spec.name, "spec_path": str(Path(spec_path).resolve()), "name": name,
           "machine": m.summary(), "machine_name": m.name, "budget_s": budget_s,
           "proposer": proposer, "arms": arms, "chains": chains,
           "check_workers": check_workers, "seed": seed,
           "init": str(Path(init).resolve()) if init else None,
           "max_proposals": max_proposals, "max_cost": max_cost, "config": vars(config),
           "betas": beta_ladder(config.beta, config.hottest_beta, chains),
           "llm": _public_llm(llm), "roofline_cycles": None, "baseline_cycles": None,
           "bound_cycles": None, "started": started, "versions": _versions(),
           "host": platform.node(), "settings": settings, "ray": ray}
    prepare_tuning(run, spec, m, db=db or None, use=db is not False, cold=cold)
    write_json(rd / RUN_JSON, run)
    try:
        state, start_text, baseline_text = _setup(rd, run, spec, m, started)
    except StochoptError:
        _remove_run_dir(rd, keep_dir=existed)  # nothing was searched: leave nothing behind
        raise
    except KeyboardInterrupt:
        raise SetupInterrupted(rd) from None
    return supervise(rd, run, state, start_text, baseline_text,
                     with_examples(rd, run, llm, m), progress, started, 0.0)


class SetupInterrupted(KeyboardInterrupt):
    """Ctrl-C while the run was being set up: its directory is there to resume."""

    def __init__(self, run_dir: Path) -> None:
        super().__init__(str(run_dir))
        self.run_dir = run_dir


def _setup(rd: Path, run: dict, spec, m, started: float) -> tuple[dict, str, str]:
    """Lower the spec, screen the starting kernel, write what the search starts from.

    The starting kernel's full check is not done here: it is the first job of the check
    pool (or, with no check workers, done here within the budget)."""
    baseline, start = _starting_kernels(spec, m, run["init"])
    screening = ScreeningSet(spec, baseline, m, ChainConfig().screening_inputs, run["seed"])
    # the tuning database's best kernel for this spec (run["init"] then names it), or
    # plans and move weights from similar specs (in run["config"])
    warm = starting_point(rd, run, spec, m, baseline, screening, started)
    if warm is not None:
        start = warm[0]
    if screening.error(start) > 0:
        _fail_start("it fails a screening input", bool(run["init"]), spec.name)
    baseline_text, start_text = render(baseline, m), render(start, m)
    roof, bound = _roofline(spec, m, baseline)
    run.update(roofline_cycles=roof, bound_cycles=bound,
               baseline_cycles=cost(baseline, m).cycles)
    atomic_write(rd / BASELINE_LEIR, baseline_text)
    if run["init"] is None:
        # the start is the spec's own lowering: the baseline every full check measures
        # candidates against. Checking it against itself would prove nothing about the
        # search and, on a large spec, take the first seconds of a short run's one check
        # worker (or the chain's path) away from the faster kernels the run finds.
        write_best(rd, start, spec, None, m, SOURCE_START, proof=PROOF_LOWERING, plan=[],
                   plan_start=START_LOWERING)
    elif warm is not None:  # proved by the run that found it (or checked again just now)
        write_best(rd, start, spec, warm[1], m, SOURCE_START, plan=[], plan_start=START_INIT)
    elif run["check_workers"] == 0:
        deadline = time.monotonic() + run["budget_s"] - (time.time() - started)
        verdict = check(start, spec, machine=m, baseline=baseline, seed=run["seed"],
                        deadline=deadline)
        if not verdict.equivalent and not verdict.interrupted:
            _fail_start(verdict.counterexample.describe(), bool(run["init"]), spec.name)
        write_best(rd, start, spec, None if verdict.interrupted else verdict, m, SOURCE_START,
                   plan=[], plan_start=START_INIT)
    else:
        write_best(rd, start, spec, None, m, SOURCE_START, plan=[],  # proved by the pool, soon
                   plan_start=START_INIT)
    write_json(rd / RUN_JSON, run)
    state = {"elapsed_s": round(time.time() - started, 3), "proposals": 0, "chains": [],
             "finished": False, "best_cycles": cost(start, m).cycles, "tokens": 0,
             "cost_usd": 0.0}
    save_checkpoint(rd, state)
    return state, start_text, baseline_text


def _fail_start(why: str, init: bool, spec_name: str):
    raise StochoptError(f"the starting kernel is not equivalent to spec {spec_name}: {why}",
                        hint="fix the --init kernel" if init else
                        "this is a lowering bug: please report it")


def _remove_run_dir(rd: Path, keep_dir: bool) -> None:
    shutil.rmtree(rd, ignore_errors=True)
    if keep_dir:
        rd.mkdir(parents=True, exist_ok=True)


def _starting_kernels(spec, machine, init: str | None):
    from stochopt.lower.lowering import lower

    try:
        baseline = lower(spec, machine)
    except StochoptError:
        if init is None:
            raise
        baseline = None
    if init is None:
        return baseline, baseline
    try:
        text = Path(init).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise StochoptError(f"cannot read --init kernel {init}: {e}") from None
    start = parse(text, machine)
    return (baseline or start), start


def _roofline(spec, machine, baseline) -> tuple[int, int]:
    """The spec's roofline and reachable bound (the baseline's, if the spec cannot be
    traced)."""
    try:
        from stochopt.lower.roofline import spec_roofline
        roof = spec_roofline(spec, machine)
        return roof.cycles, roof.bound_cycles
    except StochoptError:
        from stochopt.backend.bound import bound_of_kernel
        return roofline_of_kernel(baseline, machine), bound_of_kernel(baseline, machine)


def _public_llm(llm: dict | None) -> dict | None:
    if not llm:
        return None
    return {k: v for k, v in llm.items() if k != "api_key"}


def _versions() -> dict:
    import hypothesis
    import numpy

    from stochopt.version import __version__
    return {"stochopt": __version__, "numpy": numpy.__version__,
            "hypothesis": hypothesis.__version__, "python": platform.python_version()}


def _resume(rd: Path, progress, started: float, ray: str | None = None) -> RunResult:
    if not (rd / RUN_JSON).is_file():
        raise StochoptError(f"{rd} is not a run directory (no run.json)")
    run = read_json(rd / RUN_JSON)
    if ray is not None:  # the same run on another cluster, or on this machine ("none")
        run["ray"] = None if ray == "none" else ray
        write_json(rd / RUN_JSON, run)
    finished = (rd / CHECKPOINT_JSON).is_file() and load_checkpoint(rd).get("finished")
    if not finished and run.get("baseline_cycles") is None:  # stopped during its setup
        m = run_machine(run)
        spec = load_spec(rd / SPEC_PY, run.get("name"))
        state, start_text, baseline_text = _setup(rd, run, spec, m, started)
        return supervise(rd, run, state, start_text, baseline_text,
                         with_examples(rd, run, run.get("llm"), m), progress, started, 0.0)
    state = load_checkpoint(rd)
    if finished:
        raise StochoptError(f"run {rd} already finished: it has nothing left to resume",
                            hint="start a new run from its best kernel: stochopt optimize "
                            f"{rd / 'spec.py'} --init {rd / 'best.leir'} --budget 10m")
    if state["elapsed_s"] >= run["budget_s"]:
        raise StochoptError(f"run {rd} has no budget left")
    return supervise(rd, run, state, (rd / BEST_LEIR).read_text(),
                     (rd / BASELINE_LEIR).read_text(),
                     with_examples(rd, run, run.get("llm"), run_machine(run)), progress,
                     started, state["elapsed_s"])
