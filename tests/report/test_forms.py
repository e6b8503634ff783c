"""The three forms of `stochopt report` (terminal, JSON, HTML) as a user gets them, and
the promise that they show the same numbers for the same run."""

from __future__ import annotations

import html
import io
import json
import os
import re

import pytest
from click.testing import CliRunner
from rich.console import Console

from stochopt.cli import main
from stochopt.report.facts import run_facts
from stochopt.report.html import render_html
from stochopt.report.terminal import report_view
from stochopt.report.words import format_share, format_speedup, format_usd


def terminal_text(facts: dict, width: int = 120) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(report_view(facts, width=width))
    return console.export_text()


def headline_numbers(f: dict) -> list[str]:
    """The numbers of the summary, as every form must print them."""
    return [str(f["baseline_cycles"]), str(f["best_cycles"]), str(f["roofline_cycles"]),
            format_speedup(f["speedup"]), format_share(f["roofline_share"]),
            format_share(f["acceptance"]), f"{f['proposals']} ", f"{f['accepted']} accepted",
            format_usd(f["cost_usd"]), f"{f['tokens']} tokens"]


def proposer_cells(f: dict, name: str, wide: bool = True) -> list[str]:
    """A proposer's row as the tables print it (a narrow terminal leaves out cycles saved
    and tokens)."""
    p = f["proposers"][name]
    cells = [str(p["proposals"]), *(str(p["outcomes"][o]) for o in f["outcomes"]),
             str(p["improvements"])] + [str(p["cycles_saved"])] * wide + \
        [format_share(p["improvement_share"])]
    if f["tokens"] or f["cost_usd"]:
        cells += [str(p["tokens"])] * wide + [format_usd(p["cost_usd"])]
    return cells


