"""Moving the database between machines and keeping it small: export to a portable
JSON file (gzipped when its name ends in .gz), import one (rows already there are
skipped, so importing twice changes nothing), and prune.

An imported kernel keeps the proof it came with but is marked as not checked here: a
run that starts from it checks it first (stochopt/tuning/runs.py).
"""

from __future__ import annotations

import gzip
import json
import sqlite3
import time
from pathlib import Path

from stochopt.errors import StochoptError
from stochopt.tuning.schema import VERSION, transaction
from stochopt.tuning.store import JSON_COLUMNS, TuningDB

FORMAT = "stochopt-tuning-database"
TABLES = ("specs", "machines", "runs", "kernels", "rule_stats")
# the columns an imported row must have, with their types (None allowed where listed)
REQUIRED = {
    "specs": {"fingerprint": str, "name": str, "family": str, "shapes": dict,
              "source": str, "first_seen": float},
    "machines": {"fingerprint": str, "name": str, "constants": dict},
    "runs": {"uid": str, "spec": str, "machine": str, "run_dir": str, "host": str,
             "started": float, "start": str, "stochopt_version": str},
    "kernels": {"uid": str, "spec": str, "machine": str, "run": str, "text": str,
                "text_sha256": str, "cycles": int, "proof": dict, "verifier": str,
                "created": float, "stochopt_version": str},
    "rule_stats": {"run": str, "session": float, "family": str, "proposer": str,
                   "move": str, "tries": int, "accepted": int, "improvements": int},
}


def export_rows(db: TuningDB, spec: str | None = None) -> dict:
    """Everything (or one spec's rows, by name or fingerprint) as one plain dict."""
    specs = db.specs_named(spec) if spec else db._all("SELECT * FROM specs")
    if spec and not specs:
        raise StochoptError(f"the tuning database {db.path} has no spec {spec!r}",
                            hint="stochopt db list shows the specs it has")
    prints = [s["fingerprint"] for s in specs]
    marks = ", ".join("?" for _ in prints) or "NULL"
    runs = db._all(f"SELECT * FROM runs WHERE spec IN ({marks})", *prints)
    kernels = db._all(f"SELECT * FROM kernels WHERE spec IN ({marks})", *prints)
    machines = sorted({r["machine"] for r in runs} | {k["machine"] for k in kernels})
    run_ids = [r["uid"] for r in runs]
    stats = [row for chunk in _chunks(run_ids) for row in db._all(
        f"SELECT * FROM rule_stats WHERE run IN ({', '.join('?' for _ in chunk)})", *chunk)]
    for row in runs + kernels:
        row.pop("id", None)
    return {"format": FORMAT, "schema": VERSION, "exported": time.time(),
            "specs": specs, "machines": [db.machine(m) for m in machines], "runs": runs,
            "kernels": kernels, "rule_stats": stats}


def _chunks(items: list, size: int = 500):
    for i in range(0, len(items), size):
        yield items[i:i + size]


def export_file(db: TuningDB, path: str | Path, spec: str | None = None) -> dict:
    """Write the export; returns how many rows of each table it holds."""
    data = export_rows(db, spec)
    text = json.dumps(data, indent=1)
    try:
        if str(path).endswith(".gz"):
            Path(path).write_bytes(gzip.compress(text.encode()))
        else:
            Path(path).write_text(text + "\n")
    except OSError as e:
        raise StochoptError(f"cannot write {path}: {e}") from None
    return {table: len(data[table]) for table in TABLES}


def read_export(path: str | Path) -> dict:
    """An export file, every row checked (a clear error naming the row otherwise)."""
    try:
        raw = Path(path).read_bytes()
        data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    except (OSError, EOFError, gzip.BadGzipFile, UnicodeDecodeError,
            json.JSONDecodeError) as e:
        raise StochoptError(f"cannot read {path}: {e}",
                            hint="pass a file written by stochopt db export") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise StochoptError(f"{path} is not a tuning database export",
                            hint="pass a file written by stochopt db export")
    if not isinstance(data.get("schema"), int) or data["schema"] > VERSION:
        raise StochoptError(f"{path} was exported with schema {data.get('schema')!r}, "
                            f"newer than this stochopt's ({VERSION})",
                            hint="upgrade stochopt to import it")
    for table, columns in REQUIRED.items():
        rows = data.get(table, [])
        if not isinstance(rows, list):
            raise StochoptError(f"{path}: {table} must be a list of rows")
        for number, row in enumerate(rows, 1):
            _check_row(path, table, number, row, columns)
    return data


