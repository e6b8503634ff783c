"""The HTML report's charts: matplotlib figures rendered to inline SVG strings.

Each function takes the facts of a run (see facts.py) and returns one <svg> element.
Figures are built with matplotlib.figure.Figure, not pyplot: no global state, no GUI
backend, safe to call from any thread. Text stays text in the SVG (svg.fonttype none),
so the numbers on a chart can be searched and tested.
"""

from __future__ import annotations

import io
import re
from contextlib import contextmanager

from stochopt.report.words import format_share, plural
from stochopt.rundir import ACCEPTED, BEST, INVALID, PARSE_ERROR, REJECTED, UNPROVED, WRONG

OUTCOME_COLORS = {PARSE_ERROR: "#9e9e9e", INVALID: "#f2a541", WRONG: "#d64545",
                  REJECTED: "#a9c4e4", ACCEPTED: "#3a7bd5", UNPROVED: "#b065c9",
                  BEST: "#2e9e5b"}
RESOURCE_COLORS = {"dma": "#3fa7c9", "tree": "#e0b040", "vector": "#b065c9",
                   "vector+tree": "#c98ad9", "matrix": "#4caf6a"}
# proposers get colours no outcome uses, so a green dot never reads as "best"; the
# built-in ones keep theirs from run to run
PROPOSER_COLORS = {"mutate": "#7b4fc9", "rewrite": "#0f8b8d", "llm": "#a16207"}
OTHER_COLORS = ["#be185d", "#1e3a8a", "#4d7c0f", "#6b7280"]
BASELINE_COLOR, ROOFLINE_COLOR = "#808080", "#d64545"
_LABEL_FRACTION = 0.008  # of the time axis per character of an op's name, at 7 pt
_STYLE = {"svg.fonttype": "none", "font.size": 9, "font.family": "sans-serif",
          "axes.spines.top": False, "axes.spines.right": False, "axes.titlesize": 10,
          "axes.titleweight": "bold", "axes.titlelocation": "left", "legend.frameon": False}


def all_charts(facts: dict) -> dict[str, str]:
    """Every chart of the page, by name."""
    return {"trajectory": trajectory_svg(facts), "outcomes": outcomes_svg(facts),
            "acceptance": acceptance_svg(facts), "profile": profile_svg(facts)}


def proposer_colors(facts: dict) -> dict[str, str]:
    others = [p for p in facts["proposers"] if p not in PROPOSER_COLORS]
    return {**PROPOSER_COLORS,
            **{p: OTHER_COLORS[i % len(OTHER_COLORS)] for i, p in enumerate(others)}}


# ---------------------------------------------------------------------------------
# the charts
# ---------------------------------------------------------------------------------

def trajectory_svg(f: dict) -> str:
    """Best cycles over time as a step line, each step marked in its proposer's colour,
    with the baseline above and the roofline below."""
    with _figure("trajectory", (10, 3.6), left=0.85, right=1.3, top=0.45) as fig:
        ax = fig.subplots()
        steps = f["improvements"]
        end = max(f["elapsed_s"], steps[-1]["t"] if steps else 0.0, 1e-3)
        ts = [0.0] + [s["t"] for s in steps] + [end]
        cs = [f["start_cycles"]] + [s["cycles"] for s in steps]
        cs.append(cs[-1])
        ax.step(ts, cs, where="post", color="#222222", linewidth=1.6,
                label=f"best cycles, now {cs[-1]}")
        colors = proposer_colors(f)
        for name in dict.fromkeys(s["proposer"] for s in steps):
            mine = [s for s in steps if s["proposer"] == name]
            ax.scatter([s["t"] for s in mine], [s["cycles"] for s in mine], zorder=3, s=28,
                       color=colors.get(name, "#444444"), label=f"step by {name}")
        ax.axhline(f["baseline_cycles"], color=BASELINE_COLOR, linestyle="--", linewidth=1)
        ax.axhline(f["roofline_cycles"], color=ROOFLINE_COLOR, linestyle="--", linewidth=1)
        top = max(f["baseline_cycles"], f["start_cycles"])
        ax.set_ylim(0, top * 1.12)
        _right_labels(ax, [(f["baseline_cycles"], f"baseline {f['baseline_cycles']}",
                            BASELINE_COLOR),
                           (f["roofline_cycles"], f"roofline {f['roofline_cycles']}",
                            ROOFLINE_COLOR)])
        ax.set_xlim(0, end * 1.01)
        ax.set_xlabel("time since the start of the run (s)")
        ax.set_ylabel("cycles")
        ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=4, fontsize=8)
        ax.grid(axis="y", color="#eeeeee")
        return _svg(fig, "trajectory")


