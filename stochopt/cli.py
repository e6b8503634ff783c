"""The command line: flags in, library calls, results out. No logic lives here."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console

from stochopt.errors import StochoptError

console = Console()
err_console = Console(stderr=True)


class _Group(click.Group):
    """Every StochoptError becomes a clear message and exit code 2, never a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except StochoptError as e:
            err_console.print(f"[bold red]error:[/] {e}", highlight=False, markup=True)
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
                  f"  bottleneck {profile.bottleneck()}")
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


def _write_text(path: str, text: str) -> None:
    try:
        Path(path).write_text(text)
    except OSError as e:
        raise StochoptError(f"cannot write {path}: {e}") from None


if __name__ == "__main__":
    main()
