"""The Python API: the command line's jobs as functions on plain values (docs/api.md).

    import stochopt
    kernel = stochopt.lower("specs/softmax.py")        # the plain baseline kernel
    execution = stochopt.run(kernel)                   # outputs, cycles, profile
    verdict = stochopt.verify(kernel, "specs/softmax.py")
    result = stochopt.optimize("specs/softmax.py", budget="1m")
    facts = stochopt.report(result.run_dir)

Kernels and specs are taken as objects, file paths or text (a str with a newline is
text, any other str or a Path is a path). Every argument is checked here, at the
boundary, with the errors the CLI prints; the CLI calls exactly these functions.
Heavy modules are imported inside the functions so that `import stochopt` stays quick.
"""

from __future__ import annotations

import dataclasses
import tempfile
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from stochopt.displayable import Displayable
from stochopt.errors import StochoptError
from stochopt.rundir import SPEC_PY
from stochopt.spec import Spec, load_spec

if TYPE_CHECKING:
    from stochopt.backend.cost import Profile
    from stochopt.leir.ir import Kernel
    from stochopt.machine import Machine
    from stochopt.search.chain import ChainConfig
    from stochopt.search.driver import RunResult
    from stochopt.tuning.database import Database
    from stochopt.verify.check import Verdict

DEFAULT_MACHINE = "mncore2"
SpecLike = Spec | str | Path          # a Spec, a spec file's path, or its text
KernelLike = "Kernel | str | Path"    # a Kernel, a .leir file's path, or LEIR text


# ---------------------------------------------------------------------------------
# the boundary: kernels, specs, machines and inputs from whatever the user holds
# ---------------------------------------------------------------------------------

def load_kernel(kernel: KernelLike, machine: str | Path | Machine | None = None) -> Kernel:
    """A Kernel from a Kernel, a .leir file or LEIR text (parsed, never executed). A file
    is read on ``machine`` when given, else on the machine it records (its run's, or its
    '# machine:' line), else mncore2."""
    return _kernel_and_machine(kernel, machine)[0]


def _kernel_and_machine(kernel: KernelLike, machine) -> tuple[Kernel, Machine]:
    from stochopt.kernel_file import read_kernel_file
    from stochopt.leir import Kernel, parse

    if isinstance(kernel, Kernel):
        return kernel, _machine(machine)
    if not isinstance(kernel, str | Path):
        raise StochoptError(f"a kernel must be a Kernel, a .leir path or LEIR text, got "
                            f"{type(kernel).__name__}",
                            hint="pass e.g. stochopt.lower(spec) or 'runs/x/best.leir'")
    if _is_text(kernel):
        m = _machine(machine)
        return parse(kernel, m), m
    return read_kernel_file(kernel, machine=machine)


def as_spec(spec: SpecLike, name: str | None = None) -> Spec:
    """A Spec from a Spec, a spec file's path or a spec file's text."""
    if isinstance(spec, Spec):
        if name is not None and name != spec.name:
            raise StochoptError(f"the spec given is {spec.name!r}, not {name!r}",
                                hint="leave out name= when passing a Spec object")
        return spec
    if callable(spec):
        raise StochoptError(f"{getattr(spec, '__name__', spec)!r} is a plain function, not a "
                            "spec", hint='decorate it: @stochopt.spec(inputs={"x": '
                            'stochopt.tensor("f32", (128, 1024))})')
    if not isinstance(spec, str | Path):
        raise StochoptError(f"a spec must be a Spec, a .py path or spec text, got "
                            f"{type(spec).__name__}", hint="pass e.g. 'specs/softmax.py'")
    if not _is_text(spec):
        return load_spec(spec, name)
    with tempfile.TemporaryDirectory(prefix="stochopt-spec-") as folder:
        path = Path(folder) / SPEC_PY
        path.write_text(spec)
        loaded = load_spec(path, name)
    # the file is gone: a kernel lowered from it must not name it on its '# spec:' line
    return dataclasses.replace(loaded, path=None)


