"""check(kernel, spec) -> Verdict: is a kernel equivalent to its spec?

Structured inputs first (constant rows, extremes, zeros, an outlier, one-hot rows, ties,
all-false and all-true mask rows), then hunting cases, hypothesis's draws for the seed,
targeted draws and a local search that follow the kernel's errors (targeting.py,
climb.py); a failure is shrunk and reported as the simplest input found, with the worst
element. What does not depend on the kernel is computed once per run (bank.py).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from itertools import islice
from pathlib import Path

import hypothesis
import ml_dtypes
import numpy as np

from stochopt.backend.emulate import check_emulation_memory
from stochopt.displayable import Displayable
from stochopt.errors import StochoptError
from stochopt.leir.ir import Kernel
from stochopt.leir.render import render
from stochopt.machine import load_machine
from stochopt.spec import Spec
from stochopt.verify.bank import ONE_CHECK_BYTES, BankInputs, CheckContext
from stochopt.verify.climb import climb
from stochopt.verify.compare import (
    Mismatch,
    precision_check,
    semantic_error,
)
from stochopt.verify.counts import exact_output, rounding_counts
from stochopt.verify.coverage import NO_DECISIONS, coverage_of, coverage_warnings
from stochopt.verify.directed import directed_inputs
from stochopt.verify.hunting import kernel_boundaries
from stochopt.verify.ranges import Hazard, range_refusal
from stochopt.verify.reference import reference_output
from stochopt.verify.strategies import (
    FAMILY_SHARE,
    Recipe,
    family_recipes,
    hunting_recipes,
    random_spec_inputs,
    structured_recipes,
)
from stochopt.verify.targeting import TARGET_SHARE, TARGET_STEPS, draw_and_target
from stochopt.verify.tiny import input_resolution, subnormal_inputs

DEFAULT_EXAMPLES = 200


class CheckInterrupted(BaseException):
    """The check ran past its deadline (a BaseException, so hypothesis lets it through)."""


@dataclass
class Counterexample:
    mismatch: Mismatch
    inputs: dict[str, np.ndarray]
    recipes: dict[str, Recipe] | None = None
    path: str | None = None  # the .npz the inputs were saved to
    # which inputs found it: "given input", "structured case", "hunting case", "draw",
    # "targeted draw", "local search", or "range analysis" (refused statically, no
    # input shown wrong)
    found_by: str = ""

    def __post_init__(self) -> None:
        self.inputs = dict(self.inputs)  # the arrays alone, not the check's context

    def describe(self) -> str:
        text = self.mismatch.describe()
        if self.recipes:
            text += "; input " + ", ".join(f"{n}={r.describe()}"
                                           for n, r in self.recipes.items())
        return text

    def save(self, path: str | Path) -> str:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        arrays = {n: (v.astype(np.float32) if v.dtype == ml_dtypes.bfloat16 else v)
                  for n, v in self.inputs.items()}
        np.savez(path, **arrays)
        self.path = str(path)
        return self.path


@dataclass
class Verdict(Displayable):  # Displayable: Jupyter shows it with its counterexample
    equivalent: bool
    examples: int
    seed: int
    max_semantic_error: float = 0.0   # in units of the semantic tolerance
    max_precision_error: float = 0.0  # as a fraction of what is allowed
    counterexample: Counterexample | None = None
    elapsed_s: float = 0.0
    warnings: list[str] = field(default_factory=list)
    interrupted: bool = False  # stopped at its deadline: neither proved nor refuted
    range_refusal: str | None = None  # the static range analysis refused the kernel
    # decision points the baseline lacks, and which sides inputs reached (coverage.py)
    coverage: dict | None = None

    def to_json(self) -> dict:
        out = {"equivalent": self.equivalent, "examples": self.examples, "seed": self.seed,
               "max_semantic_error": _finite(self.max_semantic_error),
               "max_precision_error": _finite(self.max_precision_error),
               "elapsed_s": round(self.elapsed_s, 3), "warnings": self.warnings,
               "range_refusal": self.range_refusal, "coverage": self.coverage}
        if self.counterexample:
            m = self.counterexample.mismatch
            out["counterexample"] = {"check": m.check, "index": list(m.index),
                                     "expected": _finite(m.expected), "got": _finite(m.got),
                                     "detail": m.detail, "inputs_npz": self.counterexample.path,
                                     "found_by": self.counterexample.found_by,
                                     "description": self.counterexample.describe()}
        return out


def _finite(v: float):
    return v if np.isfinite(v) else str(v)


def check_signature(kernel: Kernel, spec: Spec) -> None:
    """A kernel can only be compared with a spec whose inputs and output it shares."""
    sig = kernel.signature()
    want = {n: (t.dtype, t.shape) for n, t in spec.inputs.items()}
    have = {n: (t.dtype, t.shape) for n, t in sig.items()}
    if want != have:
        raise StochoptError(
            f"kernel {kernel.name} takes {_sig(have)} but spec {spec.name} has {_sig(want)}",
            hint="the kernel's parameters must match the spec's inputs")
    if kernel.output_type.dtype != spec.output_dtype:
        raise StochoptError(f"kernel returns {kernel.output_type.dtype} but spec "
                            f"{spec.name} wants {spec.output_dtype}",
                            hint=f'cast the result: cast(y, "{spec.output_dtype}")')


def _sig(d) -> str:
    return ", ".join(f"{n}: {dt}{list(s)}" for n, (dt, s) in d.items())


class _Comparison:
    """Runs one input through kernel, baseline and reference; keeps the worst errors.
    What does not depend on the kernel comes from the check's context (bank.py)."""

    def __init__(self, kernel, context: CheckContext, deadline: float | None) -> None:
        self.kernel, self.context = kernel, context
        self.spec, self.baseline = context.spec, context.baseline
        self.deadline = deadline
        self.semantic = 0.0
        self.precision = 0.0
        self.count = 0
        self.typical_scale = context.typical_scale
        self.counted = rounding_counts(kernel)
        # the kernel's native output where coverage.Coverage.native observes decisions
        # (None: the context's, from the node values it shares)
        self.native = None
        self.last_score = 0.0  # the last input's worst error over its limit (inf: failed)
        self.best_score = -1.0  # the largest last_score of a passing input, and the input
        self.best_inputs: Mapping[str, np.ndarray] | None = None
        # the passing recipe-made input closest to failing: (score, recipes)
        self.best_recipes: tuple[float, dict] | None = None
        self.results: dict = {}  # input key -> (score, mismatch): each input runs once

    def has_run(self, key) -> bool:
        return key in self.results

    def run(self, inputs: Mapping[str, np.ndarray]) -> Mismatch | None:
        inputs = self.context.given_inputs(inputs)
        done = self.results.get(inputs.key)
        if done is not None:  # the same input again (a targeted step, a shrink)
            self.last_score = done[0]
            return done[1]
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise CheckInterrupted()
        self.count += 1
        self.last_score = float("inf")
        bad = self._judge(inputs)
        self.results[inputs.key] = (self.last_score, bad)
        if bad is None and self.last_score > self.best_score:
            self.best_score, self.best_inputs = self.last_score, inputs
        recipes = inputs.entry.recipes
        if bad is None and recipes is not None and (
                self.best_recipes is None or self.last_score > self.best_recipes[0]):
            self.best_recipes = (self.last_score, recipes)
        return bad

    def _judge(self, inputs: BankInputs) -> Mismatch | None:
        entry = self.context.limits(inputs)
        ref, size = entry.reference, entry.magnitude
        out_shape = self.kernel.output_type.shape
        if ref.shape != out_shape:
            raise StochoptError(f"the spec returns shape {ref.shape}, the kernel {out_shape}")
        # counts.py: exact, but counted values in float types as the hardware holds them
        exact = (exact_output(self.kernel, inputs, self.counted) if self.counted
                 else self.context.output(self.kernel, inputs, exact=True))
        sem, bad = semantic_error(exact, ref,
                                  self.typical_scale, size)
        self.semantic = max(self.semantic, sem)
        if bad is not None:
            return bad
        got = (self.native(inputs.arrays()) if self.native is not None
               else self.context.output(self.kernel, inputs, exact=False))
        base = entry.baseline_output
        judge = partial(precision_check, got, ref, self.spec.output_dtype, self.spec.rtol,
                        self.spec.atol, base, magnitude=size, terms=self.context.terms)
        prec, bad = judge(allowance=entry.allowance)
        near = 0.0
        if (bad is not None and bad.check == "precision" and base is not None
                and self.spec.rtol is None and self.spec.atol is None):
            # one input is one sample of rounding luck, for the baseline too (all of a
            # constant input is one value): before refusing, take the baseline's worst
            # error on a few inputs near this one as well
            near = self.context.nearby_error(inputs)
            prec, bad = judge(baseline_error=near)
        if bad is not None and bad.check == "precision" and subnormal_inputs(self.spec,
                                                                              inputs):
            # and what the inputs' own resolution leaves to judge at subnormal scale
            floor = input_resolution(self.spec, inputs, ref, reference_output)
            prec, bad = judge(baseline_error=near, resolution=floor)
        self.precision = max(self.precision, prec)
        self.last_score = prec
        return bad


