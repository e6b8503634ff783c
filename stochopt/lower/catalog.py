"""The bundled specs: where they are, and their baseline and roofline on a machine."""

from __future__ import annotations

import ast
from math import prod
from pathlib import Path

from stochopt.backend.cost import cost
from stochopt.lower.lowering import lower
from stochopt.lower.roofline import spec_roofline
from stochopt.machine import load_machine
from stochopt.spec import load_spec


def specs_dir() -> Path:
    """specs/ of the source tree (an editable install keeps it next to the package)."""
    return Path(__file__).resolve().parents[2] / "specs"


def bundled_spec_paths() -> list[Path]:
    return sorted(p for p in specs_dir().glob("*.py") if not p.name.startswith("_"))


def spec_summary(spec) -> str:
    """What a spec computes, in one line: the first paragraph of the reference's docstring,
    else of the spec file's docstring, without a leading "name:"."""
    doc = spec.reference.__doc__
    if not doc:
        try:
            doc = ast.get_docstring(ast.parse(spec.source))
        except SyntaxError:
            doc = None
    first = " ".join((doc or "").strip().split("\n\n")[0].split())
    prefix = f"{spec.name}:"
    return first[len(prefix):].strip() if first.startswith(prefix) else first


def spec_table(machine=None) -> list[dict]:
    machine = load_machine(machine)
    rows = []
    for path in bundled_spec_paths():
        spec = load_spec(path)
        roof = spec_roofline(spec, machine)
        base = cost(lower(spec, machine), machine)
        shapes = ", ".join(f"{n} {t.dtype}{list(t.shape)}" for n, t in spec.inputs.items())
        rows.append({"name": spec.name, "path": str(path), "shapes": shapes,
                     "doc": spec_summary(spec),
                     "flops": sum(roof.flops.values()), "bytes": roof.dram_bytes,
                     "roofline_cycles": roof.cycles, "baseline_cycles": base.cycles,
                     "bound_cycles": roof.bound_cycles,
                     "bound": roof.bound, "inputs": sum(prod(t.shape) for t in
                                                         spec.inputs.values())})
    return rows
