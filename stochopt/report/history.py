"""A spec's history in the tuning database: every run of it on the machine, where each
started and what it reached, in the report (terminal, --json, --html) and in
`stochopt db show`; and the listing of `stochopt db list`.

The facts come from stochopt.tuning.views (plain dicts); this module only draws them.
"""

from __future__ import annotations

import html
import time
from pathlib import Path

from rich import box
from rich.console import Group
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

MOST_RUNS_SHOWN = 20   # the terminal lists the latest runs


def history_facts(run: dict, run_dir: str | Path) -> dict | None:
    """The report's history: this spec on this machine in the database the run used;
    None when it used none, {"error": ...} when the database cannot be read now."""
    from stochopt.tuning.store import TuningDB
    from stochopt.tuning.views import spec_history

    tuning = run.get("tuning") or {}
    if not tuning.get("db"):
        return None
    try:
        with TuningDB(tuning["db"], create=False, check=False) as db:
            spec = db.spec(tuning["spec_fingerprint"])
            if spec is None:
                return {"db": tuning["db"], "error": "the spec is no longer in it (pruned?)"}
            entry = spec_history(db, spec, tuning["machine_fingerprint"],
                                 run.get("machine_name") or "")
    except Exception as e:  # a database missing, locked or damaged: the report goes on
        return {"db": tuning["db"], "error": getattr(e, "message", None) or str(e)}
    here = str(Path(run_dir).resolve())
    for r in entry["runs"]:
        r["this_run"] = r["run_dir"] == here
    return {"db": tuning["db"], "error": None, **entry}


def _date(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else "-"


# ---------------------------------------------------------------------------------
# terminal
# ---------------------------------------------------------------------------------

def runs_table(entry: dict, last: int = MOST_RUNS_SHOWN) -> Table:
    """One row per run, oldest first: when, where, how it started, what it reached."""
    runs = entry["runs"]
    notes = ([f"{len(runs) - last} earlier runs not shown"] if len(runs) > last else []) + \
        (["* this run"] if any(r.get("this_run") for r in runs[-last:]) else [])
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, caption="; ".join(notes) or None)
    # a run by its folder's name, which names the spec and the time (--json: the path)
    for col in ("started", "run", "start", "from", "best", "bests", "stopped by"):
        table.add_column(col, justify="right" if col in ("from", "best", "bests") else "left",
                         no_wrap=col != "run", overflow="fold")
    for r in runs[-last:]:
        table.add_row(_date(r["started"]), Path(r["run_dir"]).name +
                      (" *" if r.get("this_run") else ""), r["start"],
                      str(r["start_cycles"] or "-"), str(r["best_cycles"] or "-"),
                      str(len(r["bests"])), r["stopped_by"] or "-",
                      style="bold" if r.get("this_run") else None)
    return table


def history_bars(entry: dict, width: int = 80) -> Text:
    """Cycles over time across runs: a bar per run from its start to its best, on one
    scale from 0 to the highest start, with the date on the left."""
    runs = entry["runs"][-MOST_RUNS_SHOWN:]
    top = max([r["start_cycles"] or 0 for r in runs] + [r["best_cycles"] or 0 for r in runs]
              + [1])
    span = max(10, width - 16 - 2 - 16)
    text = Text()
    for r in runs:
        best = r["best_cycles"] or r["start_cycles"] or top
        start = r["start_cycles"] or best
        reached, gained = round(span * best / top), round(span * (start - best) / top)
        text.append(f"{_date(r['started'])} ", style="dim")
        text.append("█" * reached, style="green")
        text.append("░" * max(0, gained), style="dim green")
        text.append(f" {start} -> {best}\n" if start != best else f" {best}\n")
    return text


def history_view(entry: dict, width: int = 100) -> Group:
    """The report's history section."""
    if entry.get("error"):
        return Group(Text("history (tuning database)", style="bold"),
                     Text(f"note: {entry['db']}: {entry['error']}", style="yellow"))
    return Group(Text(f"history in the tuning database: {len(entry['runs'])} runs of this "
                      f"spec on {entry['machine']}", style="bold"),
                 Text(entry["db"], style="dim"), runs_table(entry),
                 Text("cycles over time across runs (█ best, ░ gained in the run)",
                      style="dim"),
                 history_bars(entry, width))


def show_view(facts: dict, width: int = 100) -> Group:
    """`stochopt db show SPEC`: each version of the spec on each machine."""
    parts: list = []
    for entry in facts["entries"]:
        shapes = ", ".join(f"{n} {t[0]}{list(t[1])}" for n, t in entry["shapes"]["inputs"].items())
        parts += [Text(f"{entry['spec']} on {entry['machine']}  ({shapes}; spec "
                       f"{entry['fingerprint']})", style="bold"),
                  runs_table(entry), history_bars(entry, width)]
        best = entry["best"]
        if best is None:
            parts += [Text("no proved kernel kept"), Text("")]
            continue
        plan = best["plan"]
        parts.append(Text(f"best: {best['cycles']} cycles, proved with {best['examples']} "
                          f"examples (seed {best['seed']}) under verifier {best['verifier']}"
                          + ("" if best["checked_here"] else ", imported: checked again "
                             "before a run starts from it")))
        parts.append(Text("plan from the lowering: " + (
            "unknown" if plan is None else "; ".join(
                f"{i}. {s[0]} at site {s[1]}" + (f", option {s[2]}" if len(s) > 2 else "")
                for i, s in enumerate(plan, 1)) or "none (the lowering itself)")))
        parts += [Syntax(best["text"].rstrip("\n"), "python", theme="ansi_dark",
                         background_color="default", word_wrap=True), Text("")]
    return Group(*parts)


