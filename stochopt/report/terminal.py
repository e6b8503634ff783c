"""Rich renderings shared by the commands: profiles, output statistics."""

from __future__ import annotations

import numpy as np
from rich.table import Table

from stochopt.backend.cost import Profile


def profile_table(profile: Profile, title: str = "profile") -> Table:
    table = Table(title=title, show_lines=False)
    for col in ("#", "op", "name", "resource", "start", "end", "cycles", "bytes", "flops",
                "units"):
        table.add_column(col, justify="right" if col not in ("op", "name", "resource")
                         else "left")
    critical = set(profile.critical_path)
    for o in profile.ops:
        if o.op == "input":
            continue
        style = "bold" if o.index in critical else None
        table.add_row(str(o.index), o.op, o.name, o.resource or "-", str(o.start), str(o.end),
                      str(o.cycles), str(o.bytes), str(o.flops), str(o.units), style=style)
    return table


def resource_table(profile: Profile) -> Table:
    table = Table(title="resources")
    table.add_column("resource")
    table.add_column("busy cycles", justify="right")
    table.add_column("busy", justify="right")
    for r, frac in profile.busy_fraction().items():
        table.add_row(r, str(profile.busy[r]), f"{100 * frac:.1f}%")
    return table


def array_stats(x: np.ndarray) -> dict:
    """Shape, dtype and a few numbers that tell whether an output looks sane."""
    f = np.asarray(x, dtype=np.float64)
    finite = np.isfinite(f)
    stats = {"shape": list(x.shape), "dtype": str(x.dtype),
             "nan": int(np.isnan(f).sum()), "inf": int(np.isinf(f).sum())}
    if finite.any():
        v = f[finite]
        stats.update(min=float(v.min()), max=float(v.max()), mean=float(v.mean()),
                     std=float(v.std()))
    return stats
