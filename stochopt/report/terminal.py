"""Rich renderings shared by the commands: profiles, output statistics, and the
`stochopt report` view of a run directory."""

from __future__ import annotations

import numpy as np
from rich import box
from rich.console import Group
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from stochopt.backend.cost import Profile
from stochopt.report.facts import headline, llm_configured
from stochopt.report.history import history_view
from stochopt.report.llm_facts import (
    IMPROVEMENT_COLUMNS,
    YIELD_COLUMNS,
    improvement_rows,
    yield_tables,
)
from stochopt.report.words import (
    format_seconds,
    format_share,
    format_speedup,
    format_usd,
    plural,
)
from stochopt.rundir import ACCEPTED, BEST, INVALID, PARSE_ERROR, REJECTED, UNPROVED, WRONG


def profile_table(profile: Profile, kernel=None, title: str = "profile") -> Table:
    """One row per op that does work (inputs and free relabellings left out), numbered
    by its line in the kernel file when the kernel is given; the critical path is
    marked * and bold."""
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    critical = set(profile.critical_path)
    rows = [[f"{'*' if o.index in critical else ''}{_line_of(o.index, kernel)}", o.op,
             o.name, o.resource,
             str(o.start), str(o.end), str(o.cycles), str(o.bytes), str(o.flops),
             str(o.units)]
            for o in profile.ops if o.op != "input" and o.resource is not None]
    for j, col in enumerate(("line" if kernel is not None else "#", "op", "name", "resource",
                             "start", "end", "cycles", "bytes", "flops", "units")):
        if col == "name":  # the only column that may wrap on a narrow terminal
            table.add_column(col, overflow="fold", min_width=4)
            continue
        width = max([len(col)] + [len(r[j]) for r in rows])
        table.add_column(col, justify="left" if col in ("op", "resource") else "right",
                         no_wrap=True, min_width=width)
    for r in rows:
        table.add_row(*r, style="bold" if r[0].startswith("*") else None)
    table.caption = (f"* critical path: {profile.critical_path_cycles} cycles of dependent "
                     f"work; makespan {profile.cycles}")
    return table


def _line_of(index: int, kernel) -> str:
    """The op's line in the kernel file (ops unrolled from one loop share it)."""
    if kernel is None or kernel.nodes[index].line is None:
        return str(index)
    return str(kernel.nodes[index].line)


def op_label(op: dict) -> str:
    """An op of a stored profile as the report numbers it: its kernel line."""
    return str(op.get("line") or op["index"])


