"""How the API's objects show themselves in Jupyter, and optimize's live progress."""

# the report tests' run-directory fixtures are imported below, so their names come back
# as test parameters
# ruff: noqa: F811

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

import pytest
from IPython.core.formatters import DisplayFormatter

import stochopt
from stochopt import notebook
from stochopt.leir import render
from stochopt.search.driver import RunResult
from tests.report.conftest import best_cycles, finished_run, make_run  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
SOFTMAX = ROOT / "specs" / "softmax.py"
SMALL = "small"


def text_of(markup: str) -> str:
    """What a reader sees: tags dropped, entities decoded, spaces collapsed."""
    no_style = re.sub(r"<style>.*?</style>", "", markup, flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", no_style)).split())


@pytest.fixture(scope="module")
def kernel():
    return stochopt.lower(SOFTMAX, machine=SMALL)


@pytest.fixture(scope="module")
def report_shown(finished_run):
    """A run's report and what Jupyter's formatter gets from it. The page draws four
    matplotlib charts (about a second): formatted once, for the tests that read it."""
    facts = stochopt.report(finished_run)
    data, _ = DisplayFormatter().format(facts)
    return facts, data


def test_jupyter_finds_html_and_markdown_for_every_object(kernel, finished_run,
                                                         report_shown):
    rd = finished_run
    objects = [kernel, stochopt.verify(kernel, examples=3, machine=SMALL),
               stochopt.run(kernel, machine=SMALL), _result(rd, 1000)]
    formatter = DisplayFormatter()
    shown = [(type(obj), formatter.format(obj)[0]) for obj in objects]
    shown.append((type(report_shown[0]), report_shown[1]))  # the report, formatted alike
    for kind, data in shown:
        assert data["text/html"].startswith("<div class='stochopt-report'>"), kind
        assert data["text/markdown"].strip(), kind


def test_a_kernel_shows_its_signature_and_highlighted_text(kernel):
    page = kernel._repr_html_()
    shown = text_of(page)
    assert "kernel softmax(x: f32[128,1024] @ dram) -> f32[128,1024] @ dram" in shown
    ops = len(kernel.nodes) - len(kernel.params)
    assert f"{ops} ops" in shown
    compact = "".join(shown.split())  # the highlighter cuts lines into many spans
    for line in render(kernel).splitlines():
        assert "".join(line.split()) in compact
    assert "style=\"color" in page  # highlighted by pygments, with inline colours
    assert kernel._repr_markdown_().count("```") == 2


def test_an_equivalent_verdict_shows_its_inputs_and_errors(kernel):
    verdict = stochopt.verify(kernel, examples=3, seed=7, machine=SMALL)
    shown = text_of(verdict._repr_html_())
    assert "EQUIVALENT" in shown and "NOT EQUIVALENT" not in shown
    assert f"{verdict.examples}, seed 7" in shown
    assert f"{verdict.max_precision_error:.3g} of what is allowed" in shown


def test_a_failed_verdict_shows_its_counterexample(kernel, tmp_path):
    wrong = render(kernel).replace(" / ", " * ")
    verdict = stochopt.verify(wrong, SOFTMAX, examples=3, machine=SMALL,
                              counterexample_path=tmp_path / "cex.npz")
    mismatch = verdict.counterexample.mismatch
    shown = text_of(verdict._repr_html_())
    assert "NOT EQUIVALENT" in shown
    assert f"{mismatch.check} at index {list(mismatch.index)}" in shown
    assert f"expected {mismatch.expected!r}" in shown and f"got {mismatch.got!r}" in shown
    assert f"saved to {tmp_path / 'cex.npz'}" in shown
    x = verdict.counterexample.inputs["x"]
    assert f"x {x.dtype}[128, 1024] min {float(x.min()):.4g}" in shown
    markdown = verdict._repr_markdown_()
    assert markdown.startswith("**NOT EQUIVALENT**") and "expected" in markdown


def test_an_execution_shows_cycles_roofline_and_its_profile(kernel):
    execution = stochopt.run(kernel, machine=SMALL)
    shown = text_of(execution._repr_html_())
    assert f"cycles {execution.cycles}" in shown
    assert f"roofline {execution.roofline_cycles}" in shown
    assert f"{100 * execution.roofline_share:.1f}% of roofline" in shown
    for op in {o.op for o in execution.profile.ops if o.op != "input"}:
        assert op in shown  # a row of the per-op profile table
    assert f"bottleneck {execution.profile.bottleneck()}" in execution._repr_markdown_()


def _result(rd: Path, best: int) -> RunResult:
    return RunResult(str(rd), "softmax", "mncore2", 7652, best, round(7652 / best, 4), 1536,
                     round(1536 / best, 4), str(rd / "best.leir"), 11, 5, True, 10.0, 10.0,
                     "budget")


def test_a_run_result_shows_its_summary_and_best_cycles_chart(make_run, best_cycles):
    rd = make_run()
    page = _result(rd, best_cycles)._repr_html_()
    shown = text_of(page)
    assert f"7652 → {best_cycles} cycles" in shown
    assert f"{7652 / best_cycles:.2f}x" in shown
    assert "Best cycles over time" in shown
    assert page.count("<svg") == 1 and 'data-chart="trajectory"' in page
    # the chart marks the steps found by each proposer of the story, and the roofline
    assert "roofline 1536" in shown and "step by llm" in shown


def test_a_run_result_whose_directory_is_gone_still_shows_its_summary(make_run, best_cycles):
    rd = make_run()
    result = _result(rd, best_cycles)
    shutil.rmtree(rd)
    shown = text_of(result._repr_html_())
    assert f"softmax on mncore2: 7652 -> {best_cycles} cycles" in shown
    assert f"run directory: {rd}" in shown


def test_a_report_shows_the_whole_page_with_its_css_scoped(report_shown, best_cycles):
    facts, data = report_shown
    page = data["text/html"]  # what the formatter got from facts._repr_html_()
    for chart in ("trajectory", "outcomes", "acceptance", "profile"):
        assert f'data-chart="{chart}"' in page
    shown = text_of(page)
    for key in ("Summary", "Outcomes by proposer", "Best kernel", "Baseline → best"):
        assert key in shown
    assert f"{facts['speedup']:.2f}x" in shown and "reciprocal(v5)" in shown
    assert "<html" not in page and "<body" not in page
    style = page[page.index("<style>") + 7:page.index("</style>")]
    for selector in re.findall(r"([^{}]+)\{", style):
        selector = selector.strip()
        if not selector.startswith("@"):
            assert all(s.strip().startswith(".stochopt-report") for s in selector.split(",")), \
                selector
    markdown = data["text/markdown"]  # facts._repr_markdown_()
    assert f"| cycles | 7652 -> {best_cycles} ({facts['speedup']:.2f}x) |" in markdown


# ---------------------------------------------------------------------------------
# live progress
# ---------------------------------------------------------------------------------

SNAPSHOT = {"spec": "softmax", "elapsed_s": 3.0, "budget_s": 60.0, "proposals": 40,
            "rate": 12.0, "accepted": 9, "best_cycles": 4321, "baseline_cycles": 7652,
            "speedup": 7652 / 4321, "roofline_share": 1536 / 4321, "tokens": 0,
            "cost_usd": 0.0, "by_proposer": {"mutate": {"best": 2, "rejected": 30}},
            "errors": []}


def test_plain_python_is_not_jupyter():
    assert not notebook.in_jupyter()


def test_the_progress_callback_is_called_at_most_every_quarter_second(monkeypatch):
    clock = iter([100.0, 100.1, 100.2, 100.3, 100.4, 100.5, 100.6])
    monkeypatch.setattr(notebook.time, "monotonic", lambda: next(clock))
    seen = []
    with notebook.live_progress(seen.append, live=False) as on_progress:
        for k in range(7):
            on_progress({**SNAPSHOT, "proposals": k})
    assert [s["proposals"] for s in seen] == [0, 3, 6]


def test_no_callback_and_no_view_hands_the_search_nothing():
    with notebook.live_progress(None, live=False) as on_progress:
        assert on_progress is None


def test_in_jupyter_the_live_view_redraws_one_output_in_place(monkeypatch):
    import IPython.display

    shown = []

    class Handle:
        def update(self, obj):
            shown.append(obj.data)

    monkeypatch.setattr(notebook, "in_jupyter", lambda: True)
    monkeypatch.setattr(IPython.display, "display",
                        lambda obj, display_id=False: (shown.append(obj.data), Handle())[1])
    with notebook.live_progress(None, live=None) as on_progress:
        for k in range(5):
            on_progress({**SNAPSHOT, "best_cycles": 5000 - k, "proposals": 40 + k})
    assert "starting the search" in shown[0]
    last = text_of(shown[-1])
    assert "softmax" in last and "best 4996 cycles" in last and "44 proposed" in last
    assert len(shown) <= 3  # drawn twice a second at most, and once at the end


def test_a_live_view_that_fails_warns_once_and_the_search_goes_on(monkeypatch):
    import IPython.display

    class BrokenHandle:
        def update(self, obj):
            raise RuntimeError("the front end went away")

    monkeypatch.setattr(notebook, "in_jupyter", lambda: True)
    monkeypatch.setattr(IPython.display, "display",
                        lambda obj, display_id=False: BrokenHandle())
    seen = []
    with pytest.warns(UserWarning, match="the live view stopped.*front end went away"):
        with notebook.live_progress(seen.append, live=None) as on_progress:
            on_progress(SNAPSHOT)
            on_progress(SNAPSHOT)
    assert seen == [SNAPSHOT]
