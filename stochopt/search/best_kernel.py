"""best.leir and best.json, the run's commit point: written when the run starts, on each
proved best, for a faster kernel whose check did not finish (unproved.leir), and by the
final re-check of the best. The schema is stochopt/rundir.py's."""

from __future__ import annotations

from pathlib import Path

from stochopt.backend.cost import cost
from stochopt.leir.parser import parse
from stochopt.leir.render import render
from stochopt.rundir import (
    BEST_JSON,
    BEST_LEIR,
    CHECK_BANK,
    COUNTEREXAMPLES,
    PROOF_PENDING,
    SOURCE_SEARCH,
    SOURCE_START,
    START_LOWERING,
    UNPROVED_LEIR,
    atomic_write,
    read_json,
    write_json,
)
from stochopt.verify.bank import CheckContext
from stochopt.verify.check import certificate, check

RECHECK_SEED_STEP = 104729  # the final re-check's seed: the run's plus this (a prime)


def recheck_seed(run_seed: int) -> int:
    """The seed of the final re-check of a run with this seed: fresh inputs, the same
    for every session of the run (idle check workers prepare them ahead)."""
    return run_seed + RECHECK_SEED_STEP


def write_best(rd: Path, kernel, spec, verdict, machine, source: str, t: float = 0.0,
               chain: int | None = None, recheck: dict | None = None,
               proof: str = PROOF_PENDING, plan: list | None = None,
               plan_start: str | None = None) -> None:
    """best.json first, then best.leir: the kernel file is the commit point. A verdict of
    None marks the starting kernel: ``proof: pending`` while its own full check runs, or
    ``proof: lowering`` when it is the spec's lowering, which needs none. ``plan`` is the
    kernel's plan (plan_to_json; None: unknown) from the run's start, which
    ``plan_start`` names: START_LOWERING or START_INIT (by default what best.json said)."""
    if plan_start is None:
        plan_start = read_json(rd / BEST_JSON).get("plan_start", START_LOWERING) \
            if (rd / BEST_JSON).is_file() else START_LOWERING
    profile = cost(kernel, machine)
    facts = {"cycles": profile.cycles, "source": source, "t": t, "chain": chain,
             "plan": plan, "plan_start": plan_start, "profile": profile.to_json()}
    if verdict is None:
        facts.update(verdict=None, certificate=None, proof=proof)
    else:
        facts.update(verdict=verdict if isinstance(verdict, dict) else verdict.to_json(),
                     certificate=certificate(kernel, spec, _as_verdict(verdict), machine))
    if recheck is not None:
        facts["recheck"] = recheck
    write_json(rd / BEST_JSON, facts)
    atomic_write(rd / BEST_LEIR, render(kernel, machine))


def _as_verdict(v):
    from stochopt.verify.check import Verdict
    if isinstance(v, Verdict):
        return v
    return Verdict(v["equivalent"], v["examples"], v["seed"],
                   float(v["max_semantic_error"]), float(v["max_precision_error"]),
                   coverage=v.get("coverage"))


def write_unproved(rd: Path, found: dict, proved_cycles: int) -> dict:
    """A faster kernel whose full check did not finish: unproved.leir, and a record in
    best.json saying how to prove it (best.leir stays the proved best)."""
    atomic_write(rd / UNPROVED_LEIR, found["text"])
    record = {"cycles": found["cycles"], "path": str(rd / UNPROVED_LEIR),
              "chain": found["chain"], "t": found["t"], "why": found["why"],
              "prove": f"stochopt verify {rd / 'unproved.leir'} --spec {rd / 'spec.py'}",
              "proved_best_cycles": proved_cycles}
    best = read_json(rd / BEST_JSON)
    write_json(rd / BEST_JSON, {**best, "unproved": record})
    return record