def spec_for_kernel(kernel: Kernel, spec: SpecLike | None, name: str | None = None,
                    kernel_path: str | Path | None = None) -> Spec:
    """The spec given, else the kernel file's own (stochopt.kernel_file: the run's spec.py
    for a kernel in a run directory, else its '# spec:' line from the file's folder, then
    from here)."""
    from stochopt import kernel_file

    if spec is not None:
        return as_spec(spec, name)
    if kernel_path is not None:
        return kernel_file.spec_for_kernel(kernel_path, kernel, None, name)
    if kernel.spec_path is None:
        raise StochoptError(f"kernel {kernel.name} names no spec",
                            hint="pass spec=..., or a kernel whose first line is "
                            "'# spec: PATH'")
    return load_spec(kernel.spec_path, name)


def _machine(machine) -> Machine:
    from stochopt.machine import load_machine
    return load_machine(DEFAULT_MACHINE if machine is None else machine)


def _kernel_path(kernel: KernelLike, kernel_file: str | Path | None) -> str | Path | None:
    """The file a kernel was read from: the kernel itself when given as a path, else the
    ``kernel_file`` named beside a parsed kernel (the CLI's), else None."""
    if isinstance(kernel, str | Path) and not _is_text(kernel):
        return kernel
    return kernel_file


def _is_text(value: str | Path) -> bool:
    return isinstance(value, str) and "\n" in value


def _count(value, label: str, low: int) -> int:
    if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < low:
        raise StochoptError(f"{label} must be an integer >= {low}, got {value!r}")
    return int(value)


def _checked_inputs(arrays, wanted: Mapping[str, tuple[str, tuple[int, ...]]],
                    where: str) -> dict[str, np.ndarray]:
    """Arrays named and shaped as wanted, cast to their native dtypes."""
    from stochopt.leir.types import native_dtype

    if not isinstance(arrays, Mapping):
        raise StochoptError(f"inputs must be a dict of name -> array, got "
                            f"{type(arrays).__name__}", hint=f"{where} takes {', '.join(wanted)}")
    missing = [n for n in wanted if n not in arrays]
    extra = [n for n in arrays if n not in wanted]
    if missing or extra:
        raise StochoptError(f"inputs name {', '.join(map(str, arrays)) or 'nothing'}, but "
                            f"{where} takes {', '.join(wanted)}",
                            hint="give exactly one array per input, by name")
    out = {}
    for name, (dtype, shape) in wanted.items():
        try:
            x = np.asarray(arrays[name])
        except (TypeError, ValueError) as e:  # ragged lists and the like
            raise StochoptError(f"input {name!r} is not an array: {e}") from None
        if x.dtype.kind in "OUSmM":  # objects, strings, dates: no number to cast
            raise StochoptError(f"input {name!r} is not an array of numbers (dtype {x.dtype})",
                                hint=f"give a numpy array of {dtype}")
        if x.shape != tuple(shape):
            raise StochoptError(f"input {name!r} has shape {x.shape}, {where} wants "
                                f"{tuple(shape)}")
        out[name] = x.astype(native_dtype(dtype))
    return out


# ---------------------------------------------------------------------------------
# the jobs
# ---------------------------------------------------------------------------------

def lower(spec: SpecLike, *, name: str | None = None,
          machine: str | Path | Machine = DEFAULT_MACHINE) -> Kernel:
    """The plain baseline kernel of a spec: where the search starts."""
    from stochopt.lower.lowering import lower as lower_spec

    return lower_spec(as_spec(spec, name), _machine(machine))


@dataclass
class Execution(Displayable):
    """One kernel emulated on one set of inputs: its output and what it cost."""
    kernel: Kernel
    machine: str
    clock_mhz: float
    seed: int | None                 # of the random inputs; None when inputs were given
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]   # a kernel returns one tensor, named "out"
    profile: Profile
    roofline_cycles: int
    bound_cycles: int                # the reachable lower bound (backend/bound.py)
    # where random inputs came from: the spec's declared ranges, or [-10, 10] without a
    # spec (None when inputs were given)
    inputs_from: str | None = None

    @property
    def output(self) -> np.ndarray:
        return self.outputs["out"]

    @property
    def cycles(self) -> int:
        return self.profile.cycles

    @property
    def roofline_share(self) -> float:
        return self.roofline_cycles / max(1, self.profile.cycles)

    @property
    def bound_share(self) -> float:
        return self.bound_cycles / max(1, self.profile.cycles)

    def to_json(self) -> dict:
        """The facts `stochopt run --json` prints (less the kernel's path)."""
        from stochopt.report.terminal import array_stats

        return {"machine": self.machine, "seed": self.seed, "inputs_from": self.inputs_from,
                "outputs": {n: array_stats(x) for n, x in self.outputs.items()},
                **self.profile.to_json(), "roofline_cycles": self.roofline_cycles,
                "bound_cycles": self.bound_cycles, "bound_share": round(self.bound_share, 4)}