def html_rows(page: str) -> dict[str, list[str]]:
    """Table rows of the page, by their first cell."""
    rows = {}
    for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", page, flags=re.S):
        cells = [html.unescape(re.sub(r"<[^>]+>", "", c)).strip()
                 for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", tr, flags=re.S)]
        if cells:
            rows.setdefault(cells[0], cells[1:])
    return rows


@pytest.fixture(scope="module")
def finished_page(finished_run, tmp_path_factory) -> str:
    """The finished run's page as `stochopt report --html` writes it. Its four matplotlib
    charts take about a second to draw: drawn once, for the tests that only read it."""
    page_path = tmp_path_factory.mktemp("page") / "report.html"
    out = CliRunner().invoke(main, ["report", str(finished_run), "--html", str(page_path)])
    assert out.exit_code == 0, out.output
    return page_path.read_text()


# ---------------------------------------------------------------------------------

def test_the_three_forms_show_the_same_numbers(finished_run, finished_page):
    rd = finished_run
    out = CliRunner().invoke(main, ["report", str(rd), "--json"])
    assert out.exit_code == 0, out.output
    facts = json.loads(out.output)
    assert facts == json.loads(json.dumps(run_facts(rd)))  # --json is the facts
    text = terminal_text(facts)
    page = finished_page  # the facts of the same run, drawn by report --html
    for number in headline_numbers(facts):
        assert number in text, number
        assert number in html.unescape(page), number
    rows = html_rows(page)
    for name in facts["proposers"]:
        terminal_row = next(line.split() for line in text.splitlines()
                            if line.split()[:1] == [name])
        assert terminal_row[1:] == proposer_cells(facts, name), name
        assert rows[name] == proposer_cells(facts, name), name
    for step in facts["improvements"]:
        cells = [f"{step['t']:.1f}s", str(step["cycles"]), str(step["saved"])]
        assert rows[cells[0]][:2] == cells[1:]
        assert " ".join(cells) in " ".join(text.split())


@pytest.mark.slow  # a real search (the session's real_run)
def test_json_has_the_documented_keys(real_run):
    rd, _ = real_run
    out = CliRunner().invoke(main, ["report", str(rd), "--json"])
    facts = json.loads(out.output)
    for key in ("spec", "machine", "baseline_cycles", "best_cycles", "speedup",
                "roofline_cycles", "roofline_share", "proposals", "accepted", "verified",
                "elapsed_s", "budget_s", "best_path", "proposers", "status"):
        assert key in facts, key
    for p in facts["proposers"].values():
        assert {"proposals", "outcomes", "improvements", "tokens", "cost_usd"} <= set(p)
    assert facts["status"] == "finished"


@pytest.mark.slow  # a real search (the session's real_run)
def test_terminal_report_of_a_real_run_has_every_section(real_run):
    rd, result = real_run
    out = CliRunner().invoke(main, ["report", str(rd)], env={"COLUMNS": "120"})
    assert out.exit_code == 0, out.output
    text = out.output
    for heading in ("outcomes by proposer", "best cycles over time", "best kernel",
                    "baseline -> best", "--- baseline.leir", "+++ best.leir"):
        assert heading in text, heading
    assert f"{result.baseline_cycles} -> {result.best_cycles}" in text
    assert format_speedup(result.speedup) in text
    assert "def softmax" in text


def test_terminal_report_fits_a_narrow_terminal(make_run):
    facts = run_facts(make_run())
    text = terminal_text(facts, width=80)
    assert max(map(len, text.splitlines())) <= 80
    row = next(line.split() for line in text.splitlines() if line.split()[:1] == ["llm"])
    assert row[1:] == proposer_cells(facts, "llm", wide=False)


def test_trajectory_chart_falls_from_the_baseline_row_toward_the_roofline(make_run):
    from stochopt.report.terminal import trajectory_chart

    facts = run_facts(make_run())  # first step at 1.0 s of 10 s
    rows = trajectory_chart(facts, width=60, height=8).plain.splitlines()
    assert rows[0].startswith(str(facts["start_cycles"])) and rows[0].endswith("baseline")
    assert rows[7].startswith(str(facts["roofline_cycles"])) and rows[7].endswith("roofline")
    bars = [r.split("┤", 1)[1] for r in rows[:8]]
    columns = len(bars[7]) - len(" roofline")
    eighths = " ▁▂▃▄▅▆▇█"
    heights = [sum(eighths.index(b[c]) if c < len(b) and b[c] in eighths else 0
                   for b in bars) for c in range(columns)]
    assert heights[0] == 64  # the baseline fills the chart
    assert all(a >= b for a, b in zip(heights, heights[1:], strict=False))  # never rises
    gap = (facts["best_cycles"] - facts["roofline_cycles"]) / \
        (facts["start_cycles"] - facts["roofline_cycles"])
    assert heights[-1] == round(64 * gap)
    assert sum(h == 64 for h in heights) == pytest.approx(columns / 10, abs=1)


def test_html_page_is_self_contained_with_its_svg_charts(finished_run, finished_page):
    rd = finished_run
    page = finished_page  # written by report --html
    assert page.startswith("<!DOCTYPE html>")
    charts = re.findall(r'<svg[^>]*data-chart="(\w+)"', page)
    assert charts == ["trajectory", "outcomes", "acceptance", "profile"]
    assert "<script" not in page and "<link" not in page and "src=" not in page
    assert "@import" not in page and "url(http" not in page
    # the chart text is text: the numbers on the trajectory chart can be found
    facts = run_facts(rd)
    trajectory = page[page.index('data-chart="trajectory"'):]
    trajectory = trajectory[:trajectory.index("</svg>")]
    assert f"baseline {facts['baseline_cycles']}" in trajectory
    assert f"roofline {facts['roofline_cycles']}" in trajectory
    assert f"best cycles, now {facts['best_cycles']}" in trajectory
    # the diff, coloured
    assert "class='add'" in page and "class='del'" in page


@pytest.mark.parametrize("state", ["running", "killed"])
def test_every_form_works_on_a_run_that_is_not_finished(make_run, tmp_path, state):
    rd = make_run(finished=False, age_s=1 if state == "running" else 3600)
    if state == "killed":  # kill -9 in mid-write, an hour ago
        events = rd / "events.jsonl"
        stamp = events.stat().st_mtime
        with open(events, "a") as f:
            f.write('{"chain":0,"proposer":"mut')
        os.utime(events, (stamp, stamp))
    facts = json.loads(CliRunner().invoke(main, ["report", str(rd), "--json"]).output)
    assert facts["status"] == ("running" if state == "running" else "stopped")
    text = terminal_text(facts)
    assert facts["status"] in text and format_speedup(facts["speedup"]) in text
    page = render_html(facts)
    assert f"badge {facts['status']}" in page and page.count("<svg") == 4
    if state == "killed":
        assert "cut short" in " ".join(text.split()) and "cut short" in page


def test_report_of_a_folder_that_is_no_run_exits_2(tmp_path):
    out = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert out.exit_code == 2
    assert "not a run directory" in " ".join(out.output.split())


# ---------------------------------------------------------------------------------
# what a new user tripped on
# ---------------------------------------------------------------------------------

def test_a_run_without_an_llm_says_none_not_zero_dollars(make_run, tmp_path):
    f = run_facts(make_run(events=[], llm=None))
    assert dict(headline_rows(f))["LLM"] == "none configured (built-in proposers only)"
    page = render_html(f)
    assert "$0.0000" not in page and "built-in proposers only" in page
    assert "$0.0000" not in terminal_text(f)


def headline_rows(f: dict) -> list[tuple[str, str]]:
    from stochopt.report.facts import headline
    return headline(f)


def test_counts_of_one_are_singular(make_run):
    from stochopt.report.charts import outcomes_svg
    from tests.report.conftest import _event

    f = run_facts(make_run(events=[_event(1.0, 0, "mutate", "rejected", 9000)]))
    svg = outcomes_svg(f)
    assert "(1 proposal)" in svg and "1 proposals" not in svg


def test_a_garbage_best_leir_is_not_verified(make_run, tmp_path):
    rd = make_run()
    (rd / "best.leir").write_text("this is not a kernel\n")
    f = run_facts(rd)
    assert f["verified"] is False
    assert any("best.leir is not a valid kernel" in n for n in f["notes"])
    out = CliRunner().invoke(main, ["report", str(rd)])
    assert out.exit_code == 0
    assert re.search(r"verified\s+NO", out.stdout)


def test_profile_rows_are_numbered_by_their_kernel_line(finished_run, finished_page):
    """The listing numbers the kernel's lines; the profile tables use the same numbers."""
    f = run_facts(finished_run)
    best_lines = f["kernels"]["best"].splitlines()
    for op in f["profiles"]["best"]["ops"]:
        if op["op"] != "input":
            line = best_lines[op["line"] - 1].strip()
            assert line.startswith((f"{op['name']} = ", "return ")), (op, line)
    page = finished_page  # the same run's page
    assert html_rows(page)["line"][:2] == ["op", "name"]
    assert re.search(r"<td>\*?8</td><td class='text'><code>reciprocal", page)


def test_run_profile_numbers_ops_by_their_kernel_line(tmp_path):
    from tests.report.conftest import BEST
    kernel = tmp_path / "best.leir"
    kernel.write_text(BEST)
    out = CliRunner().invoke(main, ["run", str(kernel), "--profile"])
    assert out.exit_code == 0, out.output
    rows = [line.split() for line in out.stdout.splitlines()]
    recip = next(r for r in rows if "reciprocal" in r)
    assert recip[0].lstrip("*") == "8"  # line 8 of BEST: v4_1 = reciprocal(v5)
