"""The HTML report: one self-contained page (inline CSS and SVG, no scripts, nothing
fetched) built from the facts of a run (see facts.py)."""

from __future__ import annotations

import html
import re
import time

from stochopt.report.charts import OUTCOME_COLORS, RESOURCE_COLORS, all_charts
from stochopt.report.facts import headline, llm_configured
from stochopt.report.history import history_html
from stochopt.report.llm_facts import (
    IMPROVEMENT_COLUMNS,
    YIELD_COLUMNS,
    improvement_rows,
    yield_tables,
)
from stochopt.report.terminal import credit_text, op_label
from stochopt.report.words import (
    format_seconds,
    format_share,
    format_speedup,
    format_usd,
    plural,
)


def render_html(facts: dict) -> str:
    """The whole page as a string."""
    f = facts
    charts = all_charts(f)
    title = f"stochopt report: {f['spec']} on {f['machine']}"
    body = [
        _header(f),
        _cards(f),
        _summary_section(f),
        _trajectory_section(f, charts["trajectory"]),
        _section("Outcomes by proposer",
                 _figure(charts["outcomes"], "What became of each proposer's candidates. "
                         "<b>best</b>: a new best for its chain that passed the full check; "
                         "<b>accepted</b>: taken by the Metropolis&ndash;Hastings chain; "
                         "<b>unproved</b>: faster than the best, but its full check did not "
                         "finish before the run ended (kept as unproved.leir); "
                         "<b>rejected</b>: refused for its cycles (too slow); "
                         "<b>wrong</b>: failed the screening inputs or the full check; "
                         "<b>invalid</b> and <b>parse_error</b>: never ran.")
                 + _proposer_table(f) + _llm_variants_table(f)),
        _section("Acceptance over time",
                 _figure(charts["acceptance"], "The share of candidates the chains moved "
                         "to (accepted or best) in each slice of the run; grey bars are "
                         "the candidates tried per second.")),
        _section("Profile: baseline and best",
                 _figure(charts["profile"], "When each op runs on each resource. Both "
                         "kernels share the time axis; the red dashed line is the "
                         "roofline.") + _profile_tables(f)),
        _section("Best kernel", _code(f["kernels"]["best"]) +
                 f"<p class='muted'>{html.escape(f['best_path'])}</p>"),
        _section("Baseline &rarr; best", _diff(f["diff"])),
        history_html(f.get("history")),
        f"<footer>stochopt report, written {time.strftime('%Y-%m-%d %H:%M:%S')}</footer>",
    ]
    return (f"<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'>\n"
            f"<title>{html.escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n"
            f"<body>\n<main>\n" + "\n".join(body) + "\n</main>\n</body>\n</html>\n")


# ---------------------------------------------------------------------------------
# sections
# ---------------------------------------------------------------------------------

def _header(f: dict) -> str:
    status = f["status"]
    return (f"<header><h1>{html.escape(f['spec'])} <span class='muted'>on "
            f"{html.escape(f['machine'])}</span> <span class='badge {status}'>{status}</span>"
            f"</h1><p class='muted'>{html.escape(f['run_dir'])} &middot; started "
            f"{html.escape(str(f['started']))} &middot; proposer {html.escape(str(f['proposer']))}"
            f" ({html.escape(', '.join(f['arms']))}), {f['chains']} chain(s), seed "
            f"{f['seed']}</p></header>")


def _cards(f: dict) -> str:
    cards = [
        ("speedup", format_speedup(f["speedup"]),
         f"{f['baseline_cycles']} &rarr; {f['best_cycles']} cycles"),
        ("of roofline", format_share(f["roofline_share"]),
         f"roofline {f['roofline_cycles']} cycles"),
        *([("of bound", format_share(f["bound_share"]), f"bound {f['bound_cycles']} cycles")]
          if f.get("bound_cycles") else []),
        ("verified", "yes" if f["verified"] else "NO",
         plural(f["verification"]["examples"] or 0, "example") if f["verification"]
         else "best.leir"),
        ("candidates", str(f["proposals"]),
         f"{f['accepted']} accepted ({format_share(f['acceptance'])})"),
        ("time", format_seconds(f["elapsed_s"]),
         f"of {format_seconds(f['budget_s'])} ({format_share(f['budget_used'])})"),
        ("LLM", format_usd(f["cost_usd"]), plural(f["tokens"], "token"))
        if llm_configured(f) else ("LLM", "none", "built-in proposers only"),
    ]
    out = []
    for label, value, sub in cards:
        cls = "card bad" if label == "verified" and not f["verified"] else "card"
        out.append(f"<div class='{cls}'><div class='label'>{label}</div>"
                   f"<div class='value'>{value}</div><div class='sub'>{sub}</div></div>")
    return "<div class='cards'>" + "".join(out) + "</div>"


