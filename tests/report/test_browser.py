"""The HTML report in a real browser: headless Chromium lays the page out at 1280 and
420 px and a small script measures it. Nothing may make the page scroll sideways or
spill out of its box; at 1280 px no table or chart needs a scrollbar; chart text stays
legible (a chart shrunk to a thumbnail fails).

Skipped, saying so, only where no chromium is installed (Debian: apt-get install
chromium; .ci/run installs it). STOCHOPT_SCREENSHOTS=DIR also saves full-page
screenshots there, to look at.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from stochopt.report.facts import run_facts
from stochopt.report.html import render_html
from tests.report.conftest import _event, story

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(n)), None)
pytestmark = [pytest.mark.slow, pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine "
                                 "(apt-get install chromium); the page's layout is untested")]

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--virtual-time-budget=5000"]
SMALLEST_CHART_TEXT_PX = 7.0  # what a chart's smallest label may shrink to on screen

# Headless Chromium keeps its window at least 500 px wide, so the page is laid out in
# an iframe of the width under test, inside a page that only receives the findings.
FRAME = """<!DOCTYPE html><html><body style="margin:0">
<iframe src="{src}" style="width:{width}px;height:{height}px;border:0"></iframe>
<script>addEventListener('message', e => document.body.setAttribute('data-layout', e.data));
</script></body></html>"""

# Runs in the page once laid out; posts its findings to the frame around it.
MEASURE = """<script>
(function () {
  const W = window.innerWidth, problems = [], scrolling = [], fonts = [];
  const name = el => el.tagName.toLowerCase()
    + (typeof el.className === 'string' && el.className ? '.' + el.className.trim()
       .split(/\\s+/).join('.') : '')
    + (el.dataset && el.dataset.chart ? '[' + el.dataset.chart + ']' : '');
  const page = document.documentElement.scrollWidth;
  if (page > W) problems.push('the page scrolls sideways: ' + page + ' px in ' + W + ' px');
  const scrollBoxes = [];
  for (const el of document.querySelectorAll('body *')) {
    const overflow = getComputedStyle(el).overflowX;
    if (overflow === 'auto' || overflow === 'scroll') {
      scrollBoxes.push(el);
      if (el.scrollWidth > el.clientWidth + 1)
        scrolling.push(name(el) + ' ' + el.scrollWidth + ' > ' + el.clientWidth);
    }
  }
  const inScrollBox = el => scrollBoxes.some(box => box !== el && box.contains(el));
  // every box stays inside its section (or its card), unless a scroll box holds it
  for (const outer of document.querySelectorAll('section, .card, header')) {
    const r = outer.getBoundingClientRect();
    for (const el of outer.querySelectorAll('*')) {
      if (inScrollBox(el)) continue;
      const b = el.getBoundingClientRect();
      if (b.width && (b.right > r.right + 1 || b.left < r.left - 1))
        problems.push(name(el) + ' spills out of ' + name(outer) + ' by '
                      + Math.round(Math.max(b.right - r.right, r.left - b.left)) + ' px');
    }
    if (outer.scrollWidth > outer.clientWidth + 1)
      problems.push(name(outer) + ' content is ' + outer.scrollWidth + ' px wide in '
                    + outer.clientWidth + ' px');
  }
  for (const svg of document.querySelectorAll('svg.chart')) {
    const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
    let smallest = Infinity;
    for (const t of svg.querySelectorAll('text'))
      smallest = Math.min(smallest, parseFloat(getComputedStyle(t).fontSize) * scale);
    fonts.push([svg.dataset.chart, smallest]);
  }
  parent.postMessage(JSON.stringify({width: W, problems, scrolling, fonts}), '*');
})();
</script>"""


def _layout(page: Path, width: int, tmp_path: Path) -> dict:
    """What the script measured with the page ``width`` px wide."""
    profile = tmp_path / f"chromium-{width}"
    frame = tmp_path / f"frame-{width}.html"
    frame.write_text(FRAME.format(src=page.name, width=width, height=1000))
    result = subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width + 20},1000",
         "--dump-dom", frame.as_uri()], capture_output=True, text=True, timeout=120)
    found = re.search(r'data-layout="([^"]*)"', result.stdout)
    assert found, f"chromium gave no measurement: {result.stderr[-2000:]}"
    shots = os.environ.get("STOCHOPT_SCREENSHOTS")
    if shots:
        Path(shots).mkdir(parents=True, exist_ok=True)
        frame.write_text(FRAME.format(src=page.name, width=width, height=6000))
        subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}",
                        f"--window-size={max(width, 500)},6000",
                        f"--screenshot={Path(shots) / f'report-{width}.png'}", frame.as_uri()],
                       capture_output=True, timeout=120)
    return json.loads(html.unescape(found.group(1)))


@pytest.fixture
def page(make_run, best_cycles, tmp_path) -> Path:
    """The page of a run with every section filled: steps by three proposers, an LLM
    with tokens, a note (the run is not finished), slices of time with no candidates."""
    events = [*(_event(0.1 * i, i % 2, "mutate", "rejected", 9000) for i in range(40)),
              *(_event(8 + 0.1 * i, 0, "rewrite", "accepted", 7000) for i in range(10))]
    rd = make_run(events=story(best_cycles) + events, finished=False)
    path = tmp_path / "report.html"
    text = render_html(run_facts(rd))
    path.write_text(text.replace("</body>", MEASURE + "\n</body>"))
    return path


@pytest.mark.parametrize("width", [1280, 420])
def test_the_report_page_lays_out_without_overflow(page, width, tmp_path):
    layout = _layout(page, width, tmp_path)
    assert layout["width"] == width
    assert layout["problems"] == []
    if width >= 1280:  # a desktop window shows every table and chart whole
        assert layout["scrolling"] == []
    for chart, px in layout["fonts"]:
        assert px >= SMALLEST_CHART_TEXT_PX, f"{chart} chart text is {px:.1f} px at {width}"
    assert {c for c, _ in layout["fonts"]} == {"trajectory", "outcomes", "acceptance",
                                              "profile"}
