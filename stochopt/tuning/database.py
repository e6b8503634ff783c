"""The tuning database with its commands: what `stochopt db` and `stochopt.db()` in a
notebook do (list, show, export, import, prune), on top of TuningDB's storage. Apart
from store.py because the commands are written with the modules that read and write
the database (views, exchange, runs), which all build on the storage."""

from __future__ import annotations

from pathlib import Path

from stochopt.durations import parse_duration
from stochopt.tuning.exchange import export_file, import_file, prune
from stochopt.tuning.runs import remember_run_dir
from stochopt.tuning.store import TuningDB
from stochopt.tuning.views import history, listing


class Database(TuningDB):
    """A TuningDB with the commands of `stochopt db`."""

    def list(self) -> list[dict]:
        """One row per spec and machine (stochopt db list)."""
        return listing(self)

    def show(self, spec: str, machine: str | None = None) -> dict:
        """A spec's history: every run, its bests, the best kernel and its plan."""
        return history(self, spec, machine)

    def export(self, path: str | Path, spec: str | None = None) -> dict:
        """Write a portable file (.json, or .json.gz); rows of each table written."""
        return export_file(self, path, spec)

    def import_file(self, path: str | Path) -> dict:
        """Add an export's rows, or a run directory's bests; rows of each table added."""
        if Path(path).is_dir():
            return remember_run_dir(self, Path(path))
        return import_file(self, path)

    def prune(self, keep: int = 5, older_than: str | float | None = None,
              spec: str | None = None) -> dict:
        """Keep the ``keep`` fastest kernels per spec and machine; drop runs older than
        ``older_than`` (a duration: "30d", or seconds) that keep none."""
        seconds = None if older_than is None else parse_duration(older_than)
        return prune(self, keep, seconds, spec)
