"""The live progress display of a run (rich), and its closing summary."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from stochopt.durations import format_duration
from stochopt.rundir import LIVE_OUTCOMES


def progress_view(s: dict) -> Group:
    done = min(1.0, s["elapsed_s"] / s["budget_s"]) if s["budget_s"] else 0.0
    bar = "█" * int(30 * done) + "░" * (30 - int(30 * done))
    head = Text.assemble(
        (f"{s['spec']} ", "bold"), f"{bar} {format_duration(s['elapsed_s'])} / "
        f"{format_duration(s['budget_s'])}   {s['rate']:.0f} candidates/s   "
        f"{s['proposals']} proposed, {s['accepted']} accepted")
    best = Text.assemble(
        "best ", (f"{s['best_cycles']}", "bold green"), f" cycles (baseline "
        f"{s['baseline_cycles']}, ", (f"{s['speedup']:.2f}x", "bold"),
        f", {100 * s['roofline_share']:.1f}% of roofline"
        + (f", {100 * s['bound_share']:.1f}% of bound)" if s.get("bound_share") else ")"))
    if s.get("checking"):  # candidates waiting for (or under) their full check
        best.append(f"   {s['checking']} waiting for the full check, the fastest "
                    f"{s['fastest_found']} cycles")
    if s["tokens"]:
        best.append(f"   {s['tokens']} tokens, ${s['cost_usd']:.4f}")
    table = Table(box=None, pad_edge=False, show_header=True)
    table.add_column("proposer")
    for o in LIVE_OUTCOMES:
        table.add_column(o, justify="right")
    for name, counts in sorted(s["by_proposer"].items()):
        table.add_row(name, *(str(counts.get(o, 0)) for o in LIVE_OUTCOMES))
    parts = [head, best] + ([Text(s["start"], style="cyan")] if s.get("start") else []) + \
        [table]
    if s.get("llm_yield"):  # one short line: what each reply form has yielded so far
        parts.append(Text(s["llm_yield"], style="cyan"))
    for err in s.get("errors", [])[-3:]:
        parts.append(Text(f"error: {err}", style="red"))
    return Group(*parts)


def summary_lines(r) -> list[str]:
    """The closing summary: what was proved, what was found and not proved, what next."""
    head = (f"{r.spec} on {r.machine}: {r.baseline_cycles} -> {r.best_cycles} cycles "
            f"({r.speedup:.2f}x), {100 * r.roofline_share:.1f}% of roofline "
            f"({r.roofline_cycles} cycles)")
    if r.unproved_cycles is not None:
        head = (f"{r.spec} on {r.machine}: {r.baseline_cycles} -> {r.unproved_cycles} cycles "
                f"({r.baseline_cycles / r.unproved_cycles:.2f}x) found, UNPROVED; proved "
                f"best {r.best_cycles} cycles ({r.speedup:.2f}x)")
    if r.stopped_by == "interrupted":
        how = f"interrupted after {format_duration(r.elapsed_s)}"
    else:
        how = f"in {format_duration(r.elapsed_s)} (stopped by {r.stopped_by})"
    lines = [head, f"{r.proposals} candidates, {r.accepted} accepted, {how}; best verified: "
             f"{'yes' if r.verified else 'NO'}",
             *([f"LLM: {r.tokens} tokens, ${r.cost_usd:.4f}"] if r.tokens or r.cost_usd else []),
             *([r.start] if r.start else []),
             *llm_yield_lines(getattr(r, "llm_yield", None)),
             f"best kernel: {r.best_path}", f"run directory: {r.run_dir}"]
    if r.unproved_cycles is not None:
        lines.append(f"unproved: a faster kernel ({r.unproved_cycles} cycles) is in "
                     f"{r.unproved_path}, but its full check did not finish within the "
                     f"budget; prove it with: stochopt verify {r.unproved_path} --spec "
                     f"{r.run_dir}/spec.py (or give the search a longer --budget)")
    lines += [f"error: {e} (that chain stopped; the others went on)" for e in r.errors]
    lines += [f"warning: {n}" for n in r.notes]
    if r.stopped_by == "interrupted":
        lines.append(f"continue it with: stochopt optimize --resume {r.run_dir}")
    return lines


def llm_yield_lines(table: dict | None) -> list[str]:
    """The summary's lines on the LLM's yield: one per reply form (stochopt/llm/yields.py)."""
    if not table:
        return []
    out = []
    for row in table.get("forms", []):
        cost = (f"; {row['tokens_per_accepted']} tokens per accepted candidate"
                if row["tokens_per_accepted"] is not None else "")
        if row.get("usd_per_accepted"):
            cost += f" (${row['usd_per_accepted']:.4f})"
        out.append(f"LLM yield ({row['name']}): {row['requests']} asked, {row['replies']} "
                   f"answered, {row['well_typed']} well-typed of {row['candidates']}, "
                   f"{row['screened_equal']} equal on screening, {row['accepted']} accepted, "
                   f"{row['new_bests']} new bests, {row['proved']} proved{cost}")
    return out
