"""The command line: flags in, library calls, results out. No logic lives here."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.text import Text

from stochopt.errors import StochoptError

console = Console()
err_console = Console(stderr=True)


class _Group(click.Group):
    """Every StochoptError becomes a clear message and exit code 2, never a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except StochoptError as e:
            err_console.print(Text.assemble(("error: ", "bold red"), str(e)),
                              highlight=False, soft_wrap=True)
            sys.exit(2)


def _read_kernel(path: str, machine):
    from stochopt.leir import parse

    p = Path(path)
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise StochoptError(f"cannot read kernel file {path}: {e}") from None
    try:
        return parse(text, machine)
    except StochoptError as e:
        raise type(e)(e.message, line=e.line, col=e.col, hint=e.hint, source=path) from None


machine_option = click.option(
    "--machine", default="mncore2", show_default=True,
    help="Machine preset (mncore2, small) or a TOML file.")


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="stochopt")
def main() -> None:
    """stochopt: a stochastic superoptimizer for accelerator kernels written in LEIR."""


@main.command()
@click.argument("kernel_path", metavar="KERNEL.leir")
@click.option("--seed", default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--profile", "show_profile", is_flag=True, help="Show the per-op profile.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@machine_option
def run(kernel_path: str, seed: int, show_profile: bool, as_json: bool, machine: str) -> None:
    """Emulate a kernel on random inputs and show its outputs and cost."""
    from stochopt.backend.cost import cost, roofline_of_kernel
    from stochopt.backend.emulate import emulate, random_inputs
    from stochopt.backend.machine import load_machine
    from stochopt.report.terminal import array_stats, profile_table, resource_table

    m = load_machine(machine)
    kernel = _read_kernel(kernel_path, m)
    profile = cost(kernel, m)
    inputs = random_inputs(kernel, seed)
    out = emulate(kernel, inputs, m)
    roof = roofline_of_kernel(kernel, m)
    facts = {"kernel": kernel_path, "machine": m.name, "seed": seed,
             "outputs": {"out": array_stats(out)}, **profile.to_json(),
             "roofline_cycles": roof}
    if as_json:
        click.echo(json.dumps(facts, indent=2))
        return
    st = facts["outputs"]["out"]
    console.print(f"[bold]{kernel_path}[/] on {m.name}: output {st['dtype']}{st['shape']}"
                  + (f"  min {st['min']:.4g}  max {st['max']:.4g}  mean {st['mean']:.4g}"
                     if "min" in st else "")
                  + (f"  nan {st['nan']}  inf {st['inf']}" if st["nan"] or st["inf"] else ""))
    console.print(f"cycles [bold]{profile.cycles}[/] ({profile.cycles / m.clock_mhz:.2f} us)"
                  f"  roofline {roof}  ({100 * roof / max(1, profile.cycles):.1f}% of roofline)"
                  f"  peak local {profile.peak_local_bytes} B/PE"
                  f"  bottleneck {profile.bottleneck()}"
                  f"  critical path {profile.critical_path_cycles}")
    if show_profile:
        console.print(profile_table(profile))
        console.print(resource_table(profile))


@main.command()
@click.argument("spec_path", metavar="SPEC.py")
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False),
              help="Write the kernel here instead of printing it.")
@click.option("--name", default=None, help="Which spec, when the file has several.")
@machine_option
def lower(spec_path: str, output: str | None, name: str | None, machine: str) -> None:
    """Lower a numpy spec to its plain baseline kernel."""
    from stochopt.leir import render
    from stochopt.lower import lower as lower_spec
    from stochopt.spec import load_spec

    kernel = lower_spec(load_spec(spec_path, name), machine)
    text = render(kernel)
    if output:
        _write_text(output, text)
        err_console.print(f"wrote {output}")
    else:
        click.echo(text, nl=False)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@machine_option
