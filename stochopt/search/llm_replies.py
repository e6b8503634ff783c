"""An LLM reply read into the chain's candidates, one per code block, edit set or plan.

Kernel text (a whole kernel, or the kernel shown with SEARCH/REPLACE edits applied) goes
through the LEIR parser and nothing else. A plan's entry numbers name steps of the menu
the prompt listed; they are applied to the kernel shown as transform.plan.apply_plan does,
the first step that no longer applies (or whose kernel no longer fits the machine)
ending the plan with the steps before it. Either
way the spec's signature and output shape are checked here, so that what reaches the
chain is a kernel the chain may evaluate, or an outcome with its reason. The chain's
verdict on a candidate is read back here too (``judged``: what the yield counts;
``faster_than_shown``: what may steer the rewrite arm).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from stochopt.backend.cost import cost
from stochopt.errors import ParseError, StochoptError
from stochopt.leir.parser import parse
from stochopt.llm.forms import MAX_PLAN_STEPS, read_plan
from stochopt.llm.prompt import EDIT_START, apply_edits, code_blocks
from stochopt.rundir import ACCEPTED, BEST, CHECKING, INVALID, NOT_TYPED, PARSE_ERROR, UNPROVED
from stochopt.search.chain import Candidate
from stochopt.transform.plan import Step, apply_step, plan_to_json
from stochopt.verify.check import check_signature

MAX_CANDIDATES = 8             # code blocks taken from one reply
TAKEN = (ACCEPTED, BEST, CHECKING, UNPROVED)  # the chain moved to the candidate
NO_CODE = ("the reply holds no code block: answer with one ```leir block holding the "
           "whole kernel")


@dataclass
class LLMCandidate(Candidate):
    request: str | None = None   # the transcript it came from (llm/<request>.json)
    number: int = 0              # its place among that request's candidates
    code: str | None = None      # the text it was read from
    focus: str | None = None     # the variant's focus
    form: str = "kernel"         # the form the request asked for (plan, edit, kernel)
    prompt_tokens: int = 0       # the request's prompt, counted once (on its first candidate)
    stopped: str | None = None   # set on the failure that made the proposer give up
    note: str | None = None      # a line for the user (constrained decoding given up)
    plan: list[int] | None = None        # the entry numbers a plan reply named
    steps: list[Step] = field(default_factory=list)   # the plan's steps that applied
    plan_stopped: str | None = None      # why the plan ended before its last step
    # the plan from the run's start to this kernel, when the shown kernel's is known
    # (the path contract of stochopt/search/chain.py)
    path: list[Step] | None = None
    shown_cycles: int | None = None      # the cycles of the kernel the request showed


class ReplyReader:
    """Reads replies for one spec on one machine."""

    def __init__(self, spec, machine) -> None:
        self.spec, self.machine = spec, machine
        self.output_shape: tuple | None = None   # the spec's, once a chain says it

    def code_candidates(self, contents: list[str], base_text: str) -> list[LLMCandidate]:
        """The kernels of a kernel or edit reply (every choice, every block)."""
        out: list[LLMCandidate] = []
        for content in contents or [""]:  # no choices at all reads as no code
            blocks = code_blocks(content)
            if not blocks:
                out.append(LLMCandidate("llm", "no_code", outcome=PARSE_ERROR,
                                        code=content[:400], error=NO_CODE))
            for block in blocks:
                move = "edit" if EDIT_START.search(block) else "kernel"
                try:
                    text = apply_edits(base_text, block) if move == "edit" else block
                except ParseError as e:
                    out.append(LLMCandidate("llm", move, error=str(e), outcome=PARSE_ERROR,
                                            code=block))
                    continue
                kernel, outcome, error = self.read(text)
                out.append(LLMCandidate("llm", move, kernel, error, outcome, code=text))
        return out[:MAX_CANDIDATES]

    def plan_candidates(self, contents: list[str], shown, entries, path
                        ) -> list[LLMCandidate]:
        """The kernels of a plan reply: each choice's plan applied to the kernel shown."""
        out = []
        for content in (contents or [""])[:MAX_CANDIDATES]:
            try:
                numbers = read_plan(content)
            except ParseError as e:
                out.append(LLMCandidate("llm", "plan", outcome=PARSE_ERROR, error=str(e),
                                        code=content[:400]))
                continue
            out.append(self.plan_candidate(numbers, shown, entries, path))
        return out

    def plan_candidate(self, numbers: list[int], shown, entries, path) -> LLMCandidate:
        by_number = {e.number: e.step for e in entries}
        code = json.dumps({"steps": numbers})
        if not entries:
            return LLMCandidate("llm", "plan", outcome=INVALID, code=code, plan=numbers,
                                error="no transform applies to the kernel shown: the menu "
                                      "was empty")
        if not numbers or numbers[0] not in by_number:
            return LLMCandidate(
                "llm", "plan", outcome=INVALID, code=code, plan=numbers,
                error=f"entry {numbers[0] if numbers else '(none)'} is not on the menu "
                      f"(1 to {len(entries)})")
        steps, stopped = [], None
        for k, n in enumerate(numbers[:MAX_PLAN_STEPS], 1):
            if n not in by_number:
                stopped = f"step {k}: entry {n} is not on the menu"
                break
            steps.append(by_number[n])
        kernel, applied, failed = self.apply(shown, steps)
        stopped = failed or stopped
        if len(numbers) > MAX_PLAN_STEPS and stopped is None:
            stopped = f"only the first {MAX_PLAN_STEPS} steps are taken"
        if not applied:
            return LLMCandidate("llm", "plan", outcome=INVALID, code=code, plan=numbers,
                                error=f"the plan's first step does not apply: {stopped}",
                                plan_stopped=stopped)
        kernel, outcome, error = self.check(kernel)
        return LLMCandidate("llm", "plan", kernel, error, outcome, code=code, plan=numbers,
                            steps=applied, plan_stopped=stopped,
                            path=None if path is None else list(path) + applied)

    def apply(self, kernel, steps):
        """apply_plan's walk, where a step whose kernel does not fit the machine (its PE
        memory) does not apply either: (kernel, steps applied, why it ended early)."""
        applied: list[Step] = []
        for number, step in enumerate(steps, 1):
            try:
                after = apply_step(kernel, step, self.machine)
                cost(after, self.machine)
            except StochoptError as e:
                return kernel, applied, f"step {number} ({step.rule}): {e}"
            kernel = after
            applied.append(step)
        return kernel, applied, None

    def read(self, text: str):
        """(kernel, None, None) for a kernel the chain may evaluate, else (None, outcome,
        error). The LEIR parser is the only thing that ever reads model output."""
        try:
            kernel = parse(text, self.machine)
        except ParseError as e:
            return None, PARSE_ERROR, str(e)
        except StochoptError as e:  # a ConstraintError
            return None, INVALID, str(e)
        except Exception as e:  # the parser must never take the run down with it
            return None, PARSE_ERROR, f"stochopt could not read this text " \
                                        f"({type(e).__name__}: {str(e)[:200]})"
        return self.check(kernel)

    def check(self, kernel):
        """The spec's signature and output shape."""
        try:
            check_signature(kernel, self.spec)
        except StochoptError as e:
            return None, INVALID, str(e)
        shape = kernel.output_type.shape
        if self.output_shape is not None and tuple(shape) != self.output_shape:
            return None, INVALID, (f"the kernel returns shape {list(shape)}, the spec "
                                     f"{list(self.output_shape)}")
        return kernel, None, None