def outcomes_svg(f: dict) -> str:
    """Left: one bar per proposer, split by outcome as a share of its proposals. Right:
    each proposer's share of the cycles the search saved (what matters)."""
    names = list(f["proposers"])
    with _figure("outcomes", (10, 1.1 + 0.45 * max(1, len(names))), left=1.35, right=0.2,
                 top=0.4, wspace=0.14) as fig:
        ax, saving = fig.subplots(1, 2, sharey=True, width_ratios=[3, 1.2])
        outcomes = list(f["outcomes"])
        for i, name in enumerate(names):
            p = f["proposers"][name]
            total, left = max(1, p["proposals"]), 0.0
            for o in outcomes:
                n = p["outcomes"].get(o, 0)
                share = n / total
                ax.barh(i, share, left=left, color=OUTCOME_COLORS.get(o, "#cccccc"),
                        edgecolor="white", linewidth=0.5, height=0.6,
                        label=o if i == 0 else None)
                if share >= 0.06:
                    ax.text(left + share / 2, i, str(n), ha="center", va="center",
                            fontsize=8, color="white" if o in (WRONG, ACCEPTED, BEST)
                            else "#222222")
                left += share
            share = p["improvement_share"]
            saving.barh(i, share, color=proposer_colors(f).get(name, "#444444"), height=0.6)
            saving.text(min(share, 0.7) + 0.02, i, format_share(share), va="center",
                        fontsize=8)
        ax.set_yticks(range(len(names)),
                      [f"{n}\n({plural(f['proposers'][n]['proposals'], 'proposal')})"
                       for n in names])
        ax.invert_yaxis()
        ax.set_xlim(0, 1)
        ax.xaxis.set_major_formatter(_percent())
        ax.set_xlabel("share of the proposer's candidates")
        ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=len(outcomes), fontsize=8)
        saving.set_xlim(0, 1)
        saving.xaxis.set_major_formatter(_percent())
        saving.set_xlabel("share of the cycles saved")
        saving.set_title("share of saving")
        saving.tick_params(axis="y", left=False)
        return _svg(fig, "outcomes")


def acceptance_svg(f: dict) -> str:
    """Share of candidates the chains moved to, per slice of time, over the number of
    candidates per second."""
    bins = f["timeline"]
    with _figure("acceptance", (10, 2.8), left=0.85, right=0.85, top=0.35) as fig:
        ax = fig.subplots()
        rate_ax = ax.twinx()
        if bins:
            width = bins[0]["t1"] - bins[0]["t0"]
            mids = [(b["t0"] + b["t1"]) / 2 for b in bins]
            rate_ax.bar(mids, [b["proposals"] / width for b in bins], width=width * 0.9,
                        color="#e8e8e8", zorder=0)
            # an empty slice has no acceptance: the line breaks there (NaN), it does not
            # draw a rate across a time when nothing was tried
            shares = [b["accepted"] / b["proposals"] if b["proposals"] else float("nan")
                      for b in bins]
            ax.plot(mids, shares, color="#3a7bd5", marker="o", markersize=3, linewidth=1.4)
            ax.axhline(f["acceptance"], color="#3a7bd5", linestyle=":", linewidth=1)
            ax.set_title(f"overall {f['acceptance'] * 100:.1f}% accepted (dotted)",
                         loc="right", fontsize=8, fontweight="normal", color="#3a7bd5")
            ax.set_xlim(0, bins[-1]["t1"])
        ax.set_zorder(rate_ax.get_zorder() + 1)
        ax.patch.set_visible(False)
        ax.set_ylim(0, 1.05)
        ax.yaxis.set_major_formatter(_percent())
        ax.set_ylabel("accepted", color="#3a7bd5")
        rate_ax.set_ylabel("candidates / s (grey bars)", color="#888888")
        rate_ax.spines["right"].set_visible(True)
        ax.set_xlabel("time since the start of the run (s)")
        return _svg(fig, "acceptance")


