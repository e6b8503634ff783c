"""`stochopt db`: the tuning database's commands (docs/database.md), under the CLI's
main group (cli.py), which turns their StochoptErrors into one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console

from stochopt.report.words import plural

console = Console(soft_wrap=True)  # as cli.py's: a path in a message is never broken

db_option = click.option(
    "--db", "db_path", default=None, type=click.Path(dir_okay=False),
    help="The tuning database (default: $XDG_CACHE_HOME/stochopt/tuning.db, else "
    "~/.cache/stochopt/tuning.db; docs/database.md).")


@click.group()
def db() -> None:
    """The tuning database: every kernel earlier runs proved (docs/database.md)."""


def _db_path(flag: str | None) -> Path:
    """--db, else the settings file's db (relative to it), else the default file."""
    from stochopt.tuning.store import default_path

    settings = click.get_current_context().find_root().obj
    if flag is None and settings is not None and "db" in settings.values:
        flag = settings.resolve_path(str(settings.values["db"]))
    return Path(flag) if flag else default_path()


def _open_db(flag: str | None, create: bool = False):
    from stochopt import api
    return api.db(_db_path(flag), create=create)


@db.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@db_option
def db_list(as_json: bool, db_path: str | None) -> None:
    """The specs and machines it holds: best cycles, runs, kernels."""
    from stochopt.report.history import listing_table

    path = _db_path(db_path)
    if not path.is_file():  # nothing remembered yet: an empty listing, not an error
        if as_json:
            click.echo(json.dumps({"db": str(path), "specs": []}, indent=2))
        else:
            console.print(f"no tuning database at {path} yet: the first run of stochopt "
                          "optimize makes it", highlight=False)
        return
    with _open_db(db_path) as store:
        rows = store.list()
    if as_json:
        click.echo(json.dumps({"db": str(path), "specs": rows}, indent=2))
    elif not rows:
        console.print(f"the tuning database {path} is empty", highlight=False)
    else:
        console.print(listing_table(rows, str(path)), soft_wrap=False)


@db.command("show")
@click.argument("spec")
@click.option("--machine", default=None, help="Only this machine (its name).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@db_option
def db_show(spec: str, machine: str | None, as_json: bool, db_path: str | None) -> None:
    """A spec's history (by name or fingerprint): every run, its bests, the best kernel
    and its plan."""
    from stochopt.report.history import show_view

    with _open_db(db_path) as store:
        facts = store.show(spec, machine)
    if as_json:
        click.echo(json.dumps(facts, indent=2))
    else:
        console.print(show_view(facts, console.width), soft_wrap=False)


@db.command("export")
@click.argument("path", metavar="FILE", type=click.Path(dir_okay=False))
@click.option("--spec", "spec", default=None, help="Only this spec (name or fingerprint).")
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
@db_option
def db_export(path: str, spec: str | None, as_json: bool, db_path: str | None) -> None:
    """Write a portable file (FILE.json, or FILE.json.gz) to import elsewhere."""
    with _open_db(db_path) as store:
        counts = store.export(path, spec)
    _print_counts(as_json, {"file": path, "written": counts}, f"wrote {path}", counts)


@db.command("import")
@click.argument("path", metavar="FILE_OR_RUN_DIR", type=click.Path(exists=True))
@click.option("--json", "as_json", is_flag=True, help="Print what was added as JSON.")
@db_option
def db_import(path: str, as_json: bool, db_path: str | None) -> None:
    """Add an exported file, or a run directory's bests; what is there already is kept."""
    with _open_db(db_path, create=True) as store:
        counts = store.import_file(path)
    _print_counts(as_json, {"file": path, "added": counts}, f"added from {path}", counts)


@db.command("prune")
@click.option("--keep", default=5, show_default=True, type=click.IntRange(min=1),
              help="The fastest kernels kept per spec and machine.")
@click.option("--older-than", default=None, help="Also drop runs older than this (30d, "
              "12h) that keep no kernel.")
@click.option("--spec", "spec", default=None, help="Only this spec (name or fingerprint).")
@click.option("--json", "as_json", is_flag=True, help="Print what was removed as JSON.")
@db_option
def db_prune(keep: int, older_than: str | None, spec: str | None, as_json: bool,
             db_path: str | None) -> None:
    """Keep the fastest kernels of each spec, drop the rest (refuted ones first)."""
    with _open_db(db_path) as store:
        counts = store.prune(keep, older_than, spec)
    _print_counts(as_json, {"removed": counts}, "removed", counts)


def _print_counts(as_json: bool, facts: dict, what: str, counts: dict) -> None:
    if as_json:
        click.echo(json.dumps(facts, indent=2))
    else:
        console.print(f"{what}: " + ", ".join(plural(n, name.rstrip("s").replace("_", " "))
                                              for name, n in counts.items()), highlight=False)