def specs(as_json: bool, machine: str) -> None:
    """List the bundled specs with their baseline cycles and roofline."""
    from stochopt.lower.catalog import spec_table

    rows = spec_table(machine)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    from rich.table import Table

    table = Table(title=f"bundled specs on {machine}")
    for col in ("spec", "flops", "bytes", "roofline", "baseline", "share", "bound"):
        table.add_column(col, justify="left" if col in ("spec", "bound") else "right")
    for r in rows:
        table.add_row(r["name"], f"{r['flops']:,}", f"{r['bytes']:,}",
                      str(r["roofline_cycles"]), str(r["baseline_cycles"]),
                      f"{100 * r['roofline_cycles'] / r['baseline_cycles']:.1f}%", r["bound"])
    console.print(table)


def _spec_for_kernel(kernel_path: str, kernel, spec_path: str | None, name: str | None):
    """The spec named by --spec, or by the kernel's '# spec:' line (relative paths are
    tried from the kernel's folder, then from here)."""
    from stochopt.spec import load_spec

    if spec_path is None:
        spec_path = kernel.spec_path
        if spec_path is None:
            raise StochoptError(f"{kernel_path} names no spec",
                                hint="pass --spec SPEC.py or add a first line '# spec: PATH'")
        beside = Path(kernel_path).parent / spec_path
        if not Path(spec_path).is_absolute() and beside.is_file():
            spec_path = str(beside)
    return load_spec(spec_path, name)


@main.command()
@click.argument("kernel_path", metavar="KERNEL.leir")
@click.option("--spec", "spec_path", default=None, help="The spec (default: the kernel's "
              "'# spec:' line).")
@click.option("--name", default=None, help="Which spec, when the file has several.")
@click.option("--examples", default=200, show_default=True, type=click.IntRange(min=1),
              help="Inputs to try.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the inputs.")
@click.option("--inputs", "inputs_npz", default=None, type=click.Path(dir_okay=False),
              help="Replay one input saved as .npz (a counterexample) instead.")
@click.option("--counterexample", "cex_path", default=None, type=click.Path(dir_okay=False),
              help="Where to save a counterexample's inputs (default KERNEL.counterexample.npz"
              " in the current folder).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@machine_option
def verify(kernel_path: str, spec_path: str | None, name: str | None, examples: int, seed: int,
           inputs_npz: str | None, cex_path: str | None, as_json: bool, machine: str) -> None:
    """Check that a kernel computes its spec: exit 0 equivalent, 1 counterexample found,
    2 invalid kernel, spec or arguments."""
    from stochopt.backend.machine import load_machine
    from stochopt.verify import certificate, check, degenerate_warnings
    from stochopt.verify.replay import load_inputs

    m = load_machine(machine)
    kernel = _read_kernel(kernel_path, m)
    spec = _spec_for_kernel(kernel_path, kernel, spec_path, name)
    extra = [load_inputs(inputs_npz, spec)] if inputs_npz else None
    verdict = check(kernel, spec, examples=1 if extra else examples, seed=seed, machine=m,
                    extra_inputs=extra, structured=extra is None)
    verdict.warnings.extend(degenerate_warnings(spec))
    if verdict.counterexample is not None and inputs_npz is None:
        verdict.counterexample.save(cex_path or f"{Path(kernel_path).stem}.counterexample.npz")
    if as_json:
        facts = verdict.to_json()
        facts["kernel"] = kernel_path
        facts["spec"] = spec.name
        if verdict.equivalent:
            facts["certificate"] = certificate(kernel, spec, verdict, m)
        click.echo(json.dumps(facts, indent=2))
    else:
        _print_verdict(kernel_path, spec, verdict)
    sys.exit(0 if verdict.equivalent else 1)


def _print_verdict(kernel_path: str, spec, verdict) -> None:
    for w in verdict.warnings:
        err_console.print(f"[yellow]warning:[/] {w}", highlight=False)
    head = (f"{kernel_path} vs spec {spec.name}: {verdict.examples} inputs, seed "
            f"{verdict.seed}, {verdict.elapsed_s:.2f} s")
    if verdict.equivalent:
        console.print(f"[bold green]EQUIVALENT[/]  {head}", highlight=False)
        console.print(f"  largest semantic error {verdict.max_semantic_error:.3g} x 1e-9 of "
                      f"scale; largest precision error {verdict.max_precision_error:.3g} of "
                      "what is allowed", highlight=False)
        return
    cex = verdict.counterexample
    m = cex.mismatch
    console.print(f"[bold red]NOT EQUIVALENT[/]  {head}", highlight=False)
    console.print(f"  {m.check} check failed at index {list(m.index)}", highlight=False)
    console.print(f"  expected {m.expected!r}\n  got      {m.got!r}\n  {m.detail}",
                  highlight=False)
    if cex.recipes:
        console.print("  input: " + ", ".join(f"{n} = {r.pattern} (seed {r.seed})"
                                              for n, r in cex.recipes.items()), highlight=False)
    if cex.path:
        console.print(f"  saved the input to {cex.path}; replay with --inputs {cex.path}",
                      highlight=False)


@main.command()
@click.argument("spec_path", metavar="SPEC.py", required=False)
@click.option("--budget", default="10m", show_default=True,
              help="Wall time: 30s, 10m, 48h, 1h30m.")
@click.option("--proposer", default="mixed", show_default=True,
              type=click.Choice(["mixed", "mutate", "rewrite", "llm"]))
@click.option("--chains", default=None, type=click.IntRange(1, 64),
              help="Chains in worker processes (default: the CPU count).")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--init", "init", default=None, type=click.Path(dir_okay=False),
              help="Start from this kernel instead of the lowered one.")