def resource_table(profile: Profile) -> Table:
    """Busy cycles and busy fraction of each resource; the busiest is the bottleneck."""
    table = Table(title="resources", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("resource")
    table.add_column("busy cycles", justify="right")
    table.add_column("busy", justify="right")
    bottleneck = profile.bottleneck()
    for r, frac in profile.busy_fraction().items():
        table.add_row(r, str(profile.busy[r]), f"{100 * frac:.1f}%",
                      style="bold" if r == bottleneck and profile.busy[r] else None)
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


# ---------------------------------------------------------------------------------
# stochopt report: a run directory's facts (see facts.py) for the terminal
# ---------------------------------------------------------------------------------

RESOURCE_STYLES = {"dma": "cyan", "tree": "yellow", "vector": "magenta", "matrix": "green"}
OUTCOME_STYLES = {PARSE_ERROR: "bright_black", INVALID: "yellow", WRONG: "red",
                  REJECTED: "blue", ACCEPTED: "cyan", UNPROVED: "magenta", BEST: "bold green"}
_EIGHTHS = " ▁▂▃▄▅▆▇█"


def report_view(facts: dict, width: int = 100) -> Group:
    """Everything `stochopt report` prints, top to bottom, as one rich renderable."""
    parts: list = [summary_table(facts)]
    parts += [Text(f"note: {n}", style="yellow") for n in facts["notes"]]
    parts += [Text(""), proposer_table(facts, width), *llm_variants_table(facts, width), Text(""),
              Text("best cycles over time", style="bold"),
              trajectory_chart(facts, width=min(width, 120)),
              improvements_table(facts), Text(""),
              Text("best kernel (best.leir)", style="bold"),
              Syntax(facts["kernels"]["best"].rstrip("\n"), "python", line_numbers=True,
                     theme="ansi_dark", background_color="default", word_wrap=True),
              Text(""), profiles_side_by_side(facts, width), Text(""),
              Text("baseline -> best", style="bold"), diff_text(facts["diff"])]
    if facts.get("history"):
        parts += [Text(""), history_view(facts["history"], min(width, 120))]
    return Group(*parts)


def summary_table(facts: dict) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    for label, value in headline(facts):
        style = None
        if label == "verified":
            style = "bold green" if facts["verified"] else "bold red"
        elif label == "LLM status":
            style = "bold red"
        elif label == "status" and facts["status"] != "finished":
            style = "yellow"
        table.add_row(label, Text(value, style=style or ""))
    table.add_row("run", facts["run_dir"])
    return table


def proposer_table(facts: dict, width: int = 100) -> Table:
    """Outcomes by proposer, and each proposer's share of the cycles the search saved.
    Dollars only when an LLM was used; cycles saved and tokens only when they fit in
    ``width`` (the summary has the total tokens)."""
    llm = llm_configured(facts)
    columns = [("proposals", True, lambda p: str(p["proposals"]))]
    columns += [(o.replace("_", "\n"), True, lambda p, o=o: str(p["outcomes"].get(o, 0)))
                for o in facts["outcomes"]]  # the search's outcomes, in their order
    columns += [("improve-\nments", True, lambda p: str(p["improvements"])),
                ("cycles\nsaved", False, lambda p: str(p["cycles_saved"])),
                ("share of\nsaving", True, lambda p: format_share(p["improvement_share"]))]
    if llm:
        columns += [("tokens", False, lambda p: str(p["tokens"])),
                    ("cost", True, lambda p: format_usd(p["cost_usd"]))]
    rows = list(facts["proposers"].items())
    total = {"proposals": facts["proposals"], "outcomes": facts["outcomes"],
             "improvements": len(facts["improvements"]),
             "cycles_saved": sum(i["saved"] for i in facts["improvements"]),
             "improvement_share": 1.0 if facts["improvements"] else 0.0,
             "tokens": facts["tokens"], "cost_usd": facts["cost_usd"]}
    rows.append(("total", total))

    def layout(full: bool, gap: int):
        chosen = [("proposer", lambda p: None)] + [(h, cell) for h, needed, cell in columns
                                                    if needed or full]
        cells = [[name] + [cell(p) for _, cell in chosen[1:]] for name, p in rows]
        widths = [max(max(map(len, h.split("\n"))), *(len(r[j]) for r in cells))
                  for j, (h, _) in enumerate(chosen)]
        return chosen, cells, widths, sum(widths) + gap * (len(widths) - 1)

    full = layout(True, 2)
    wide = full[3] <= width
    chosen, cells, widths, _ = full if wide else layout(False, 1)
    table = Table(title="outcomes by proposer", box=box.SIMPLE_HEAD, show_edge=False,
                  padding=(0, 1 if wide else 0), collapse_padding=True,
                  title_justify="left", title_style="bold")
    # on a terminal too narrow even so, the headers fold, never the names or the numbers
    for j, (header, _) in enumerate(chosen):
        table.add_column(header, justify="left" if j == 0 else "right", overflow="fold",
                         header_style=OUTCOME_STYLES.get(header.replace("\n", "_"), ""),
                         min_width=max(len(r[j]) for r in cells))
    for i, row in enumerate(cells):
        table.add_row(*row, style="bold" if i == len(rows) - 1 else None,
                      end_section=i == len(rows) - 2)
    return table


def _fitting(headers: list[str], rows: list[list[str]], optional: list[bool],
             width: int) -> list[int]:
    """The columns to show: all that fit in ``width``, leaving out optional ones from the
    right first."""
    def size(j: int) -> int:
        return max([len(w) for w in headers[j].split(" ")] + [len(r[j]) for r in rows]) + 3

    keep = list(range(len(headers)))
    for j in reversed(range(len(headers))):
        if sum(size(k) for k in keep) <= width:
            break
        if optional[j]:
            keep.remove(j)
    return keep


def llm_variants_table(facts: dict, width: int = 100) -> list:
    """What the LLM yielded per reply form and per prompt focus, and the improvements it
    made with what made them; nothing without an LLM."""
    llm = facts.get("llm")
    out: list = []
    for title, first, rows in yield_tables(llm):
        headers = [first] + [h for _, h, _ in YIELD_COLUMNS]
        keep = _fitting(headers, rows, [False] + [o for _, _, o in YIELD_COLUMNS], width)
        table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                      title_justify="left", title_style="bold")
        for j in keep:
            table.add_column(headers[j].replace(" ", "\n"),
                             justify="left" if j == 0 else "right",
                             min_width=max(len(r[j]) for r in rows) if j == 0 else None)
        for row in rows:
            table.add_row(*(row[j] for j in keep),
                          style="bold" if row[0] == "total" else None)
        out += [Text(""), table]
    moves = improvement_rows(llm)
    if moves:
        table = Table(title="improvements the LLM made (on the paths to the best)",
                      box=box.SIMPLE_HEAD, show_edge=False, title_justify="left",
                      title_style="bold")
        for col in IMPROVEMENT_COLUMNS:
            table.add_column(col, justify="left" if col in ("form", "request", "made by")
                             else "right", overflow="fold")
        for row in moves:
            table.add_row(*row)
        out += [Text(""), table]
    for note in (llm or {}).get("notes", []):
        out.append(Text(f"LLM: {note}", style="yellow"))
    return out