def profile_svg(f: dict) -> str:
    """The schedule of the baseline and of the best, one row per resource, on one time
    axis; the roofline is the dashed line no kernel can beat."""
    profiles = [("baseline", f["profiles"]["baseline"]), ("best", f["profiles"]["best"])]
    order = list(RESOURCE_COLORS)
    used = {o["resource"] for _, p in profiles for o in p["ops"] if o["resource"]}
    rows = [r for r in order if r in used] + sorted(used - set(order)) or ["(no ops)"]
    end = max(p["cycles"] for _, p in profiles) or 1
    with _figure("profile", (10, 1.4 + 0.9 * len(rows)), left=0.95, right=0.2, top=0.35,
                 hspace=0.55) as fig:
        axes = fig.subplots(2, 1, sharex=True)
        for ax, (title, p) in zip(axes, profiles, strict=True):
            critical = set(p.get("critical_path", []))
            for o in p["ops"]:
                if not o["resource"] or o["end"] <= o["start"]:
                    continue
                y = rows.index(o["resource"])
                ax.barh(y, o["end"] - o["start"], left=o["start"], height=0.7,
                        color=RESOURCE_COLORS.get(o["resource"], "#999999"),
                        edgecolor="#222222" if o["index"] in critical else "white",
                        linewidth=0.8)
                if (o["end"] - o["start"]) / end > _LABEL_FRACTION * (len(o["op"]) + 1):
                    ax.text((o["start"] + o["end"]) / 2, y, o["op"], ha="center",
                            va="center", fontsize=7, color="white")
            ax.axvline(f["roofline_cycles"], color=ROOFLINE_COLOR, linestyle="--",
                       linewidth=1)
            ax.axvline(p["cycles"], color="#222222", linewidth=1)
            ax.set_title(f"{title}: {p['cycles']} cycles")
            ax.set_yticks(range(len(rows)), rows)
            ax.set_ylim(len(rows) - 0.5, -0.5)
        axes[0].text(f["roofline_cycles"], -0.5, " roofline", color=ROOFLINE_COLOR,
                     va="bottom", fontsize=8)
        axes[1].set_xlim(0, end * 1.02)
        axes[1].set_xlabel("cycles (outlined: on the critical path)")
        return _svg(fig, "profile")


# ---------------------------------------------------------------------------------
# matplotlib plumbing
# ---------------------------------------------------------------------------------

@contextmanager
def _figure(name: str, size: tuple[float, float], *, left: float, right: float,
            top: float, bottom: float = 0.55, wspace: float = 0.2, hspace: float = 0.2):
    """A figure with fixed margins, in inches (room for tick labels, the axis labels,
    the labels on the right and the legend above). Not a layout engine: matplotlib
    draws a figure twice to save it with one (once to lay it out), and the four charts
    of a page are most of the time `stochopt report --html` takes."""
    import matplotlib
    from matplotlib.figure import Figure

    width, height = size
    # a salt per chart keeps the ids of clip paths unique when the SVGs share a page
    with matplotlib.rc_context({**_STYLE, "svg.hashsalt": f"stochopt-{name}"}):
        fig = Figure(figsize=size)
        fig.subplots_adjust(left=left / width, right=1 - right / width,
                            top=1 - top / height, bottom=bottom / height,
                            wspace=wspace, hspace=hspace)
        yield fig


def _svg(fig, name: str) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    # scale with the page: drop the fixed size, keep the viewBox
    head, rest = text.split(">", 1)
    head = re.sub(r'\s(width|height)="[^"]*"', "", head)
    return (f'{head} class="chart" data-chart="{name}" role="img" '
            f'aria-label="{name} chart">{rest}')


def _right_labels(ax, marks: list[tuple[float, str, str]]) -> None:
    """Labels for horizontal lines, outside the plot on the right, where no data line
    can run through them; two that would touch are pushed apart."""
    labels = ax.twinx()
    labels.set_ylim(ax.get_ylim())
    marks = sorted(marks)
    labels.set_yticks([m[0] for m in marks], [m[1] for m in marks])
    low, high = ax.get_ylim()
    close = len(marks) == 2 and (marks[1][0] - marks[0][0]) < 0.08 * (high - low)
    for i, (tick, (_, _, color)) in enumerate(zip(labels.get_yticklabels(), marks,
                                                   strict=True)):
        tick.set_color(color)
        if close:
            tick.set_verticalalignment("top" if i == 0 else "bottom")
    labels.tick_params(axis="y", length=0)
    labels.spines["right"].set_visible(False)


def _percent():
    from matplotlib.ticker import PercentFormatter
    return PercentFormatter(xmax=1.0, decimals=0)