def _summary_section(f: dict) -> str:
    return _section("Summary", _key_values(headline(f) + [("run", f["run_dir"])]) + _notes(f))


def _trajectory_section(f: dict, svg: str) -> str:
    return _section("Best cycles over time",
                    _figure(svg, "Each dot is a new best verified kernel, in the colour of "
                            "the proposer that found it. The dashed lines are the baseline "
                            "(grey) and the roofline (red), the spec's lower bound.")
                    + _improvements_table(f))


def _section(title: str, content: str) -> str:
    return f"<section><h2>{title}</h2>\n{content}\n</section>"


def _figure(svg: str, caption: str) -> str:
    # the chart keeps a legible size on a phone and scrolls sideways in its own box
    return (f"<figure><div class='chart-box'>{svg}</div><figcaption>{caption}</figcaption>"
            "</figure>")


def _key_values(rows: list[tuple[str, str]]) -> str:
    cells = "".join(f"<tr{' class=bad' if k == 'LLM status' else ''}><th>{html.escape(k)}"
                    f"</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return f"<table class='kv'>{cells}</table>"


def _notes(f: dict) -> str:
    return "".join(f"<p class='note'>{html.escape(n)}</p>" for n in f["notes"])


def _improvements_table(f: dict) -> str:
    if not f["improvements"]:
        return "<p class='muted'>No improvement over the starting kernel yet.</p>"
    text_columns = ("proposer", "move", "credited to")
    head = "".join(f"<th{' class=text' if c in text_columns else ''}>{c}</th>"
                   for c in ("t", "cycles", "saved", "speedup", "proposer", "move", "chain",
                             "credited to"))
    rows = "".join(
        f"<tr><td>{s['t']:.1f}s</td><td>{s['cycles']}</td><td>{s['saved']}</td>"
        f"<td>{format_speedup(f['baseline_cycles'] / s['cycles'])}</td>"
        f"<td class='text'>{html.escape(s['proposer'])}</td><td class='text'><code>"
        f"{html.escape(str(s['move']))}</code></td><td>{s['chain']}</td>"
        f"<td class='text'>{html.escape(credit_text(s))}</td></tr>"
        for s in f["improvements"])
    return (f"<div class='wide'><table class='num'><thead><tr>{head}</tr></thead>"
            f"<tbody>{rows}</tbody></table></div>")


def _llm_variants_table(f: dict) -> str:
    """What the LLM yielded per reply form and per prompt focus, and the improvements it
    made with what made them."""
    llm = f.get("llm")
    parts = []
    for title, first, rows in yield_tables(llm):
        head = f"<th class=text>{html.escape(title)}: {first}</th>" + "".join(
            f"<th>{html.escape(h)}</th>" for _, h, _ in YIELD_COLUMNS)
        body = "".join(
            f"<tr{' class=total' if r[0] == 'total' else ''}><td class='text'>"
            f"{html.escape(r[0])}</td>" + "".join(f"<td>{html.escape(c)}</td>" for c in r[1:])
            + "</tr>" for r in rows)
        parts.append(f"<div class='wide'><table class='num'><thead><tr>{head}</tr></thead>"
                     f"<tbody>{body}</tbody></table></div>")
    moves = improvement_rows(llm)
    if moves:
        head = "".join(f"<th{' class=text' if c in ('form', 'request', 'made by') else ''}>"
                       f"{c}</th>" for c in IMPROVEMENT_COLUMNS)
        body = "".join("<tr>" + "".join(
            f"<td{' class=text' if j >= 3 else ''}>{html.escape(c)}</td>"
            for j, c in enumerate(r)) + "</tr>" for r in moves)
        parts.append("<p><b>Improvements the LLM made</b> (on the paths to the best)</p>"
                     f"<div class='wide'><table class='num'><thead><tr>{head}</tr></thead>"
                     f"<tbody>{body}</tbody></table></div>")
    parts += [f"<p class='muted'>LLM: {html.escape(n)}</p>" for n in (llm or {}).get(
        "notes", [])]
    return "".join(parts)


def _proposer_table(f: dict) -> str:
    outcomes = list(f["outcomes"])
    llm = llm_configured(f)
    cols = ["proposer", "proposals"] + outcomes + ["improve&shy;ments", "cycles saved",
                                                   "share of saving"]
    cols += ["tokens", "cost"] if llm else []
    head = "".join(
        f"<th><span class='swatch' style='background:{OUTCOME_COLORS[c]}'></span>"
        f"{c.replace('_', '_<wbr>')}</th>"
        if c in OUTCOME_COLORS else f"<th>{c}</th>" for c in cols)
    total = {"proposals": f["proposals"], "outcomes": f["outcomes"],
             "improvements": len(f["improvements"]),
             "cycles_saved": sum(s["saved"] for s in f["improvements"]),
             "improvement_share": 1.0 if f["improvements"] else 0.0,
             "tokens": f["tokens"], "cost_usd": f["cost_usd"]}
    rows = []
    for name, p in list(f["proposers"].items()) + [("total", total)]:
        cells = [html.escape(name), str(p["proposals"])]
        cells += [str(p["outcomes"].get(o, 0)) for o in outcomes]
        cells += [str(p["improvements"]), str(p["cycles_saved"]),
                  format_share(p["improvement_share"])]
        if llm:
            cells += [str(p["tokens"]), format_usd(p["cost_usd"])]
        cls = " class='total'" if name == "total" else ""
        rows.append(f"<tr{cls}>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return (f"<div class='wide'><table class='num wrap'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>")


def _profile_tables(f: dict) -> str:
    tables = []
    for title in ("baseline", "best"):
        p = f["profiles"][title]
        critical = set(p.get("critical_path", []))
        rows = []
        for o in p["ops"]:
            if o["op"] == "input" or not o["resource"]:
                continue
            color = RESOURCE_COLORS.get(o["resource"], "#999")
            mark = "*" if o["index"] in critical else ""
            rows.append(
                f"<tr><td>{mark}{op_label(o)}</td><td class='text'><code>{html.escape(o['op'])}"
                f"</code></td><td class='text'>{html.escape(o['name'])}</td><td class='text'>"
                f"<span class='swatch' style='background:"
                f"{color}'></span>{html.escape(o['resource'])}</td><td>{o['start']}</td>"
                f"<td>{o['end']}</td><td>{o['cycles']}</td><td>{o['bytes']}</td></tr>")
        head = "".join(f"<th{' class=text' if c in ('op', 'name', 'resource') else ''}>{c}</th>"
                       for c in ("line", "op", "name", "resource", "start", "end", "cycles",
                                 "bytes"))
        tables.append(f"<div class='wide'><h3>{title}: {p['cycles']} cycles</h3><table class='num'>"
                      f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody>"
                      "</table></div>")
    return ("<div class='pair'>" + "".join(tables) + "</div><p class='muted'>line: the op's "
            "line in the kernel file (best.leir and baseline.leir, as numbered below); * on "
            "the critical path, the longest chain of dependent ops.</p>")


def _code(text: str) -> str:
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    # pygments comes with rich; inline styles keep the page self-contained
    return highlight(text, PythonLexer(), HtmlFormatter(noclasses=True, nobackground=True,
                                                        linenos="inline", style="friendly",
                                                        cssclass="code"))


def _diff(lines: list[str]) -> str:
    if not lines:
        return "<p class='muted'>best.leir is the baseline (no change).</p>"
    out = []
    for line in lines:
        cls = ("head" if line.startswith(("---", "+++")) else "hunk" if line.startswith("@@")
               else "add" if line.startswith("+") else "del" if line.startswith("-") else "")
        out.append(f"<span class='{cls}'>{html.escape(line)}</span>")
    return "<pre class='diff'>" + "\n".join(out) + "</pre>"


_CSS = """
body { margin: 0; background: #f6f7f9; color: #1d2330;
       font: 14px/1.45 -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
main { max-width: 1100px; margin: 0 auto; padding: 24px 28px 40px; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 0 0 10px; }
h3 { font-size: 14px; margin: 8px 0 6px; }
.muted { color: #6b7280; }
.kv tr.bad td { color: #b91c1c; font-weight: 600; }
header p { margin: 0 0 16px; font-size: 13px; }
.badge { font-size: 13px; padding: 2px 8px; border-radius: 10px; vertical-align: middle;
         color: white; background: #6b7280; }
.badge.finished { background: #2e9e5b; } .badge.running { background: #3a7bd5; }
.badge.stopped { background: #d9822b; }
.cards { display: grid; grid-template-columns: repeat(6, minmax(0, 1fr)); gap: 10px;
         margin-bottom: 16px; }
.card { background: white; border-radius: 8px; padding: 10px 12px; min-width: 0;
        box-shadow: 0 1px 2px rgba(0,0,0,.08); overflow-wrap: anywhere; }
.card .label { font-size: 12px; color: #6b7280; text-transform: uppercase; letter-spacing: .04em; }
.card .value { font-size: 24px; font-weight: 600; margin: 2px 0; }
.card .sub { font-size: 12px; color: #6b7280; }
.card.bad .value { color: #d64545; }
section { background: white; border-radius: 8px; padding: 16px 18px; margin-bottom: 16px;
          box-shadow: 0 1px 2px rgba(0,0,0,.08); }
figure { margin: 0 0 10px; }
figcaption { font-size: 12.5px; color: #4b5563; margin-top: 4px; }
.chart-box { overflow-x: auto; }
svg.chart { width: 100%; min-width: 760px; height: auto; display: block; }
table { border-collapse: collapse; font-size: 13px; }
th, td { padding: 3px 10px 3px 0; text-align: left; }
thead th { border-bottom: 1px solid #d1d5db; font-weight: 600; white-space: nowrap; }
table.num td, table.num th { text-align: right; padding-left: 10px; }
table.num td:first-child, table.num th:first-child { text-align: left; padding-left: 0; }
table.num td.text, table.num th.text { text-align: left; }
td { white-space: nowrap; }
.wide { overflow-x: auto; }
table.wrap thead th { white-space: normal; vertical-align: bottom; }
table.kv th { color: #4b5563; font-weight: 600; padding-right: 18px; vertical-align: top; }
table.kv td { white-space: normal; overflow-wrap: anywhere; }
tr.total td { border-top: 1px solid #d1d5db; font-weight: 600; }
.swatch { display: inline-block; width: 9px; height: 9px; border-radius: 2px;
          margin-right: 4px; vertical-align: baseline; }
/* one table per row: two side by side would not fit their 8 columns in 1100 px */
.pair { display: grid; grid-template-columns: minmax(0, 1fr); gap: 8px; }
.note { background: #fff7e0; border-left: 3px solid #e0b040; padding: 6px 10px; margin: 8px 0 0; }
pre, .code pre { font: 12.5px/1.5 "DejaVu Sans Mono", Menlo, Consolas, monospace;
                 background: #fafafa; border: 1px solid #e5e7eb; border-radius: 6px;
                 padding: 10px 12px; overflow-x: auto; margin: 0; }
.diff .add { background: #e6f6ea; color: #13632f; display: inline-block; width: 100%; }
.diff .del { background: #fdecec; color: #9b1c1c; display: inline-block; width: 100%; }
.diff .hunk { color: #2563eb; } .diff .head { font-weight: 600; }
footer { color: #9ca3af; font-size: 12px; text-align: center; }
header h1, header p { overflow-wrap: anywhere; }
@media (max-width: 1000px) { .cards { grid-template-columns: repeat(3, minmax(0, 1fr)); } }
@media (max-width: 600px) { main { padding: 12px 10px 24px; }
                            section { padding: 12px 10px; }
                            .cards { grid-template-columns: repeat(2, minmax(0, 1fr)); }
                            .card .value { font-size: 20px; } }
"""


# ---------------------------------------------------------------------------------
# fragments: parts of the page for another page (a Jupyter notebook's output)
# ---------------------------------------------------------------------------------

FRAGMENT_CLASS = "stochopt-report"


def report_fragment(facts: dict, brief: bool = False) -> str:
    """The report without the page around it; brief: the headline, the summary and the
    best-cycles chart only (what a notebook shows for a run's result)."""
    if brief:
        from stochopt.report.charts import trajectory_svg

        return fragment(_header(facts) + _cards(facts) + _summary_section(facts)
                        + _trajectory_section(facts, trajectory_svg(facts)))
    page = render_html(facts)
    return fragment(page[page.index("<main>") + len("<main>"):page.rindex("</main>")])


def code_fragment(text: str, caption: str = "") -> str:
    """Kernel text highlighted as the page shows the best kernel; caption is HTML."""
    return fragment(f"<section><p class='muted'>{caption}</p>{_code(text)}</section>")


def key_values_html(rows: list[tuple[str, str]]) -> str:
    return _key_values(rows)


def fragment(content: str) -> str:
    """Content in a wrapper that carries the page's CSS, scoped to the wrapper so that it
    restyles nothing around it."""
    return f"<div class='{FRAGMENT_CLASS}'><style>{_scoped_css()}</style>{content}</div>"


def _scoped_css() -> str:
    scope = f".{FRAGMENT_CLASS}"

    def scoped(match: re.Match) -> str:
        selectors = match.group(1).strip()
        if selectors.startswith("@"):  # @media: its rules inside are scoped one by one
            return match.group(0)
        return ", ".join(scope if s.strip() in ("body", "main") else f"{scope} {s.strip()}"
                         for s in selectors.split(",")) + " {"

    return re.sub(r"([^{}]+)\{", scoped, _CSS)