# inputs of a full check spent on the local search over inputs: a share of the
# examples, at most CLIMB_STEPS (targeting.py: as many again on targeted draws)
CLIMB_SHARE, CLIMB_STEPS = 0.1, 20
# inputs tried for a concrete counterexample to a kernel the range analysis refused
WITNESS_TRIES = 24


def check(kernel: Kernel, spec: Spec, *, examples: int = DEFAULT_EXAMPLES, seed: int = 0,
          machine=None, baseline: Kernel | None = None,
          extra_inputs: list[dict[str, np.ndarray]] | None = None,
          structured: bool = True, deadline: float | None = None,
          context: CheckContext | None = None) -> Verdict:
    """Full equivalence check: the static range analysis, then the structured and
    hunting cases, extra inputs, the drawn and targeted inputs and a short local search
    over inputs.

    ``deadline`` (time.monotonic) stops the check early with ``interrupted`` set.
    ``context`` (bank.CheckContext, made for this spec and baseline) keeps what does not
    depend on the kernel for the next check; the verdict is the same without it."""
    if not isinstance(examples, int) or isinstance(examples, bool) or examples < 1:
        raise StochoptError(f"examples must be a positive integer, got {examples!r}")
    machine = load_machine(machine)
    check_signature(kernel, spec)
    check_emulation_memory(kernel)  # before any input is built
    start = time.perf_counter()
    context = _context(context, spec, baseline, machine)
    baseline = context.baseline
    hazard = range_refusal(kernel, baseline, spec)
    cmp = _Comparison(kernel, context, deadline)
    cuts = kernel_boundaries(kernel, spec)
    try:
        if hazard is not None:
            return _refused_by_range(cmp, hazard, spec, seed, extra_inputs, structured,
                                     cuts, start)
        return _check(cmp, examples, seed, extra_inputs, structured, cuts, start)
    except CheckInterrupted:
        return Verdict(False, cmp.count, seed, cmp.semantic, cmp.precision, None,
                       time.perf_counter() - start, interrupted=True)


