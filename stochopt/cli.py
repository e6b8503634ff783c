"""The command line: flags in, library calls, results out. No logic lives here."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.text import Text

from stochopt.cli_db import db, db_option
from stochopt.errors import StochoptError
from stochopt.report.words import plural

# A message's line is never broken by the console: a path or a command in it must survive
# being copied from a log or a narrow terminal; tables are printed to fit the width
# (soft_wrap=False), as the live view is
console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)


class _Group(click.Group):
    """Every StochoptError becomes a clear message and exit code 2, never a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except StochoptError as e:
            err_console.print(Text.assemble(("error: ", "bold red"), str(e)),
                              highlight=False, soft_wrap=True)
            sys.exit(2)


def _read_kernel(path: str, machine_flag: str | None, ctx: click.Context):
    """The kernel in a file and its machine: --machine when typed, else what the file
    records, else the settings' machine (see stochopt.kernel_file)."""
    from stochopt.cli_settings import given_on_command_line
    from stochopt.kernel_file import read_kernel_file

    typed = machine_flag if given_on_command_line(ctx, ["machine"]) else None
    return read_kernel_file(path, machine=typed, fallback_machine=machine_flag)


machine_option = click.option(
    "--machine", default="mncore2", show_default=True,
    help="Machine preset (mncore2, small) or a TOML file.")
kernel_machine_option = click.option(
    "--machine", default=None,
    help="Machine preset (mncore2, small) or a TOML file (default: the machine the "
    "kernel file records, else mncore2).")


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="stochopt")
@click.pass_context
def main(ctx: click.Context) -> None:
    """stochopt: a stochastic superoptimizer for accelerator kernels written in LEIR.

    Flags default to the nearest stochopt.toml or pyproject.toml [tool.stochopt]
    (keys are flag names: machine, budget, chains, model, base-url, ...)."""
    from stochopt.cli_settings import default_map
    from stochopt.settings import load_settings

    settings = load_settings()
    ctx.obj = settings
    ctx.default_map = default_map(settings, main)


@main.command()
@click.argument("kernel_path", metavar="KERNEL.leir")
@click.option("--seed", default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--profile", "show_profile", is_flag=True, help="Show the per-op profile.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@kernel_machine_option
@click.pass_context
def run(ctx: click.Context, kernel_path: str, seed: int, show_profile: bool, as_json: bool,
        machine: str | None) -> None:
    """Emulate a kernel on random inputs and show its outputs and cost."""
    from stochopt import api
    from stochopt.report.terminal import profile_table, resource_table

    kernel, m = _read_kernel(kernel_path, machine, ctx)
    execution = api.run(kernel, seed=seed, machine=m, kernel_file=kernel_path)
    profile, roof, bound = (execution.profile, execution.roofline_cycles,
                            execution.bound_cycles)
    facts = {"kernel": kernel_path, **execution.to_json()}
    if as_json:
        click.echo(json.dumps(facts, indent=2))
        return
    st = facts["outputs"]["out"]
    console.print(f"[bold]{kernel_path}[/] on {m.name}: output {st['dtype']}{st['shape']}"
                  + (f"  min {st['min']:.4g}  max {st['max']:.4g}  mean {st['mean']:.4g}"
                     if "min" in st else "")
                  + (f"  nan {st['nan']}  inf {st['inf']}" if st["nan"] or st["inf"] else ""))
    console.print(f"inputs: seed {seed}, uniform in {execution.inputs_from}")
    console.print(f"cycles [bold]{profile.cycles}[/] ({profile.cycles / m.clock_mhz:.2f} us)"
                  f"  roofline {roof}  ({100 * roof / max(1, profile.cycles):.1f}% of roofline)"
                  f"  bound {bound}  ({100 * facts['bound_share']:.1f}% of bound)"
                  f"  peak local {profile.peak_local_bytes} B/PE"
                  f"  bottleneck {profile.bottleneck()}"
                  f"  critical path {profile.critical_path_cycles}")
    if show_profile:
        console.print(profile_table(profile, kernel), soft_wrap=False)
        console.print(resource_table(profile), soft_wrap=False)


@main.command()
@click.argument("spec_path", metavar="SPEC.py")
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False),
              help="Write the kernel here instead of printing it.")
@click.option("--name", default=None, help="Which spec, when the file has several.")
@machine_option
def lower(spec_path: str, output: str | None, name: str | None, machine: str) -> None:
    """Lower a numpy spec to its plain baseline kernel."""
    from stochopt import api
    from stochopt.leir import render
    from stochopt.machine import load_machine

    m = load_machine(machine)
    kernel = api.lower(spec_path, name=name, machine=m)
    if output:
        # the '# spec:' line is read relative to the kernel file: point it there
        relative = os.path.relpath(Path(spec_path).resolve(), Path(output).resolve().parent)
        _write_text(output, render(dataclasses.replace(kernel, spec_path=relative), m))
        err_console.print(f"wrote {output}")
    else:
        click.echo(render(kernel, m), nl=False)


