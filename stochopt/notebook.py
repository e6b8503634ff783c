"""Jupyter: how kernels, verdicts, executions, run results and reports show themselves,
and the live progress of optimize in a notebook.

The core classes inherit Displayable (stochopt/displayable.py), whose forms this module
registers. It imports nothing heavy at module level; the renderers are the report's
(stochopt.report.html fragments, the terminal's rich tables exported as HTML), never a
second copy.
"""

from __future__ import annotations

import html
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from stochopt.displayable import RENDERERS

LIVE_REFRESH_S = 0.5     # how often the notebook's live view is redrawn
CALLBACK_EVERY_S = 0.25  # how often a progress callback is called at most


# ---------------------------------------------------------------------------------
# kernels
# ---------------------------------------------------------------------------------

def kernel_html(kernel) -> str:
    from stochopt.leir import render
    from stochopt.report.html import code_fragment

    return code_fragment(render(kernel), caption=html.escape(_kernel_line(kernel)))


def kernel_markdown(kernel) -> str:
    from stochopt.leir import render

    return f"{_kernel_line(kernel)}\n\n```python\n{render(kernel)}```\n"


def _kernel_line(kernel) -> str:
    params = ", ".join(f"{n}: {t.signature()}" for n, t in kernel.signature().items())
    return (f"kernel {kernel.name}({params}) -> {kernel.output_type.signature()}, "
            f"{len(kernel.nodes) - len(kernel.params)} ops")


# ---------------------------------------------------------------------------------
# verdicts
# ---------------------------------------------------------------------------------

def verdict_rows(verdict) -> list[tuple[str, str]]:
    """The verdict as (label, value) pairs: what the CLI prints, in the same words."""
    rows = [("verdict", "EQUIVALENT" if verdict.equivalent else "NOT EQUIVALENT"),
            ("inputs", f"{verdict.examples}, seed {verdict.seed}, {verdict.elapsed_s:.2f} s")]
    if verdict.equivalent:
        rows += [("largest semantic error", f"{verdict.max_semantic_error:.3g} x 1e-9 of scale"),
                 ("largest precision error",
                  f"{verdict.max_precision_error:.3g} of what is allowed")]
    cex = verdict.counterexample
    if cex is not None:
        m = cex.mismatch
        rows += [("failed check", f"{m.check} at index {list(m.index)}"),
                 ("expected", repr(m.expected)), ("got", repr(m.got)), ("detail", m.detail)]
        if cex.recipes:
            rows.append(("input", ", ".join(f"{n} = {r.pattern} (seed {r.seed})"
                                            for n, r in cex.recipes.items())))
        if cex.path:
            rows.append(("saved to", cex.path))
    rows += [("warning", w) for w in verdict.warnings]
    return rows


def verdict_html(verdict) -> str:
    from stochopt.report.html import fragment, key_values_html

    status = "finished" if verdict.equivalent else "stopped"
    head = (f"<h2><span class='badge {status}'>"
            f"{'EQUIVALENT' if verdict.equivalent else 'NOT EQUIVALENT'}</span></h2>")
    body = key_values_html(verdict_rows(verdict)[1:])
    cex = verdict.counterexample
    if cex is not None:
        body += "<h3>the counterexample's inputs</h3>" + key_values_html(
            [(n, _array_line(x)) for n, x in cex.inputs.items()])
    return fragment(f"<section>{head}{body}</section>")


def verdict_markdown(verdict) -> str:
    rows = verdict_rows(verdict)
    return f"**{rows[0][1]}**\n\n" + "".join(f"- {k}: {v}\n" for k, v in rows[1:])


def _array_line(x) -> str:
    from stochopt.report.terminal import array_stats

    s = array_stats(x)
    text = f"{s['dtype']}{s['shape']}"
    if "min" in s:
        text += f"  min {s['min']:.4g}  max {s['max']:.4g}  mean {s['mean']:.4g}"
    if s["nan"] or s["inf"]:
        text += f"  nan {s['nan']}  inf {s['inf']}"
    return text


# ---------------------------------------------------------------------------------
# one kernel run on the emulator (stochopt.run)
# ---------------------------------------------------------------------------------

def execution_lines(e) -> list[str]:
    """What `stochopt run` prints for an execution, as plain lines."""
    p = e.profile
    return [f"kernel {e.kernel.name} on {e.machine}: output {_array_line(e.output)}",
            f"cycles {p.cycles} ({p.cycles / e.clock_mhz:.2f} us)  roofline "
            f"{e.roofline_cycles}  ({100 * e.roofline_share:.1f}% of roofline)  bound "
            f"{e.bound_cycles}  ({100 * e.bound_share:.1f}% of bound)  peak local "
            f"{p.peak_local_bytes} B/PE  bottleneck {p.bottleneck()}  critical path "
            f"{p.critical_path_cycles}"]