def run(kernel: KernelLike, inputs: Mapping[str, Any] | None = None, *, seed: int = 0,
        machine: str | Path | Machine | None = None, spec: SpecLike | None = None,
        kernel_file: str | Path | None = None) -> Execution:
    """Emulate a kernel on the inputs given (default: uniform random ones from seed) and
    cost it: outputs, cycles and the per-op profile. Random inputs lie in the ranges of
    the kernel's spec (``spec``, else the one its file names, as verify finds it), or in
    [-10, 10] where no spec is found: a softmax of scores from inputs past the spec's
    ranges overflows, and its NaNs say nothing of the kernel."""
    from stochopt.backend.bound import bound_of_kernel
    from stochopt.backend.cost import cost, roofline_of_kernel
    from stochopt.backend.emulate import emulate, random_inputs
    from stochopt.verify.strategies import random_spec_inputs

    k, m = _kernel_and_machine(kernel, machine)
    inputs_from = None
    if inputs is None:
        seed = _count(seed, "seed", 0)
        s = _spec_of(k, spec, _kernel_path(kernel, kernel_file))
        if s is not None:
            values, inputs_from = random_spec_inputs(s, seed), f"spec {s.name}'s ranges"
        else:
            values, inputs_from = random_inputs(k, seed), "[-10, 10] (no spec found)"
    else:
        values = _checked_inputs(inputs, {n: (t.dtype, t.shape)
                                          for n, t in k.signature().items()},
                                 f"kernel {k.name}")
        seed = None
    profile = cost(k, m)
    output = emulate(k, values)
    return Execution(k, m.name, m.clock_mhz, seed, values, {"out": output}, profile,
                     roofline_of_kernel(k, m), bound_of_kernel(k, m), inputs_from)


def _spec_of(kernel: Kernel, spec: SpecLike | None, kernel_path) -> Spec | None:
    """The kernel's spec when one is given or found and takes the kernel's inputs; a spec
    given that does not is an error, one not found is None."""
    if spec is None and kernel_path is None and kernel.spec_path is None:
        return None
    try:
        s = spec_for_kernel(kernel, spec, None, kernel_path)
    except StochoptError:
        if spec is not None:
            raise
        return None
    wanted = {n: (t.dtype, tuple(t.shape)) for n, t in kernel.signature().items()}
    if {n: (t.dtype, tuple(t.shape)) for n, t in s.inputs.items()} != wanted:
        if spec is not None:
            raise StochoptError(f"spec {s.name} does not take kernel {kernel.name}'s inputs")
        return None
    return s


def verify(kernel: KernelLike, spec: SpecLike | None = None, *, name: str | None = None,
           examples: int = 200, seed: int = 0, inputs: str | Path | Mapping | None = None,
           counterexample_path: str | Path | None = None,
           machine: str | Path | Machine | None = None,
           kernel_file: str | Path | None = None) -> Verdict:
    """Check that a kernel computes its spec (default: the one on its '# spec:' line).

    ``inputs`` replays one input (a dict of arrays or a saved .npz) instead of searching;
    a counterexample found is saved to ``counterexample_path`` when one is given. A
    kernel read from a file in a run directory (given as its path, or parsed and
    named by ``kernel_file``) is checked with what the run's checks computed."""
    from stochopt.kernel_file import baseline_or_none
    from stochopt.verify import check, degenerate_warnings
    from stochopt.verify.check import check_fits
    from stochopt.verify.replay import checked_inputs, load_inputs

    examples, seed = _count(examples, "examples", 1), _count(seed, "seed", 0)
    k, m = _kernel_and_machine(kernel, machine)
    check_fits(k, m)  # what `run` refuses, verify refuses alike (ConstraintError)
    kernel_path = _kernel_path(kernel, kernel_file)
    s = spec_for_kernel(k, spec, name, kernel_path)
    extra = None
    if isinstance(inputs, str | Path):
        extra = [load_inputs(str(inputs), s)]
    elif inputs is not None:
        extra = [checked_inputs(inputs, s, "inputs")]
    warnings: list[str] = []
    baseline = baseline_or_none(s, m, warnings)  # None: held to the spec's tolerance alone
    verdict = check(k, s, examples=1 if extra else examples, seed=seed, machine=m,
                    baseline=baseline or k, extra_inputs=extra, structured=extra is None,
                    context=_run_check_bank(kernel_path, s, baseline or k, m))
    verdict.warnings.extend(warnings + degenerate_warnings(s))
    cex = verdict.counterexample
    # a range refusal holds for every input: there is no input to save
    if cex is not None and counterexample_path is not None and cex.mismatch.check != "range":
        cex.save(counterexample_path)
    return verdict