@main.command()
@click.option("--json", "as_json", is_flag=True,
              help='Print one JSON object: {"machine": ..., "specs": [one object per spec]}.')
@machine_option
def specs(as_json: bool, machine: str) -> None:
    """List the bundled specs with their baseline cycles and roofline."""
    from rich import box
    from rich.table import Table

    from stochopt.lower.catalog import spec_table
    from stochopt.machine import load_machine

    m = load_machine(machine)
    rows = spec_table(m)
    if as_json:
        click.echo(json.dumps({"machine": m.name, "specs": rows}, indent=2))
        return
    # no vertical rules; "bound" is the reachable bound in cycles, "limit" whether DRAM or
    # compute sets the roofline (the JSON key "bound", kept for scripts). Below 120
    # columns FLOPs and bytes (in --json) give way, so every name stays whole
    wide = console.width >= 120
    table = Table(title=f"bundled specs on {m.name}", box=box.SIMPLE_HEAD, pad_edge=False)
    columns = (("spec", "flops", "bytes") if wide else ("spec",)) + (
        "roofline", "bound", "baseline", "of roofline", "of bound", "limit")
    for col in columns:
        table.add_column(col, justify="left" if col in ("spec", "limit") else "right",
                         no_wrap=col != "spec",
                         min_width=max(len(r["name"]) for r in rows) if col == "spec" else None)
    for r in rows:
        sizes = (f"{r['flops']:,}", f"{r['bytes']:,}") if wide else ()
        table.add_row(r["name"], *sizes, str(r["roofline_cycles"]), str(r["bound_cycles"]),
                      str(r["baseline_cycles"]),
                      f"{100 * r['roofline_cycles'] / r['baseline_cycles']:.1f}%",
                      f"{100 * r['bound_cycles'] / r['baseline_cycles']:.1f}%", r["bound"])
    console.print(table, soft_wrap=False)


@main.command()
@click.argument("kernel_path", metavar="KERNEL.leir")
@click.option("--spec", "spec_path", default=None, help="The spec (default: the run's spec "
              "for a kernel in a run directory, else the kernel's '# spec:' line).")
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
@click.option("--strict", is_flag=True, help="Exit 3 where no input was found wrong but a "
              "side of one of the kernel's decision points that the declared ranges allow "
              "was never reached (the kernel was not tested there).")
@kernel_machine_option
@click.pass_context
def verify(ctx: click.Context, kernel_path: str, spec_path: str | None, name: str | None,
           examples: int, seed: int, inputs_npz: str | None, cex_path: str | None,
           as_json: bool, strict: bool, machine: str | None) -> None:
    """Check that a kernel computes its spec: exit 0 equivalent, 1 counterexample found,
    2 invalid kernel, spec or arguments, 3 (with --strict) equivalent on every input tried
    but not tested on every side of its decision points."""
    from stochopt import api
    from stochopt.verify import certificate

    kernel, m = _read_kernel(kernel_path, machine, ctx)
    spec = api.spec_for_kernel(kernel, spec_path, name, kernel_path)
    verdict = api.verify(kernel, spec, examples=examples, seed=seed, inputs=inputs_npz,
                         machine=m, kernel_file=kernel_path)
    cex = verdict.counterexample
    save_to = cex_path or f"{Path(kernel_path).stem}.counterexample.npz"
    # a range refusal holds for every input: there is no input to save
    saved = cex is not None and inputs_npz is None and cex.mismatch.check != "range"
    if as_json:
        save_error = _save_counterexample(cex, save_to) if saved else None
        facts = verdict.to_json()
        facts["kernel"] = kernel_path
        facts["spec"] = spec.name
        facts["machine"] = m.name
        if save_error:
            facts["counterexample_not_saved"] = save_error
        if verdict.equivalent:
            facts["certificate"] = certificate(kernel, spec, verdict, m)
        click.echo(json.dumps(facts, indent=2))
    else:
        # the verdict first: saving the input may fail, the verdict must not be lost
        _print_verdict(kernel_path, spec, verdict)
        if saved:
            error = _save_counterexample(cex, save_to)
            console.print(f"  could not save the input to {save_to} ({error}); pass "
                          "--counterexample PATH in a folder you can write" if error else
                          f"  saved the input to {cex.path}; replay with --inputs {cex.path}",
                          highlight=False)
    untested = strict and verdict.equivalent and bool((verdict.coverage or {}).get("not_reached"))
    if untested and not as_json:
        err_console.print("not tested on every side of its decision points (--strict): "
                          "try more --examples or another --seed", highlight=False)
    sys.exit(1 if not verdict.equivalent else 3 if untested else 0)