def execution_html(e) -> str:
    from stochopt.report.html import fragment
    from stochopt.report.terminal import profile_table, resource_table

    lines = "".join(f"<p>{html.escape(line)}</p>" for line in execution_lines(e))
    return fragment(f"<section>{lines}{rich_html(profile_table(e.profile))}"
                    f"{rich_html(resource_table(e.profile))}</section>")


def execution_markdown(e) -> str:
    return "".join(f"- {line}\n" for line in execution_lines(e))


def rich_html(renderable, width: int = 110) -> str:
    """A rich renderable (the terminal's tables and views) as an HTML <pre> block."""
    import io

    from rich.console import Console

    console = Console(record=True, width=width, file=io.StringIO(), color_system="truecolor")
    console.print(renderable)
    return console.export_html(inline_styles=True, code_format="<pre class='rich'>{code}</pre>")


# ---------------------------------------------------------------------------------
# runs: the result of optimize, and a run directory's report
# ---------------------------------------------------------------------------------

def result_html(result) -> str:
    """The run's headline, summary and best-cycles chart, read from its run directory."""
    from stochopt.errors import StochoptError
    from stochopt.report.facts import run_facts
    from stochopt.report.html import fragment, report_fragment

    try:
        return report_fragment(run_facts(result.run_dir), brief=True)
    except StochoptError:  # the run directory was moved or deleted: the result still stands
        lines = "".join(f"<p>{html.escape(line)}</p>" for line in _result_lines(result))
        return fragment(f"<section>{lines}</section>")


def result_markdown(result) -> str:
    return "".join(f"- {line}\n" for line in _result_lines(result))


def _result_lines(result) -> list[str]:
    from stochopt.search.display import summary_lines

    return summary_lines(result)


def report_html(facts) -> str:
    from stochopt.report.html import report_fragment

    return report_fragment(facts)


def report_markdown(facts) -> str:
    from stochopt.report.facts import headline

    rows = headline(facts) + [("run", facts["run_dir"])]
    return ("| | |\n|---|---|\n"
            + "".join(f"| {k} | {v.replace('|', '/')} |\n" for k, v in rows)
            + "".join(f"\nnote: {n}\n" for n in facts["notes"]))


RENDERERS.update({
    ("Kernel", "html"): kernel_html, ("Kernel", "markdown"): kernel_markdown,
    ("Verdict", "html"): verdict_html, ("Verdict", "markdown"): verdict_markdown,
    ("Execution", "html"): execution_html, ("Execution", "markdown"): execution_markdown,
    ("RunResult", "html"): result_html, ("RunResult", "markdown"): result_markdown,
    ("Report", "html"): report_html, ("Report", "markdown"): report_markdown,
})


# ---------------------------------------------------------------------------------
# live progress of optimize
# ---------------------------------------------------------------------------------

def in_jupyter() -> bool:
    """True inside a Jupyter kernel (not a terminal IPython, not plain Python)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


@contextmanager
def live_progress(callback: Callable[[dict], None] | None,
                  live: bool | None) -> Iterator[Callable[[dict], None] | None]:
    """The progress function optimize hands the search: it calls ``callback`` at most
    every CALLBACK_EVERY_S and redraws a live view (in Jupyter when live is None)."""
    view = None
    if live or (live is None and in_jupyter()):
        view = _NotebookView() if in_jupyter() else _TerminalView()
    if callback is None and view is None:
        yield None
        return
    last = {"callback": 0.0}

    def on_progress(snapshot: dict) -> None:
        nonlocal view
        now = time.monotonic()
        if callback is not None and now - last["callback"] >= CALLBACK_EVERY_S:
            last["callback"] = now
            callback(snapshot)
        if view is not None:
            try:
                view.update(snapshot, now)
            except Exception as e:  # a display that fails must not stop the search
                warnings.warn(f"stochopt: the live view stopped: {type(e).__name__}: {e}",
                              stacklevel=2)
                view = None

    try:
        yield on_progress
    finally:
        if view is not None:
            view.close()


class _NotebookView:
    """One output area, redrawn in place, showing the CLI's live view as HTML."""

    def __init__(self) -> None:
        from IPython.display import HTML, display

        self.handle = display(HTML("<p>starting the search&hellip;</p>"), display_id=True)
        self.last = 0.0
        self.pending: dict | None = None

    def update(self, snapshot: dict, now: float) -> None:
        self.pending = snapshot
        if now - self.last >= LIVE_REFRESH_S:
            self._draw()
            self.last = now

    def _draw(self) -> None:
        from IPython.display import HTML

        from stochopt.search.display import progress_view

        if self.pending is not None and self.handle is not None:
            self.handle.update(HTML(rich_html(progress_view(self.pending))))

    def close(self) -> None:
        self._draw()  # the last state stays in the notebook


class _TerminalView:
    """The CLI's live view (rich) when live=True outside Jupyter."""

    def __init__(self) -> None:
        from rich.live import Live

        self.live = Live(refresh_per_second=4)
        self.live.start()

    def update(self, snapshot: dict, now: float) -> None:
        from stochopt.search.display import progress_view

        self.live.update(progress_view(snapshot))

    def close(self) -> None:
        self.live.stop()
