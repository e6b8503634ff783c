"""The final re-check: a best that slipped through the full check gives way to the
fastest earlier best that passes, never to nothing."""

import json
from pathlib import Path

import pytest

from stochopt import load_spec
from stochopt.backend.cost import cost
from stochopt.leir import parse, render
from stochopt.lower import lower
from stochopt.machine import MNCORE2
from stochopt.search.best_kernel import recheck_best, write_best

ROOT = Path(__file__).resolve().parents[2]
FAST = (ROOT / "docs" / "examples" / "softmax_fast.leir").read_text().replace(
    "def kernel(", "def softmax(")
WRONG = FAST.replace("store(e * r)", "store(e)")  # forgets to normalise
PASSED = {"equivalent": True, "examples": 200, "seed": 0, "max_semantic_error": 0.0,
          "max_precision_error": 0.1}


@pytest.fixture
def run_dir(tmp_path):
    spec = load_spec(ROOT / "specs" / "softmax.py")
    baseline = lower(spec)
    (tmp_path / "counterexamples").mkdir()
    # a best that (as if by a lucky full check) was written as verified
    write_best(tmp_path, parse(WRONG), spec, PASSED, MNCORE2, "search", 3.0, 0)
    return tmp_path, spec, render(baseline)


def entry(text: str) -> dict:
    return {"cycles": cost(parse(text)).cycles, "text": text, "verdict": PASSED, "t": 1.0,
            "chain": 0}


@pytest.mark.slow  # the re-check runs full checks (200 examples) on softmax
def test_a_best_failing_its_recheck_gives_way_to_the_fastest_earlier_best(run_dir):
    rd, spec, baseline = run_dir
    wrong_cycles = json.loads((rd / "best.json").read_text())["cycles"]
    note = recheck_best(rd, spec, MNCORE2, 0, baseline,
                         [entry(FAST), entry(baseline), entry(WRONG)])
    assert note.startswith(f"the best kernel ({wrong_cycles} cycles) failed its final "
                           "re-check")
    assert note.endswith("best.leir holds the fastest earlier best that passes it "
                         "(2264 cycles)")
    assert parse((rd / "best.leir").read_text()) == parse(FAST)
    best = json.loads((rd / "best.json").read_text())
    assert best["cycles"] == 2264 and best["recheck"]["equivalent"]
    assert (rd / "counterexamples" / "recheck.npz").is_file()


@pytest.mark.slow  # the re-check runs full checks (200 examples) on softmax
def test_with_no_earlier_best_that_passes_the_baseline_comes_back(run_dir):
    rd, spec, baseline = run_dir
    note = recheck_best(rd, spec, MNCORE2, 0, baseline, [entry(WRONG)])
    assert note.endswith("no earlier best passes it, so best.leir is back to the baseline")
    assert parse((rd / "best.leir").read_text()) == parse(baseline)
    assert json.loads((rd / "best.json").read_text())["source"] == "start"


def test_an_earlier_best_whose_recheck_is_cut_short_is_kept_not_the_baseline(run_dir,
                                                                             monkeypatch):
    """A re-check cut by the run's deadline refutes nothing: the earlier best, proved by
    the run's own check, stays (a loaded 5-minute run had lost its proved kernels to an
    unproved baseline this way)."""
    import time

    from stochopt.search import best_kernel

    real = best_kernel.check

    def cut_unless_wrong(kernel, spec, **kw):  # the wrong best refuted, the rest cut short
        if kernel == parse(WRONG):
            return real(kernel, spec, **kw)
        return real(kernel, spec, **{**kw, "deadline": time.monotonic()})

    monkeypatch.setattr(best_kernel, "check", cut_unless_wrong)
    rd, spec, baseline = run_dir
    note = recheck_best(rd, spec, MNCORE2, 0, baseline, [entry(FAST), entry(WRONG)])
    assert note.endswith("best.leir holds the fastest earlier best that was not refuted by "
                         "it (its re-check did not finish within the budget) (2264 cycles)")
    assert parse((rd / "best.leir").read_text()) == parse(FAST)
    best = json.loads((rd / "best.json").read_text())
    assert best["source"] == "search" and best["recheck"]["finished"] is False