def trajectory_chart(facts: dict, width: int = 80, height: int = 8) -> Text:
    """The best cycles over time as bars whose height is the gap left to the roofline:
    the top row is the baseline, the floor is the roofline. ``width`` is the whole
    chart's, labels included."""
    top, floor = facts["start_cycles"], min(facts["roofline_cycles"], facts["best_cycles"])
    labels = {0: f"{top}", height - 1: f"{floor}"}
    pad = max(len(s) for s in labels.values())
    width = max(10, width - pad - 2 - len(" roofline"))
    steps = [(0.0, facts["start_cycles"])] + [(i["t"], i["cycles"])
                                               for i in facts["improvements"]]
    end = max(facts["elapsed_s"], steps[-1][0], 1e-9)
    levels = []
    for c in range(width):
        t = (c + 1) * end / width
        value = min(cycles for at, cycles in steps if at <= t)
        frac = (value - floor) / (top - floor) if top > floor else 0.0
        levels.append(max(0, min(8 * height, round(8 * height * frac))))
    text = Text()
    for r in range(height):
        text.append(f"{labels.get(r, ''):>{pad}} ┤", style="dim")
        base = (height - 1 - r) * 8
        text.append("".join(_EIGHTHS[max(0, min(8, lv - base))] for lv in levels),
                    style="green")
        if r == 0:
            text.append(" baseline" if top == facts["baseline_cycles"] else " start",
                        style="dim")
        if r == height - 1:
            text.append(" roofline", style="dim")
        text.append("\n")
    right = format_seconds(end)
    text.append(" " * (pad + 1) + "└" + "─" * width + "\n", style="dim")
    text.append(" " * (pad + 2) + "0s" + right.rjust(width - 2), style="dim")
    return text


def improvements_table(facts: dict, last: int = 12) -> Table:
    """Each step of the best: when, to how many cycles, by which proposer and move."""
    steps = facts["improvements"]
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False,
                  caption=f"{len(steps) - last} earlier steps not shown"
                  if len(steps) > last else None)
    for col in ("t", "cycles", "saved", "speedup", "proposer", "move", "chain", "credited to"):
        table.add_column(col, justify="left" if col in ("proposer", "move", "credited to")
                         else "right")
    base = facts["baseline_cycles"]
    for s in steps[-last:]:
        table.add_row(f"{s['t']:.1f}s", str(s["cycles"]), str(s["saved"]),
                      format_speedup(base / s["cycles"]), s["proposer"], str(s["move"]),
                      str(s["chain"]), credit_text(s))
    if not steps:
        table.add_row("", "", "", "", "no improvement yet", "", "", "")
    return table


def credit_text(step: dict) -> str:
    """Who a step's saving is credited to along its chain's path: 'mutate 4652,
    rewrite 100 (over 2 moves)'."""
    credit = ", ".join(f"{name} {cycles}" for name, cycles in step.get("credit", {}).items())
    moves = step.get("path_moves", 1)
    return credit + (f" (over {plural(moves, 'move')})" if moves > 1 else "")


def compact_profile_table(profile: dict, title: str, scale: int, bar: int = 24) -> Table:
    """The ops that do work with a strip showing when each runs, on a common scale so
    two kernels' strips compare; critical-path ops are bold."""
    table = Table(title=f"{title}: {profile['cycles']} cycles", box=box.SIMPLE_HEAD,
                  pad_edge=False, title_justify="left", title_style="bold")
    for col in ("line", "op", "name", "resource", "cycles", "when"):
        table.add_column(col, justify="right" if col in ("line", "cycles") else "left",
                         no_wrap=col != "name")
    critical = set(profile.get("critical_path", []))
    for o in profile["ops"]:
        if o["op"] == "input" or o["resource"] is None:
            continue
        lo = int(bar * o["start"] / scale) if scale else 0
        hi = max(lo + 1, -(-bar * o["end"] // scale)) if scale else 1
        strip = Text(" " * lo + "█" * (hi - lo) + " " * max(0, bar - hi),
                     style=RESOURCE_STYLES.get(o["resource"].split("+")[0], "white"))
        table.add_row(f"{'*' if o['index'] in critical else ''}{op_label(o)}", o["op"],
                      o["name"], o["resource"], str(o["cycles"]), strip,
                      style="bold" if o["index"] in critical else None)
    return table


def profiles_side_by_side(facts: dict, width: int = 100):
    base, best = facts["profiles"]["baseline"], facts["profiles"]["best"]
    scale = max(base["cycles"], best["cycles"], 1)
    tables = [compact_profile_table(base, "baseline", scale),
              compact_profile_table(best, "best", scale)]
    caption = Text("line: the op's line in the kernel file; * critical path; strips share "
                   "one time scale "
                   f"(0 to {scale} cycles)", style="dim")
    if width < 150:
        return Group(*tables, caption)
    grid = Table.grid(padding=(0, 4))
    grid.add_row(*tables)
    return Group(grid, caption)


def diff_text(lines: list[str]) -> Text:
    text = Text()
    if not lines:
        return Text("best.leir is the baseline (no change)", style="dim")
    for line in lines:
        style = ("bold" if line.startswith(("---", "+++")) else
                 "cyan" if line.startswith("@@") else
                 "green" if line.startswith("+") else
                 "red" if line.startswith("-") else "")
        text.append(line + "\n", style=style)
    return text