def _run_check_bank(kernel_path, spec, baseline, machine):
    """For a kernel in a run directory, a check context on the run's check_bank/, which
    holds what the run's own checks computed (references, the baseline's outputs);
    else None (check() makes its own)."""
    from stochopt.rundir import CHECK_BANK, RUN_JSON
    from stochopt.verify.bank import ONE_CHECK_BYTES, CheckContext

    if kernel_path is None or not (Path(kernel_path).parent / RUN_JSON).is_file():
        return None
    return CheckContext(spec, baseline, machine, Path(kernel_path).parent / CHECK_BANK,
                        entry_bytes=ONE_CHECK_BYTES, value_bytes=ONE_CHECK_BYTES)


def optimize(spec: SpecLike | None = None, *, budget: str | float = "10m",
             proposer: str = "mixed", chains: int | None = None, seed: int = 0,
             init: KernelLike | None = None, name: str | None = None,
             machine: str | Path | Machine = DEFAULT_MACHINE, run_dir: str | Path | None = None,
             resume: str | Path | None = None, max_proposals: int | None = None,
             max_cost: float | None = None, llm: Mapping[str, Any] | None = None,
             progress: Callable[[dict], None] | None = None, live: bool | None = None,
             config: ChainConfig | None = None,
             settings: Mapping[str, Any] | None = None, check_workers: int | None = None,
             started: float | None = None, ray: str | None = None,
             db: str | Path | bool | None = None, cold: bool = False) -> RunResult:
    """Search for a faster kernel equivalent to a spec; the best verified one is in
    result.best_path. ``progress`` receives a snapshot dict a few times a second; ``live``
    draws them (None: in Jupyter only). Interrupting stops the run cleanly: its checkpoint
    is kept and ``resume=result.run_dir`` continues it. ``config`` tunes the chains
    (stochopt.search.chain.ChainConfig: e.g. fewer full-check examples for a quick look).
    ``check_workers``: processes that run full checks beside the chains (0: on the chains'
    path); ``started``: when the budget's clock started (time.time(); default now).
    ``ray``: run the chains on a Ray cluster, "auto", "local", "ray://HOST:10001" or
    "HOST:PORT" (docs/scale.md); a resumed run keeps its cluster unless this names one.
    ``db``: the tuning database's file (None: the default one, False: none); the run
    starts from its best kernel for the spec and machine unless ``cold`` (docs/database.md)."""
    from stochopt.notebook import live_progress
    from stochopt.search.optimize import optimize as search

    if resume is not None and not isinstance(resume, str | Path):
        raise StochoptError(f"resume must be a run directory's path, got {resume!r}")
    if run_dir is not None and not isinstance(run_dir, str | Path):
        raise StochoptError(f"run_dir must be a path, got {run_dir!r}")
    if llm is not None and not isinstance(llm, Mapping):
        raise StochoptError(f"llm must be a dict of settings, got {type(llm).__name__}",
                            hint='pass e.g. llm={"model": "gpt-4o-mini"}')
    if not isinstance(proposer, str):
        raise StochoptError(f"proposer must be a string, got {proposer!r}",
                            hint="use mixed, mutate, rewrite, compound, lookahead or llm")
    if chains is not None:
        chains = _count(chains, "chains", 1)
    seed = _count(seed, "seed", 0)
    with tempfile.TemporaryDirectory(prefix="stochopt-") as scratch, \
            live_progress(progress, live) as on_progress:
        spec_path, spec_name = (None, name) if spec is None and resume is not None else \
            _spec_file(spec, name, Path(scratch))
        init_path = None if init is None else _kernel_file(init, machine, Path(scratch))
        return search(spec_path, budget=budget, proposer=proposer, chains=chains, seed=seed,
                      init=init_path, run_dir=_str(run_dir),
                      machine=_str(machine) if isinstance(machine, Path) else machine,
                      resume=_str(resume), max_proposals=max_proposals, max_cost=max_cost,
                      name=spec_name, llm=dict(llm) if llm and llm.get("model") else None,
                      progress=on_progress, config=config, settings=settings,
                      check_workers=check_workers, started=started, ray=ray, db=db,
                      cold=cold)


