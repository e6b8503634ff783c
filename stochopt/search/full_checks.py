"""What happens to a correct kernel the chain moves to: the full-check policy.

A kernel that passes every screening input and is faster than the best known (the
"bar") is handed back for the full check (a ``Submission``); the chain goes on from it
while the check runs elsewhere (stochopt/search/checks.py), or the check runs here, on
the chain's path, when the run has no check workers. ``settle`` and ``refuted`` take the
verdict; a counterexample joins the chain's screening set and the run directory.

Every full check of a chain draws its inputs with the chain's seed, so the work that
does not depend on the kernel (verify/bank.py) is done once: a check on the chain's
path keeps its CheckContext for the run, as a check worker does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from stochopt.leir.ir import Kernel
from stochopt.leir.render import render
from stochopt.rundir import BEST, CHECK_BANK, CHECKING, UNPROVED, WRONG
from stochopt.search.values import Proofs
from stochopt.spec import Spec
from stochopt.verify.bank import CheckContext
from stochopt.verify.check import check


@dataclass
class Submission:
    """A screened kernel faster than the best known, waiting for its full check."""
    check_id: str
    kernel: Kernel
    cycles: int
    seed: int                    # of the full check: the chain's, for every check
    bar_before: int              # the chain's best before it, restored if it fails


class FullChecks:
    """One chain's bar, its submissions and proofs, and the counterexamples it keeps."""

    def __init__(self, index: int, spec: Spec, baseline: Kernel, machine, screening,
                 seed: int, full_examples: int, best_cycles: int, best_text: str) -> None:
        self.index, self.spec, self.baseline, self.machine = index, spec, baseline, machine
        self.screening, self.seed, self.full_examples = screening, seed, full_examples
        self.proofs = Proofs()               # value graphs this chain's full checks proved
        self.full_checks = 0
        self.best_cycles = best_cycles       # the bar for a full check: the global best
        self.best_text = best_text           # the best verified kernel known (for prompts)
        self.improvements = 0                # times the bar was raised (restarts count it)
        self.counterexample_dir: Path | None = None
        self.saved_inputs: list[str] = []
        self.checks_elsewhere = False        # True: submissions go to the check pool
        self.submissions: list[Submission] = []
        self.deadline: float | None = None   # of a check on the chain's path (monotonic)
        self.recost: Callable[[], None] = lambda: None  # the chain re-costs its current
        self.context: CheckContext | None = None  # what checks on this path share

    def on_correct(self, kernel: Kernel, cycles: int, event: dict):
        """The chain's callback: a new best is proved earlier, submitted, or checked here.
        Returns (the new best kernel or None, its verdict facts)."""
        if cycles >= self.best_cycles:
            return None, None
        facts = self.proofs.earlier(kernel)
        if facts is not None:  # the same values as a kernel this chain proved: no new check
            self.best_cycles, self.best_text = cycles, render(kernel)
            self.improvements += 1
            event.update(outcome=BEST, proved_earlier=facts["value_graph"])
            return kernel, facts
        submission = self._submit(kernel, cycles, event)
        if self.checks_elsewhere:
            self.submissions.append(submission)
            return None, None
        verdict = self.full_check(submission, self.deadline)
        if self.settle(submission, verdict, event):
            return kernel, self.proofs.record(kernel, verdict.to_json())
        return None, None

    def _submit(self, kernel: Kernel, cycles: int, event: dict) -> Submission:
        """Screened and faster than the best known: the chain has moved to the kernel
        already and raises its bar to it, so it submits only kernels faster still; a
        failed check lowers the bar back."""
        submission = Submission(f"{self.index}-{self.full_checks}", kernel, cycles,
                                self.seed, self.best_cycles)
        self.full_checks += 1
        self.best_cycles = cycles
        self.improvements += 1
        event.update(outcome=CHECKING, check=submission.check_id)
        return submission

    def full_check(self, submission: Submission, deadline: float | None = None):
        """Run the full check here, on the chain's path (a run without check workers)."""
        if self.context is None:
            directory = None if self.counterexample_dir is None else \
                self.counterexample_dir.parent / CHECK_BANK
            self.context = CheckContext(self.spec, self.baseline, self.machine, directory)
        return check(submission.kernel, self.spec, examples=self.full_examples,
                     seed=submission.seed, machine=self.machine, baseline=self.baseline,
                     deadline=deadline, context=self.context)

    def settle(self, submission: Submission, verdict, event: dict) -> bool:
        """Take the verdict of a full check run on the chain's path; True if proved."""
        event.pop("check", None)
        if verdict.equivalent:
            self.best_text = render(submission.kernel)
            event["outcome"] = BEST
            return True
        self.best_cycles = submission.bar_before
        if verdict.interrupted:
            event.update(outcome=UNPROVED, error="its full check did not finish before "
                         "the run ended")
            return False
        self.add_counterexample(verdict.counterexample)
        self.recost()  # the current kernel's eq may have changed too
        event.update(outcome=WRONG, error=verdict.counterexample.describe(),
                     counterexample=True)
        return False

    def refuted(self, counterexample_path: str) -> None:
        """A check worker refuted one of this chain's submissions."""
        self.add_counterexample_file(counterexample_path)
        self.recost()

    def hear_best(self, text: str, cycles: int, proved: bool) -> bool:
        """The global best as the main process sees it, the bar for the next full check;
        True if taken. With a check pool it may rise again (a waiting candidate was
        refuted); with checks on the chain's path it only falls."""
        if not self.checks_elsewhere and cycles >= self.best_cycles:
            return False
        self.best_cycles = cycles
        if proved:
            self.best_text = text
        return True

    # -- counterexamples: the screening set and the run directory ---------------------
    def add_counterexample(self, cex) -> None:
        """A full-check failure joins the screening set (and the run directory)."""
        self.screening.add(cex.inputs)
        if self.counterexample_dir is not None:
            path = self.counterexample_dir / f"chain{self.index}-{len(self.saved_inputs)}.npz"
            cex.save(path)
            self.saved_inputs.append(str(path))

    def add_counterexample_file(self, path: str) -> None:
        """A counterexample saved by a check worker (or an earlier session) joins the set."""
        from stochopt.verify.replay import load_inputs
        self.screening.add(load_inputs(path, self.spec))
        self.saved_inputs.append(path)