def _check_row(path, table: str, number: int, row, columns: dict) -> None:
    if not isinstance(row, dict):
        raise StochoptError(f"{path}: {table} row {number} is not an object")
    for name, kind in columns.items():
        value = row.get(name)
        ok = isinstance(value, kind) and not isinstance(value, bool) or \
            kind is float and isinstance(value, int) and not isinstance(value, bool)
        if not ok:
            raise StochoptError(f"{path}: {table} row {number}: {name} must be "
                                f"{kind.__name__}, got {value!r:.60}")


def import_file(db: TuningDB, path: str | Path) -> dict:
    """Add an export's rows; returns how many of each table were new."""
    data = read_export(path)
    columns = {table: [r[1] for r in db.connection.execute(f"PRAGMA table_info({table})")]
               for table in TABLES}
    added = dict.fromkeys(TABLES, 0)
    try:
        with transaction(db.connection) as c:
            for table in TABLES:
                for row in data.get(table, []):
                    values = {k: row.get(k) for k in columns[table] if k != "id"}
                    if table == "kernels":
                        values["checked_here"] = 0  # proved elsewhere: checked before use
                    values = {k: json.dumps(v) if k in JSON_COLUMNS and v is not None else v
                              for k, v in values.items()}
                    cursor = c.execute(f"INSERT OR IGNORE INTO {table} ({', '.join(values)}) "
                                       f"VALUES ({', '.join('?' for _ in values)})",
                                       tuple(values.values()))
                    added[table] += cursor.rowcount == 1
    except sqlite3.IntegrityError as e:  # a row names a spec, machine or run not in it
        raise StochoptError(f"{path}: {e}; nothing was imported",
                            hint="pass a whole file written by stochopt db export") from None
    return added


def prune(db: TuningDB, keep: int = 5, older_than_s: float | None = None,
          spec: str | None = None) -> dict:
    """Keep the ``keep`` fastest kernels of each spec and machine (refuted ones go);
    with ``older_than_s``, drop the runs older than that which keep no kernel; with
    ``spec`` (a name or fingerprint), touch that spec alone. Returns what went."""
    if keep < 1:
        raise StochoptError(f"prune keeps at least one kernel per spec, got keep={keep}")
    prints = [s["fingerprint"] for s in db.specs_named(spec)] if spec else None
    if spec and not prints:
        raise StochoptError(f"the tuning database {db.path} has no spec {spec!r}",
                            hint="stochopt db list shows the specs it has")
    where = "" if prints is None else f" AND spec IN ({', '.join('?' for _ in prints)})"
    args = prints or []
    gone = {"kernels": 0, "runs": 0, "specs": 0}
    with transaction(db.connection) as c:
        gone["kernels"] += c.execute(f"DELETE FROM kernels WHERE refuted IS NOT NULL{where}",
                                     args).rowcount
        gone["kernels"] += c.execute(f"""
            DELETE FROM kernels WHERE id IN (SELECT id FROM (
                SELECT id, ROW_NUMBER() OVER (PARTITION BY spec, machine
                                              ORDER BY cycles, id) AS rank
                FROM kernels WHERE 1{where}) WHERE rank > ?)""", (*args, keep)).rowcount
        if older_than_s is not None:
            cutoff = time.time() - older_than_s
            old = [r[0] for r in c.execute(
                f"SELECT uid FROM runs WHERE started < ?{where} AND uid NOT IN "
                "(SELECT run FROM kernels)", (cutoff, *args))]
            for chunk in _chunks(old):
                marks = ", ".join("?" for _ in chunk)
                c.execute(f"DELETE FROM rule_stats WHERE run IN ({marks})", chunk)
                gone["runs"] += c.execute(f"DELETE FROM runs WHERE uid IN ({marks})",
                                          chunk).rowcount
        gone["specs"] += c.execute(
            "DELETE FROM specs WHERE fingerprint NOT IN (SELECT spec FROM runs) AND "
            "fingerprint NOT IN (SELECT spec FROM kernels)").rowcount
        c.execute("DELETE FROM machines WHERE fingerprint NOT IN (SELECT machine FROM runs) "
                  "AND fingerprint NOT IN (SELECT machine FROM kernels)")
    try:
        db.connection.execute("VACUUM")  # give the space back; skipped while others read
    except sqlite3.OperationalError:  # busy: the file keeps its size until the next prune
        pass
    return gone