def test_an_earlier_best_the_failing_input_refutes_is_passed_over_without_a_full_check(
        run_dir, monkeypatch):
    """The input that refuted the best is replayed on each earlier best first: one that
    fails it too is passed over in one emulation, and the refuted kernel is kept beside
    its counterexample."""
    import time

    from stochopt.search import best_kernel

    real, full = best_kernel.check, []

    def recorded(kernel, spec, **kw):
        if kw.get("examples", 200) > 1:
            full.append(kernel)
        if kernel == parse(baseline):  # the baseline's own check: cut, it is not the point
            return real(kernel, spec, **{**kw, "deadline": time.monotonic()})
        return real(kernel, spec, **kw)

    monkeypatch.setattr(best_kernel, "check", recorded)
    rd, spec, baseline = run_dir
    also_wrong = FAST.replace("store(e * r)", "store(e * 2.0)")  # slower, wrong alike
    note = recheck_best(rd, spec, MNCORE2, 0, baseline, [entry(also_wrong)])
    assert note.endswith("no earlier best passes it, so best.leir is back to the baseline")
    assert parse(also_wrong) not in full  # refuted by the replay alone
    assert parse((rd / "counterexamples" / "recheck.leir").read_text()) == parse(WRONG)
    assert "the kernel in" in note and "recheck.leir" in note


ROW_SUMS = '''
from stochopt import spec, tensor


@spec(inputs={"x": tensor("f32", (64, 256), low=-1.0, high=1.0)})
def row_sums(x):
    return x.sum(axis=1)
'''


def test_the_final_recheck_reads_the_inputs_idle_check_workers_prepared(tmp_path, monkeypatch):
    """An idle check worker prepares the final re-check's inputs after the run's own, and
    their references and baseline outputs go to the run's check_bank/: the re-check reads
    them there (on mla_decode computing them was half of a re-check that did not finish
    in a 5-minute run)."""
    import time

    from stochopt.rundir import CHECK_BANK
    from stochopt.search import best_kernel
    from stochopt.search.best_kernel import recheck_seed
    from stochopt.search.checks import Checker, CheckerJob
    from stochopt.verify import bank
    from stochopt.verify.check import shared_inputs

    (tmp_path / "row_sums.py").write_text(ROW_SUMS)
    spec = load_spec(tmp_path / "row_sums.py")
    baseline = render(lower(spec))
    contexts = []

    class Recorded(bank.CheckContext):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            contexts.append(self)

    def recheck_in(rd: Path, warmed: bool):
        rd.mkdir()
        (rd / "counterexamples").mkdir()
        if warmed:
            job = CheckerJob(0, str(rd), str(tmp_path / "row_sums.py"), None, MNCORE2,
                             baseline, 40, time.time() + 600, seed=3,
                             prepare_recheck_at=time.time() + 600)
            checker = Checker(job, rd / CHECK_BANK)
            while checker.has_work():  # the run's own inputs; the re-check's wait
                checker.warm_up(1.0)
            assert checker.warm and not checker.has_work()
            assert checker.warm_cpu_s > 0  # what the run's reserve counts for the re-check
            checker.recheck_at = time.monotonic()  # the run is past the point: prepared now
            while checker.has_work():
                checker.warm_up(1.0)
            # with no bank (a Ray actor's) nothing would read them: none are prepared
            bankless = Checker(job, None)
            bankless.recheck_at = time.monotonic()
            while bankless.has_work():
                bankless.warm_up(1.0)
            assert bankless.warm and bankless.context.misses == len(set(
                inputs.key for inputs in shared_inputs(bankless.context, 40, 3)))
        write_best(rd, parse(baseline), spec, PASSED, MNCORE2, "search", 1.0, 0)
        monkeypatch.setattr(best_kernel, "CheckContext", Recorded)
        assert recheck_best(rd, spec, MNCORE2, 3, baseline, [], examples=40) is None
        monkeypatch.undo()
        assert json.loads((rd / "best.json").read_text())["recheck"]["examples"] == 40
        assert contexts[-1].directory == rd / CHECK_BANK
        return contexts[-1].misses

    # the re-check's shared inputs: the seed-free structured cases, which the run's own
    # warm-up prepares, and its own seed's draws, which only the re-check's warm-up does
    context = bank.CheckContext(spec, parse(baseline), MNCORE2)
    shared = {inputs.key for inputs in shared_inputs(context, 40, recheck_seed(3))}
    drawn = shared - {inputs.key for inputs in shared_inputs(context, 40, 3)}
    cold, warm = recheck_in(tmp_path / "cold", False), recheck_in(tmp_path / "warm", True)
    assert len(drawn) >= 10 and warm <= cold - len(shared)