def db(path: str | Path | None = None, *, create: bool = False) -> Database:
    """The tuning database (docs/database.md): ``path``, else the default file
    ($XDG_CACHE_HOME/stochopt/tuning.db). Its methods: list(), show(spec), export(path),
    import_file(path), prune(keep=5); use it in a ``with`` block, or close() it.
    ``create``: make the file when there is none (by default that is an error)."""
    from stochopt.tuning.database import Database

    if path is not None and not isinstance(path, str | Path):
        raise StochoptError(f"db takes the database file's path, got {type(path).__name__}",
                            hint="pass e.g. 'tuning.db', or nothing for the default file")
    return Database(path, create=create)


class Report(dict, Displayable):
    """The facts of a run directory (see docs/report.md): a plain dict that Jupyter shows
    as the report's page."""


def report(run_dir: str | Path) -> Report:
    """The facts of a run directory (finished, still going or killed) as a dict that
    shows itself as the report in Jupyter."""
    from stochopt.report.facts import run_facts

    if not isinstance(run_dir, str | Path):
        raise StochoptError(f"report takes a run directory's path, got "
                            f"{type(run_dir).__name__}", hint="pass result.run_dir")
    return Report(run_facts(run_dir))


def _str(path: str | Path | None) -> str | None:
    return None if path is None else str(path)


def _spec_file(spec: SpecLike | None, name: str | None, scratch: Path) -> tuple[str, str | None]:
    """A spec file for the run to copy: the path given, else the spec written out."""
    if spec is None:
        raise StochoptError("optimize needs a spec (or resume=RUN_DIR)",
                            hint="pass e.g. stochopt.optimize('specs/softmax.py')")
    if isinstance(spec, str | Path):
        if not _is_text(spec):
            return str(spec), name
        path = scratch / SPEC_PY
        path.write_text(spec)
        return str(path), name
    s = as_spec(spec, name)
    if s.path is not None and s.source == _read(s.path):
        return s.path, s.name  # loaded from this file: the run copies it as it is
    return _write_spec(s, scratch), s.name


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError):
        return None


# the imports a spec written in a notebook cell most likely relies on
_SPEC_PREAMBLE = ("import math\n\nimport numpy\nimport numpy as np\n\nimport stochopt\n"
                  "from stochopt import spec, tensor\n\n")


def _write_spec(s: Spec, scratch: Path) -> str:
    """A Spec defined in a notebook becomes a file the run's workers can import: its
    source under the usual imports, checked to load and compute what the Spec does."""
    from stochopt.verify.reference import reference_output
    from stochopt.verify.strategies import random_spec_inputs

    path = scratch / f"{s.name}.py"
    if s.source.lstrip().startswith("@"):  # one decorated function, as inspect saw it
        path.write_text(_SPEC_PREAMBLE + textwrap.dedent(s.source))
    else:                                   # a whole file's text (e.g. from spec text)
        path.write_text(s.source)
    try:
        written = load_spec(path, s.name)
        sample = random_spec_inputs(s, 0)
        same = np.allclose(reference_output(written, sample), reference_output(s, sample),
                           equal_nan=True)
        problem = None if same else "on its own it computes something else"
    except StochoptError as e:  # a name from another cell, a missing import: say so
        problem = e.message
    if problem is not None:
        raise StochoptError(f"spec {s.name} cannot be written to a file for the run's "
                            f"workers: {problem}",
                            hint="save the spec with its imports in a .py file and pass its "
                            "path")
    return str(path)


def _kernel_file(kernel: KernelLike, machine, scratch: Path) -> str:
    """The --init kernel as a file (the run records and re-reads it)."""
    if isinstance(kernel, str | Path) and not _is_text(kernel):
        return str(kernel)
    from stochopt.leir import render

    path = scratch / "init.leir"
    path.write_text(render(load_kernel(kernel, machine)))
    return str(path)