def listing_table(rows: list[dict], path: str) -> Table:
    """`stochopt db list`: one row per spec and machine."""
    table = Table(title=f"tuning database {path}", box=box.SIMPLE_HEAD, pad_edge=False)
    cells = [[r["spec"], r["machine"], str(r["baseline_cycles"] or "-"),
              str(r["best_cycles"] or "-"),
              f"{r['baseline_cycles'] / r['best_cycles']:.2f}x"
              if r["best_cycles"] and r["baseline_cycles"] else "-",
              str(r["runs"]), str(r["kernels"]),
              time.strftime("%Y-%m-%d", time.localtime(r["last_run"])) if r["last_run"]
              else "-"] for r in rows]
    for j, col in enumerate(("spec", "machine", "baseline", "best", "speedup", "runs",
                             "kernels", "last run")):
        table.add_column(col, justify="left" if j in (0, 1, 7) else "right",
                         no_wrap=True, min_width=max([len(col)] + [len(c[j]) for c in cells]))
    for c in cells:
        table.add_row(*c)
    return table


# ---------------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------------

def history_svg(entry: dict) -> str:
    """Cycles over time across runs: each run a step line on the calendar from its start
    through the bests it proved (this run green), its best marked, and the best kept so
    far across runs as a dashed step line."""
    from datetime import datetime

    from stochopt.report.charts import BASELINE_COLOR, _figure, _svg

    # room below for the dates, slanted
    with _figure("history", (10, 3.2), left=0.85, right=0.3, top=0.3, bottom=1.15) as fig:
        ax = fig.subplots()
        found = []   # (when, cycles) of every start and best, for the best so far
        for r in entry["runs"]:
            points = [(r["started"], r["start_cycles"])] + [
                (b["created"], b["cycles"]) for b in r["bests"] if not b["refuted"]]
            points = [p for p in points if p[1] is not None]
            if not points:
                continue
            best = min(p[1] for p in points)
            points.append((max(r["ended"] or 0, max(p[0] for p in points)), best))
            found += points
            color = "#2e9e5b" if r.get("this_run") else "#3a7bd5"
            xs = [datetime.fromtimestamp(p[0]) for p in points]
            ax.step(xs, [p[1] for p in points], where="post", color=color,
                    linewidth=2 if r.get("this_run") else 1.2)
            ax.scatter(xs[:1], [points[0][1]], s=14, color=BASELINE_COLOR, zorder=3)
            ax.scatter(xs[-1:], [best], s=22, color=color, zorder=3)
        found.sort()
        so_far = [min(c for _, c in found[:i + 1]) for i in range(len(found))]
        if found:
            ax.step([datetime.fromtimestamp(t) for t, _ in found], so_far, where="post",
                    color="#888888", linestyle="--", linewidth=1, label="best kept so far")
            ax.legend(loc="lower left", fontsize=8)
        ax.set_ylim(bottom=0)
        ax.set_ylabel("cycles")
        ax.set_xlabel("date (each solid line a run, from its start (grey dot) to its best; "
                      "this run green)")
        ax.grid(axis="y", color="#eeeeee")
        fig.autofmt_xdate()
        return _svg(fig, "history")


def history_html(entry: dict | None) -> str:
    """The page's history section ('' when the run used no database)."""
    if entry is None:
        return ""
    if entry.get("error"):
        return ("<section><h2>History</h2><p class='muted'>" +
                html.escape(f"{entry['db']}: {entry['error']}") + "</p></section>")
    rows = "".join(
        f"<tr{' class=this' if r.get('this_run') else ''}><td class='text'>"
        f"{_date(r['started'])}</td><td class='text'>{html.escape(r['start'])}</td>"
        f"<td>{r['start_cycles'] or '-'}</td><td>{r['best_cycles'] or '-'}</td>"
        f"<td>{len(r['bests'])}</td><td class='text'>{html.escape(r['run_dir'])}"
        f"{' (this run)' if r.get('this_run') else ''}</td></tr>" for r in entry["runs"])
    table = ("<div class='wide'><table class='num'><thead><tr><th class=text>started</th>"
             "<th class=text>start</th><th>from</th><th>best</th><th>bests</th>"
             f"<th class=text>run directory</th></tr></thead><tbody>{rows}</tbody></table>"
             "</div>")
    return (f"<section><h2>History</h2><figure><div class='chart-box'>{history_svg(entry)}"
            "</div><figcaption>Every run of this spec on this machine in the tuning "
            f"database ({html.escape(entry['db'])}): each line starts where the run "
            "started (the lowering, or an earlier run's best) and steps down at each "
            f"best it proved.</figcaption></figure>{table}</section>")
