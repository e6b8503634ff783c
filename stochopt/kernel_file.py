"""Kernel files as users hand them over: what spec and machine a .leir file is for.

A kernel file records both in its first lines (``# spec: PATH``, ``# machine: NAME``);
one inside a run directory belongs to that run, whose run.json and spec.py say it
best. These rules are the same for every command that reads a kernel file.
"""

from __future__ import annotations

import json
from pathlib import Path

from stochopt.errors import StochoptError
from stochopt.leir.parser import machine_of
from stochopt.machine import PRESETS, load_machine, run_machine
from stochopt.rundir import RUN_JSON, SPEC_PY


def read_kernel_text(path: str | Path) -> str:
    """A kernel file's text; a spec given by mistake is named as one."""
    p = Path(path)
    if not p.exists():
        raise StochoptError(f"kernel file {path} does not exist")
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise StochoptError(f"cannot read kernel file {path}: {e}") from None
    if p.suffix == ".py" and "@spec" in text:
        raise StochoptError(f"{path} is a spec (numpy), not a LEIR kernel",
                            hint=f"stochopt lower {path} -o kernel.leir writes its plain "
                            f"kernel; stochopt optimize {path} searches for a fast one")
    return text


def read_kernel_file(path: str | Path, machine=None, fallback_machine=None):
    """(kernel, machine): the kernel in a file, on ``machine`` when given, else on the
    machine the file records (its run directory's, or its '# machine:' line), else on
    ``fallback_machine`` (a project setting), else mncore2."""
    from stochopt.leir import parse

    text = read_kernel_text(path)
    machine = kernel_machine(path, text, machine, fallback_machine)
    try:
        return parse(text, machine), machine
    except StochoptError as e:
        raise type(e)(e.message, line=e.line, col=e.col, hint=e.hint, source=str(path)) from None


def kernel_machine(path: str | Path, text: str, machine=None, fallback_machine=None):
    """The machine a kernel file is for (see read_kernel_file)."""
    if machine is not None:
        return load_machine(machine)
    run_json = Path(path).parent / RUN_JSON
    if run_json.is_file():  # a kernel in a run directory: the run's own machine
        try:
            return run_machine(json.loads(run_json.read_text()))
        except (OSError, ValueError, KeyError, TypeError, StochoptError):
            pass  # not a readable run.json: fall back to the header
    recorded = machine_of(text)
    if recorded is None:
        return load_machine(fallback_machine)  # a project setting, or mncore2
    if recorded in PRESETS:
        return PRESETS[recorded]
    beside = Path(path).parent / recorded
    for candidate in (Path(recorded), beside):
        if candidate.suffix == ".toml" and candidate.is_file():
            return load_machine(str(candidate))
    raise StochoptError(f"{path} was written for machine {recorded!r}, which is not a preset",
                        hint=f"pass --machine with its .toml file, or one of "
                        f"{', '.join(PRESETS)}")


def spec_for_kernel(kernel_path: str | Path, kernel, spec_path: str | None = None,
                    name: str | None = None):
    """The spec named by ``spec_path``; for a kernel in a run directory, the run's copy of its
    spec; else the kernel's '# spec:' line, read relative to the kernel's folder, then
    to the current one."""
    from stochopt.spec import load_spec

    if spec_path is not None:
        return load_spec(spec_path, name)
    folder = Path(kernel_path).parent
    if (folder / RUN_JSON).is_file() and (folder / SPEC_PY).is_file():
        try:
            name = name or json.loads((folder / RUN_JSON).read_text()).get("name")
        except (OSError, ValueError, AttributeError):
            pass
        return load_spec(folder / SPEC_PY, name)
    recorded = kernel.spec_path
    if recorded is None:
        raise StochoptError(f"{kernel_path} names no spec",
                            hint="pass --spec SPEC.py or add a first line '# spec: PATH'")
    tried = [Path(recorded)] if Path(recorded).is_absolute() else [folder / recorded,
                                                                   Path(recorded)]
    for candidate in tried:
        if candidate.is_file():
            return load_spec(candidate, name)
    raise StochoptError(f"{kernel_path} names spec {recorded}, which is not at "
                        + " nor ".join(dict.fromkeys(str(p) for p in tried)),
                        hint="pass --spec SPEC.py")


def baseline_or_none(spec, machine, warnings: list[str]):
    """The lowered spec, the precision yardstick; None (and a warning) for a spec the
    lowering does not support, whose kernels are then held to its tolerance alone."""
    from stochopt.lower import lower

    try:
        return lower(spec, machine)
    except StochoptError as e:
        warnings.append(f"spec {spec.name} does not lower ({e.message}), so there is no "
                        "baseline to compare precision with: the kernel is held to the "
                        "spec's tolerance alone")
        return None