def _context(context: CheckContext | None, spec: Spec, baseline: Kernel | None,
             machine) -> CheckContext:
    """The context a check runs in: the one given (which must be this spec's and this
    baseline's), or a new one."""
    if context is not None:
        if not context.serves(spec, baseline or context.baseline):
            raise StochoptError(f"this check context was made for spec "
                                f"{context.spec.name} and another baseline",
                                hint="make one CheckContext per spec and baseline")
        return context
    if baseline is None:
        from stochopt.lower import lower
        baseline = lower(spec, machine)
    return CheckContext(spec, baseline, machine, entry_bytes=ONE_CHECK_BYTES,
                        value_bytes=ONE_CHECK_BYTES)


def check_fits(kernel: Kernel, machine) -> None:
    """The constraints `stochopt run` applies: a kernel that does not fit the machine's
    PE memory raises the same ConstraintError (the scheduler's), and one whose emulation
    would pass the emulation memory budget a StochoptError. `stochopt verify` calls it;
    check() itself judges meaning only (the search's rule tests check kernels that need
    not fit), apart from the memory budget."""
    from stochopt.backend.cost import cost

    check_emulation_memory(kernel)
    cost(kernel, machine)


def _fixed_inputs(context, structured, extra_inputs, cuts, seed: int = 0,
                  examples: int = 0) -> list:
    """(recipes or None, inputs, kind): the given inputs, then the structured, hunting
    and family cases (the last a share of the examples), built by the context on first
    use."""
    spec = context.spec
    given = [(None, x, "given input") for x in extra_inputs or []]
    if not structured:
        return given
    cases = ([(r, "structured case") for r in structured_recipes(spec)]
             + [(r, "hunting case") for r in hunting_recipes(spec)]
             + [(r, "family case") for r in family_recipes(spec, seed,
                                                          int(FAMILY_SHARE * examples))])
    return given + [(r, context.recipe_inputs(r, cuts), kind) for r, kind in cases]


def _refused_by_range(cmp, hazard: Hazard, spec, seed, extra_inputs, structured, cuts,
                      start) -> Verdict:
    """Refused without an input; for the user, look a little for one that shows it."""
    tried = _fixed_inputs(cmp.context, structured, extra_inputs, cuts)[:WITNESS_TRIES]
    found = None
    for recipes, inputs, kind in tried:
        bad = cmp.run(inputs)
        if bad is not None:
            found = Counterexample(bad, inputs, recipes, found_by=f"range analysis; {kind}")
            break
    if found is None:
        recipes, inputs, _ = tried[0] if tried else (None, random_spec_inputs(spec, seed),
                                                     "")
        found = Counterexample(Mismatch("range", (), float("nan"), float("nan"),
                                        float("inf"), hazard.describe()), inputs, recipes,
                               found_by="range analysis")
    return Verdict(False, cmp.count, seed, cmp.semantic, cmp.precision, found,
                   time.perf_counter() - start, range_refusal=hazard.describe())