def recheck_best(rd: Path, spec, machine, seed: int, baseline_text: str,
                 earlier: list[dict], deadline: float | None = None,
                 examples: int = 200) -> str | None:
    """The final best is checked once more with a fresh seed; the verdict goes in
    best.json. A kernel that fails here slipped through the full check: the next
    fastest earlier best that the same re-check does not refute takes its place (passed,
    or cut by the deadline; else the baseline), so that best.leir keeps its promise; the
    returned note says so.
    ``deadline`` (time.monotonic) bounds it: a re-check cut short is recorded as such.
    ``examples``: the run's full checks' count, which the re-check keeps."""
    best = read_json(rd / BEST_JSON)
    if best.get("source") == SOURCE_START or "recheck" in best:
        return None
    baseline = parse(baseline_text, machine)
    seed = recheck_seed(seed)
    # the run's check bank: the references and baseline outputs of the re-check's inputs
    # that idle check workers prepared during the run (and the seed-free cases the run's
    # own checks tried) are read, not computed again
    context = CheckContext(spec, baseline, machine, rd / CHECK_BANK)

    def recheck(kernel):
        return check(kernel, spec, examples=examples, machine=machine, baseline=baseline,
                     seed=seed, deadline=deadline, context=context)

    def record(verdict) -> dict:  # what best.json keeps of a re-check, finished or cut
        return verdict.to_json() if not verdict.interrupted else {
            "finished": False, "seed": seed, "examples_done": verdict.examples}

    verdict = recheck(parse((rd / BEST_LEIR).read_text(), machine))
    if verdict.interrupted:
        write_json(rd / BEST_JSON, {**best, "recheck": record(verdict)})
        return ("the final re-check of the best kernel did not finish within the budget; "
                f"run it with: stochopt verify {rd / 'best.leir'} --spec {rd / 'spec.py'} "
                f"--seed {seed}")
    if verdict.equivalent:
        write_json(rd / BEST_JSON, {**best, "recheck": verdict.to_json()})
        return None
    bad = verdict.counterexample
    bad.save(rd / COUNTEREXAMPLES / "recheck.npz")
    # the refuted kernel stays beside its counterexample, for the user to judge
    atomic_write(rd / COUNTEREXAMPLES / "recheck.leir", (rd / BEST_LEIR).read_text())
    failed = f"the best kernel ({best['cycles']} cycles) failed its final re-check: " \
             f"{bad.describe()}; the failing input is in {bad.path}, the kernel in " \
             f"{rd / COUNTEREXAMPLES / 'recheck.leir'}"
    for entry in sorted(earlier, key=lambda e: e["cycles"]):
        if entry["cycles"] <= best["cycles"]:
            continue
        kernel = parse(entry["text"], machine)
        # the input that refuted the best first: one emulation, where an earlier best
        # that computes alike (a rescheduling of it) fails the same way
        replay = check(kernel, spec, machine=machine, baseline=baseline, examples=1,
                       extra_inputs=[bad.inputs], structured=False, deadline=deadline)
        if not replay.equivalent and not replay.interrupted:
            continue
        again = recheck(kernel)
        if again.equivalent or again.interrupted:
            # proved by the run's own check and not refuted here: kept, never traded
            # for a baseline whose own proof may be missing (a cut re-check refutes nothing)
            write_best(rd, kernel, spec, entry["verdict"], machine, SOURCE_SEARCH, entry["t"],
                       entry["chain"], recheck=record(again), plan=entry.get("plan"))
            how = "passes it" if again.equivalent else \
                "was not refuted by it (its re-check did not finish within the budget)"
            return f"{failed}; best.leir holds the fastest earlier best that {how} " \
                   f"({entry['cycles']} cycles)"
    base_verdict = recheck(baseline)
    # the baseline: its start
    from_lowering = best.get("plan_start", START_LOWERING) == START_LOWERING
    write_best(rd, baseline, spec, None if base_verdict.interrupted else base_verdict,
               machine, source=SOURCE_START, plan=[] if from_lowering else None)
    return f"{failed}; no earlier best passes it, so best.leir is back to the baseline"