@click.option("--name", default=None, help="Which spec, when the file has several.")
@click.option("--run-dir", default=None, help="Directory of the run "
              "(default runs/<spec>-<time>).")
@click.option("--resume", default=None, type=click.Path(file_okay=False),
              help="Continue a stopped run with the budget it has left.")
@click.option("--max-proposals", default=None, type=click.IntRange(min=1))
@click.option("--max-cost", default=None, type=click.FloatRange(min=0, min_open=True),
              help="Stop when the LLM has cost this many dollars.")
@click.option("--quiet", is_flag=True, help="No live display.")
@click.option("--model", default=None, help="LLM to propose kernels (any OpenAI-compatible "
              "endpoint); without it, mixed runs the built-in proposers alone.")
@click.option("--base-url", default=None, help="The endpoint, e.g. http://localhost:8000/v1 "
              "(default: $OPENAI_BASE_URL, else OpenAI). The key is $OPENAI_API_KEY.")
@click.option("--llm-concurrency", "concurrency", default=2, show_default=True,
              type=click.IntRange(1, 64), help="LLM requests in flight per chain.")
@click.option("--llm-timeout", "timeout_s", default=None,
              type=click.FloatRange(min=0, min_open=True), help="Seconds per LLM request try "
              "(default 60, or 600 for a server on this machine).")
@click.option("--llm-retries", "retries", default=4, show_default=True,
              type=click.IntRange(0, 64), help="Retries on 429, 5xx, timeouts, broken replies.")
@click.option("--llm-n", "n", default=1, show_default=True, type=click.IntRange(1, 16),
              help="Choices per LLM request.")
@click.option("--temperature", default=None, callback=lambda ctx, param, v: _temperature(v),
              help="Sampling temperature T, or a range LOW,HIGH each request draws from "
              "(default 0.2,1.0; reasoning models: the server's).")
@click.option("--max-tokens", default=None, type=click.IntRange(min=1),
              help="Longest LLM reply in tokens (default: a quarter of the context, "
              "1024..8192).")
@click.option("--context-tokens", default=None, type=click.IntRange(min=256),
              help="The model's context in tokens: prompt plus reply fit in it (default: "
              "what the server reports, the known model's, else 8192).")
@click.option("--price-in", default=None, type=click.FloatRange(min=0),
              help="Dollars per million prompt tokens (default: known models' prices, else 0).")
@click.option("--price-out", default=None, type=click.FloatRange(min=0),
              help="Dollars per million completion tokens.")
@click.option("--prompts", default=None, type=click.Path(file_okay=False, exists=True),
              help="A folder of prompt templates replacing prompts/ (system.txt, user.txt, "
              "failure.txt).")