def _save_counterexample(cex, path: str) -> str | None:
    """Save the failing input; the reason it could not be saved, or None."""
    try:
        cex.save(path)
    except OSError as e:
        return e.strerror or str(e)
    return None


def _print_verdict(kernel_path: str, spec, verdict) -> None:
    for w in verdict.warnings:
        err_console.print(f"[yellow]warning:[/] {w}", highlight=False)
    head = (f"{kernel_path} vs spec {spec.name}: {plural(verdict.examples, 'input')}, seed "
            f"{verdict.seed}, {verdict.elapsed_s:.2f} s")
    if verdict.equivalent:
        console.print(f"[bold green]EQUIVALENT[/]  {head}", highlight=False)
        console.print(f"  largest semantic error {verdict.max_semantic_error:.3g} x 1e-9 of "
                      f"scale; largest precision error {verdict.max_precision_error:.3g} of "
                      "what is allowed", highlight=False)
        if verdict.coverage is not None:
            from stochopt.verify.coverage import describe_coverage
            console.print(f"  coverage: {describe_coverage(verdict.coverage)}",
                          highlight=False)
        return
    cex = verdict.counterexample
    m = cex.mismatch
    console.print(f"[bold red]NOT EQUIVALENT[/]  {head}", highlight=False)
    if verdict.range_refusal:
        console.print(f"  range analysis: {verdict.range_refusal}", highlight=False)
        if m.check == "range":
            console.print("  (no input tried showed it; the analysis holds for every input "
                          "inside the spec's ranges)", highlight=False)
            return
    console.print(f"  {m.check} check failed at index {list(m.index)}", highlight=False)
    console.print(f"  expected {m.expected!r}\n  got      {m.got!r}\n  {m.detail}",
                  highlight=False)
    if cex.recipes:
        console.print("  input: " + ", ".join(f"{n} = {r.describe()}"
                                              for n, r in cex.recipes.items()), highlight=False)
    elif cex.found_by.startswith("directed input"):
        console.print(f"  input: a {cex.found_by}", highlight=False)


@main.command()
@click.argument("spec_path", metavar="SPEC.py", required=False)
@click.option("--budget", default="10m", show_default=True,
              help="Wall time: 30s, 10m, 48h, 1h30m.")
@click.option("--proposer", default="mixed", show_default=True,
              type=click.Choice(["mixed", "mutate", "rewrite", "compound", "lookahead",
                                 "llm"]))
@click.option("--chains", default=None, type=click.IntRange(1, 1024),
              help="Chains in worker processes (default: the CPU count; of the cluster "
              "with --ray). At most 64 without --ray.")
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS",
              help="Run the chains on a Ray cluster: auto (the cluster this machine "
              "belongs to), local (a private one), ray://HOST:10001 or HOST:PORT; none: "
              "this machine's processes (with --resume). Needs pip install "
              "'stochopt[ray]' (docs/scale.md).")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--init", "init", default=None, type=click.Path(dir_okay=False),
              help="Start from this kernel instead of the lowered one.")
@click.option("--name", default=None, help="Which spec, when the file has several.")
@click.option("--run-dir", default=None, help="Directory of the run "
              "(default runs/<spec>-<time>).")
@click.option("--resume", default=None, type=click.Path(file_okay=False),
              help="Continue a stopped run with the budget it has left.")
@click.option("--check-workers", default=None, type=click.IntRange(0, 64),
              help="Workers that run full checks beside the chains (default: one per two "
              "chains; with --ray, actors on the cluster); 0 runs them on the chains' path "
              "(reproducible with --chains 1).")
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
@click.option("--structured", default="auto", show_default=True,
              type=click.Choice(["auto", "json", "grammar", "off"]),
              help="Constrain the LLM's replies where the server can: auto (probe it), json "
              "(plans by JSON schema), grammar (every reply by GBNF grammar), off.")
@click.option("--llm-pace/--no-llm-pace", "pace", default=True, show_default=True,
              help="Slow LLM requests down while their replies bring nothing faster.")
@click.option("--llm-cache", "cache", default=None, type=click.Path(file_okay=False),
              help="Replay identical prompts from this folder (and fill it).")
@db_option
@click.option("--no-db", is_flag=True, help="Use no tuning database: start from the "
              "lowering, remember nothing.")
@click.option("--cold", is_flag=True, help="Start from the lowering even when the tuning "
              "database has kernels for this spec (it still remembers what this run proves).")