def _check(cmp, examples, seed, extra_inputs, structured, cuts, start) -> Verdict:
    spec = cmp.spec
    # --- candidate-directed inputs (coverage.py, directed.py): only for a candidate
    # with decision points the baseline lacks
    coverage = coverage_of(cmp.kernel, cmp.baseline, spec) if structured else None
    if coverage is not None:
        cmp.native = coverage.native

    def verdict(bad: Counterexample | None) -> Verdict:
        summary = coverage.summary() if coverage is not None else (
            NO_DECISIONS if structured else None)
        return Verdict(bad is None, cmp.count, seed, cmp.semantic, cmp.precision, bad,
                       time.perf_counter() - start, coverage=summary,
                       warnings=coverage_warnings(summary) if bad is None else [])

    fixed = _fixed_inputs(cmp.context, structured, extra_inputs, cuts, seed, examples)
    fixed = fixed[:max(examples, len(extra_inputs or []))]
    for recipes, inputs, kind in fixed:
        bad = cmp.run(inputs)
        if bad is not None:
            return verdict(Counterexample(bad, inputs, recipes, found_by=kind))
    if coverage is not None:
        found = directed_inputs(cmp, coverage, spec, seed, examples)
        if found is not None:
            bad, inputs, how = found
            return verdict(Counterexample(bad, inputs, found_by=how))
    # the inputs run so far: a family case equal to an earlier case runs (and counts) once
    draws, targeted, steps = _plan(examples, cmp.count, structured)
    if draws > 0 or targeted > 0:
        found = draw_and_target(cmp, cmp.context, draws,
                                min(targeted, examples - steps - cmp.count), seed, cuts,
                                examples)
        if found is not None:
            bad, inputs, recipes, kind = found
            return verdict(Counterexample(bad, inputs, recipes, found_by=kind))
    steps = examples - cmp.count if structured else 0
    if steps > 0 and cmp.best_inputs is not None:
        found = climb(cmp, spec, cmp.best_inputs, steps, seed, cuts)
        if found is not None:
            return verdict(Counterexample(*found, found_by="local search"))
    return verdict(None)


def _plan(examples: int, fixed: int, structured: bool) -> tuple[int, int, int]:
    """(drawn inputs, targeted draws, local search steps) of a check after its ``fixed``
    given, structured and hunting cases."""
    steps = min(CLIMB_STEPS, int(CLIMB_SHARE * examples)) if structured else 0
    targeted = min(TARGET_STEPS, int(TARGET_SHARE * examples))
    return examples - fixed - steps - targeted, targeted, steps


def shared_inputs(context: CheckContext, examples: int, seed: int) -> Iterator[BankInputs]:
    """The inputs every check of a run (at these examples and seed) tries first, for a
    kernel cut as the baseline is: the structured and hunting cases, then the draws. A
    check worker prepares them while it waits for its first candidate."""
    cuts = kernel_boundaries(context.baseline, context.spec)
    fixed = _fixed_inputs(context, True, None, cuts, seed, examples)[:examples]
    yield from (inputs for _, inputs, _ in fixed)
    draws, _, _ = _plan(examples, len(fixed), True)
    # the pool draw_and_target takes its draws from, in its order (drawn lazily: none
    # is made when no draw is taken)
    for recipes in islice(context.drawn(seed, examples), max(draws, 0)):
        yield context.recipe_inputs(recipes, cuts)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def certificate(kernel: Kernel, spec: Spec, verdict: Verdict, machine=None) -> dict:
    """The record that a kernel was checked: what, against what, how hard, how close."""
    from stochopt.version import __version__
    machine = load_machine(machine)
    return {
        "spec": spec.name, "spec_sha256": sha256_text(spec.source),
        "kernel_sha256": sha256_text(render(kernel, machine)), "machine": machine.name,
        "equivalent": verdict.equivalent, "seed": verdict.seed, "examples": verdict.examples,
        "max_semantic_error": _finite(verdict.max_semantic_error),
        "max_precision_error": _finite(verdict.max_precision_error),
        "coverage": verdict.coverage,
        "checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "versions": {"stochopt": __version__, "numpy": np.__version__,
                     "hypothesis": hypothesis.__version__,
                     "ml_dtypes": ml_dtypes.__version__},
    }


def write_json(path: str | Path, data: dict) -> None:
    Path(path).write_text(json.dumps(data, indent=2) + "\n")