@click.option("--llm-cache", "cache", default=None, type=click.Path(file_okay=False),
              help="Replay identical prompts from this folder (and fill it).")
@machine_option
def optimize(spec_path, budget, proposer, chains, seed, init, name, run_dir, resume,
             max_proposals, max_cost, quiet, machine, **llm) -> None:
    """Search for a faster kernel equivalent to a spec."""
    import os

    from rich.live import Live

    from stochopt.search import optimize as run_optimize
    from stochopt.search.display import progress_view, summary_lines
    from stochopt.search.llm import describe

    if spec_path is None and resume is None:
        raise StochoptError("give a spec file, or --resume RUN_DIR")
    if resume is None and proposer in ("mixed", "llm"):
        if llm["model"]:
            err_console.print(f"LLM: {describe(llm)}", highlight=False)
            if not (llm["base_url"] or os.environ.get("OPENAI_BASE_URL")
                    or os.environ.get("OPENAI_API_KEY")):
                err_console.print("[yellow]warning:[/] OPENAI_API_KEY is not set: requests "
                                  "to OpenAI will fail (pass --base-url for a local server)",
                                  highlight=False)
        elif proposer == "mixed":
            err_console.print("no LLM configured (--model): mixed runs the built-in "
                              "proposers (mutate, rewrite)", highlight=False)
    live = None if quiet or not console.is_terminal else Live(console=console,
                                                             refresh_per_second=4)
    last = {"t": 0.0}

    def progress(stats):
        if live is not None:
            live.update(progress_view(stats))
        elif not quiet and stats["elapsed_s"] - last["t"] >= 10:
            last["t"] = stats["elapsed_s"]
            err_console.print(f"[{stats['elapsed_s']:.0f}s] {stats['proposals']} candidates, "
                              f"best {stats['best_cycles']} cycles "
                              f"({stats['speedup']:.2f}x)", highlight=False)

    if live is not None:
        live.start()
    try:
        result = run_optimize(spec_path, budget=budget, proposer=proposer, chains=chains,
                              seed=seed, init=init, machine=machine, run_dir=run_dir,
                              resume=resume, max_proposals=max_proposals, max_cost=max_cost,
                              name=name, progress=progress, llm=llm if llm["model"] else None)
    finally:
        if live is not None:
            live.stop()
    for line in summary_lines(result):
        console.print(line, highlight=False)
    if result.stopped_by == "llm_failed":
        sys.exit(1)   # --proposer llm and the LLM failed for good: nothing was searched


def _temperature(value: str | None):
    """--temperature T or LOW,HIGH (checked with the other LLM settings)."""
    if value is None:
        return None
    try:
        parts = [float(x) for x in value.split(",")]
    except ValueError:
        raise click.BadParameter(f"{value!r}: give a number or LOW,HIGH") from None
    if len(parts) > 2:
        raise click.BadParameter(f"{value!r}: give a number or LOW,HIGH")
    return parts[0] if len(parts) == 1 else parts


@main.command()
@click.argument("run_dir", metavar="RUN_DIR", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the facts as one JSON object.")
@click.option("--html", "html_path", default=None, type=click.Path(dir_okay=False),
              help="Write a self-contained HTML page with charts to this file.")
def report(run_dir: str, as_json: bool, html_path: str | None) -> None:
    """What a run did and found: finished, still going, or killed."""
    from stochopt.report.facts import run_facts, to_json

    facts = run_facts(run_dir)
    if html_path:
        from stochopt.report.html import render_html

        _write_text(html_path, render_html(facts))
        err_console.print(f"wrote {html_path}", highlight=False)
    if as_json:
        click.echo(to_json(facts))
    elif not html_path:
        from stochopt.report.terminal import report_view

        console.print(report_view(facts, width=console.width))


def _write_text(path: str, text: str) -> None:
    try:
        Path(path).write_text(text)
    except OSError as e:
        raise StochoptError(f"cannot write {path}: {e}") from None


if __name__ == "__main__":
    main()