def transcript_entry(c: LLMCandidate) -> dict:
    """What a transcript keeps of a candidate when it is read."""
    entry = {"move": c.move, "code": c.code}
    if c.plan is not None:
        entry.update(plan=c.plan, steps=plan_to_json(c.steps))
        if c.plan_stopped:
            entry["plan_stopped"] = c.plan_stopped
    if c.outcome is not None:
        entry.update(read_as=c.outcome, read_error=c.error)
    return entry


def faster_than_shown(event: dict, cand: LLMCandidate) -> bool:
    """Whether the candidate is faster than the kernel its request showed: a plan the
    chain accepted uphill (the Metropolis rule takes a slower kernel now and then) says
    nothing about which rules pay."""
    cycles = event.get("cycles")
    return isinstance(cycles, int) and (cand.shown_cycles is None
                                        or cycles < cand.shown_cycles)


def judged(event: dict) -> dict:
    """What the chain's verdict on a candidate says, as the yield counts it: read into a
    well-typed kernel, equal to the spec on the screening inputs, accepted by the chain
    (it moved there, maybe on to its full check), a new best sent to its full check."""
    outcome, error = event["outcome"], event.get("error")
    submitted = outcome in (BEST, CHECKING, UNPROVED) or bool(
        event.get("counterexample"))
    screened = submitted or (isinstance(error, int | float) and not isinstance(error, bool)
                             and error == 0)
    return {"well_typed": outcome not in NOT_TYPED,
            "screened_equal": screened, "accepted": outcome in TAKEN or submitted,
            "new_best": submitted}