@machine_option
@click.pass_context
def optimize(ctx, spec_path, budget, proposer, chains, ray_address, seed, init, name, run_dir,
             resume, check_workers, max_proposals, max_cost, quiet, db_path, no_db, cold,
             machine, **llm) -> None:
    """Search for a faster kernel equivalent to a spec."""
    from rich.live import Live

    from stochopt import api
    from stochopt.cli_settings import sources
    from stochopt.durations import process_start_time
    from stochopt.llm.options import describe
    from stochopt.search.display import progress_view, summary_lines

    if spec_path is None and resume is None:
        raise StochoptError("give a spec file, or --resume RUN_DIR")
    if resume is not None:
        _refuse_flags_with_resume(ctx, resume)
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
                              "proposers (mutate, rewrite, compound, lookahead)",
                              highlight=False)
    live = None if quiet or not console.is_terminal else Live(console=console,
                                                             refresh_per_second=4)
    last = {"t": 0.0}

    def progress(stats):
        if live is not None:
            live.update(progress_view(stats))
        elif not quiet and stats["elapsed_s"] - last["t"] >= 10:
            last["t"] = stats["elapsed_s"]
            found = stats.get("fastest_found")
            waiting = "" if found is None or found >= stats["best_cycles"] else (
                f"; found {found} cycles ({stats['baseline_cycles'] / found:.2f}x), "
                "not yet proved")  # a proved 1.00x is not the whole story
            err_console.print(f"[{stats['elapsed_s']:.0f}s] "
                              f"{plural(stats['proposals'], 'candidate')}, "
                              f"best {stats['best_cycles']} cycles "
                              f"({stats['speedup']:.2f}x){waiting}", highlight=False)

    if live is not None:
        live.start()
    try:
        result = api.optimize(spec_path, budget=budget, proposer=proposer, chains=chains,
                              seed=seed, init=init, machine=machine, run_dir=run_dir,
                              resume=resume, max_proposals=max_proposals, max_cost=max_cost,
                              name=name, progress=progress, llm=llm, live=False,
                              settings=sources(ctx, ctx.obj) if resume is None else None,
                              check_workers=check_workers, started=process_start_time(),
                              ray=ray_address, db=False if no_db else db_path, cold=cold)
    except KeyboardInterrupt as e:  # Ctrl-C outside the search (its setup, its end)
        where = getattr(e, "run_dir", None)  # set when the run directory was written
        err_console.print("interrupted" + (
            f" during the setup; continue it with: stochopt optimize --resume {where}"
            if where else ""), highlight=False)
        sys.exit(130)
    finally:
        if live is not None:
            live.stop()
    for line in summary_lines(result):  # not wrapped: paths and commands stay whole
        console.print(line, highlight=False, soft_wrap=True)
    if result.signal is not None:  # a script must tell an interrupted run from a finished one
        sys.exit(128 + result.signal)
    if result.stopped_by == "llm_failed":
        sys.exit(1)   # --proposer llm and the LLM failed for good: nothing was searched


def _refuse_flags_with_resume(ctx: click.Context, resume: str) -> None:
    """--resume continues a run exactly as it was started: a flag that would change it
    is refused rather than silently ignored."""
    from stochopt.cli_settings import given_on_command_line

    fixed = [p.name for p in ctx.command.params
             if p.name not in ("resume", "quiet", "ray_address")]  # --ray: another cluster
    typed = given_on_command_line(ctx, fixed)
    if not typed:
        return
    flags = ["SPEC.py" if n == "spec_path" else
             next(o for o in ctx.command.params if o.name == n).opts[0] for n in typed]
    raise StochoptError(
        f"--resume continues {resume} with the spec, budget, chains, seed, machine and "
        f"proposers in its run.json; it does not take {', '.join(flags)}",
        hint=f"drop {'it' if len(flags) == 1 else 'them'}, or start a new run from its best "
        f"kernel with the flags you want: stochopt optimize {Path(resume) / 'spec.py'} "
        f"--init {Path(resume) / 'best.leir'}")


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
    from stochopt import api
    from stochopt.report.facts import to_json

    facts = api.report(run_dir)
    if html_path:
        from stochopt.report.html import render_html

        _write_text(html_path, render_html(facts))
        err_console.print(f"wrote {html_path}", highlight=False)
    if as_json:
        click.echo(to_json(facts))
    elif not html_path:
        from stochopt.report.terminal import report_view

        console.print(report_view(facts, width=console.width), soft_wrap=False)


def _write_text(path: str, text: str) -> None:
    try:
        Path(path).write_text(text)
    except OSError as e:
        raise StochoptError(f"cannot write {path}: {e}") from None


main.add_command(db)

if __name__ == "__main__":
    main()
