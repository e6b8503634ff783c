"""The tuning database: one SQLite file (WAL mode) that every run on this machine reads
and writes, with plain methods on plain values (docs/database.md).

Writes are short transactions that take the write lock first (BEGIN IMMEDIATE) and
wait for it up to ``BUSY_TIMEOUT_S``, so two runs writing at once queue; SQLite's
journal makes each one all or nothing, so a process killed in the middle of one leaves
the file as it was before it. A file that cannot be opened, is not a database, is
damaged or comes from a newer stochopt raises ``DatabaseUnavailable`` with one line
that says which and what to do.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from pathlib import Path

from stochopt.errors import StochoptError
from stochopt.tuning.schema import VERSION, NewerSchema, migrate, transaction

BUSY_TIMEOUT_S = 30.0   # how long a write waits for another process's write to end
FILE_NAME = "tuning.db"


class DatabaseUnavailable(StochoptError):
    """The database cannot be used; the message is one line naming the file."""


def default_path() -> Path:
    """$XDG_CACHE_HOME/stochopt/tuning.db, else ~/.cache/stochopt/tuning.db."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "stochopt" / FILE_NAME


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def kernel_body(text: str) -> str:
    """A kernel's text without its leading comment lines (a kernel file's '# spec:' and
    '# machine:' lines say where it was written, not what it is)."""
    lines = text.strip().splitlines()
    while lines and lines[0].lstrip().startswith("#"):
        lines.pop(0)
    return "\n".join(lines) + "\n"


def kernel_sha256(text: str) -> str:
    """A kernel's identity: the digest of its body."""
    return sha256_text(kernel_body(text))


def uid_of(*parts) -> str:
    return hashlib.sha256("\0".join(map(str, parts)).encode()).hexdigest()[:32]


JSON_COLUMNS = ("shapes", "constants", "proof", "plan")


def _row(row: sqlite3.Row | None) -> dict | None:
    if row is None:
        return None
    out = dict(row)
    for key in JSON_COLUMNS:
        if key in out and isinstance(out[key], str):
            out[key] = json.loads(out[key])
    return out


def _set_wal(connection: sqlite3.Connection) -> None:
    """Put the file in WAL mode. Switching a new file's journal needs a lock that SQLite
    does not wait for with the busy timeout (two processes opening a fresh file at once
    see "database is locked" at once), so retry here until BUSY_TIMEOUT_S has passed."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            connection.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


class TuningDB:
    """The database at ``path`` (default: default_path()). ``create=False`` refuses a
    path with no file instead of making one (the read-only commands use it)."""

    def __init__(self, path: str | Path | None = None, *, create: bool = True,
                 check: bool = True) -> None:
        self.path = Path(path) if path is not None else default_path()
        if not create and not self.path.is_file():
            raise DatabaseUnavailable(f"no tuning database at {self.path} yet: the first "
                                      "run of stochopt optimize makes it",
                                      hint="or pass --db PATH")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S,
                                              isolation_level=None)
        except (OSError, sqlite3.Error) as e:
            raise self._unavailable(e) from None
        try:
            self.connection.row_factory = sqlite3.Row
            _set_wal(self.connection)
            self.connection.execute("PRAGMA synchronous = FULL")
            self.connection.execute("PRAGMA foreign_keys = ON")
            if check and self.connection.execute("PRAGMA quick_check(1)").fetchone()[0] \
                    != "ok":
                raise sqlite3.DatabaseError("database disk image is malformed")
            migrate(self.connection)
        except (sqlite3.Error, NewerSchema) as e:
            self.connection.close()
            raise self._unavailable(e) from None

    def _unavailable(self, e: BaseException) -> DatabaseUnavailable:
        why = str(e) or type(e).__name__
        if isinstance(e, NewerSchema):
            hint = "upgrade stochopt, or pass --db with another file"
        elif "not a database" in why or "malformed" in why:
            hint = "move it away (a new one is made), or pass --db with another file"
        else:
            hint = "pass --db with a path you can write, or --no-db"
        return DatabaseUnavailable(f"tuning database {self.path}: {why}", hint=hint)

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> TuningDB:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _all(self, sql: str, *args) -> list[dict]:
        return [_row(r) for r in self.connection.execute(sql, args).fetchall()]

    def _one(self, sql: str, *args) -> dict | None:
        return _row(self.connection.execute(sql, args).fetchone())

    # -- writes ------------------------------------------------------------------------
    def add_spec(self, sp) -> None:
        """A spec (a fingerprints.SpecPrint), once."""
        with transaction(self.connection) as c:
            c.execute("INSERT OR IGNORE INTO specs VALUES (?, ?, ?, ?, ?, ?, ?)",
                      (sp.fingerprint, sp.name, sp.family, sp.ops,
                       json.dumps(sp.shapes), sp.source, time.time()))

    def add_machine(self, fingerprint: str, name: str, constants: dict) -> None:
        with transaction(self.connection) as c:
            c.execute("INSERT OR IGNORE INTO machines VALUES (?, ?, ?)",
                      (fingerprint, name, json.dumps(constants)))

    def add_run(self, run: dict) -> bool:
        """A run's row (keys: the runs table's columns but id); a resumed run keeps the
        row it has (False)."""
        return self._insert("runs", run)

    def end_run(self, uid: str, **facts) -> None:
        """Update a run's row: best_cycles, stopped_by, ended."""
        names = ", ".join(f"{k} = ?" for k in facts)
        with transaction(self.connection) as c:
            c.execute(f"UPDATE runs SET {names} WHERE uid = ?", (*facts.values(), uid))

    def add_kernel(self, kernel: dict) -> bool:
        """A proved kernel (the kernels table's columns but id; proof and plan as plain
        values). False when a row with its uid is already there."""
        return self._insert("kernels", kernel)

    def _insert(self, table: str, row: dict) -> bool:
        values = {k: json.dumps(v) if k in JSON_COLUMNS and v is not None else v
                  for k, v in row.items()}
        names = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        with transaction(self.connection) as c:
            cursor = c.execute(f"INSERT OR IGNORE INTO {table} ({names}) VALUES ({marks})",
                               tuple(values.values()))
        return cursor.rowcount == 1

    def mark_refuted(self, uid: str, why: str) -> None:
        """A kernel that failed a later check: never a warm start again."""
        with transaction(self.connection) as c:
            c.execute("UPDATE kernels SET refuted = ? WHERE uid = ?", (why, uid))

    def mark_checked(self, uid: str, verifier: str, proof: dict) -> None:
        """A kernel checked again here, under this verifier."""
        with transaction(self.connection) as c:
            c.execute("UPDATE kernels SET verifier = ?, proof = ?, checked_here = 1 "
                      "WHERE uid = ?", (verifier, json.dumps(proof), uid))

    def put_rule_stats(self, run: str, session: float, family: str,
                       counts: dict[tuple[str, str], list[int]]) -> None:
        """A run session's totals per (proposer, move): [tries, accepted, improvements],
        replacing what the session wrote before (the totals only grow)."""
        rows = [(run, session, family, proposer, move, *numbers)
                for (proposer, move), numbers in counts.items()]
        with transaction(self.connection) as c:
            c.executemany("INSERT OR REPLACE INTO rule_stats VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                          rows)

    # -- reads -------------------------------------------------------------------------
    def spec(self, fingerprint: str) -> dict | None:
        return self._one("SELECT * FROM specs WHERE fingerprint = ?", fingerprint)

    def machine(self, fingerprint: str) -> dict | None:
        return self._one("SELECT * FROM machines WHERE fingerprint = ?", fingerprint)

    def run(self, uid: str) -> dict | None:
        return self._one("SELECT * FROM runs WHERE uid = ?", uid)

    def kernel(self, uid: str) -> dict | None:
        return self._one("SELECT * FROM kernels WHERE uid = ?", uid)

    def best_kernels(self, spec: str, machine: str, limit: int = 5,
                     with_plan: bool = False) -> list[dict]:
        """The fastest kernels of a spec on a machine that no check refuted, fastest
        first (one per kernel text)."""
        plan = " AND plan IS NOT NULL" if with_plan else ""
        return self._all(f"""SELECT * FROM kernels WHERE id IN (
                                SELECT MIN(id) FROM kernels
                                WHERE spec = ? AND machine = ? AND refuted IS NULL{plan}
                                GROUP BY text_sha256)
                             ORDER BY cycles, id LIMIT ?""", spec, machine, limit)

    def runs_of(self, spec: str, machine: str) -> list[dict]:
        return self._all("SELECT * FROM runs WHERE spec = ? AND machine = ? "
                         "ORDER BY started, id", spec, machine)

    def kernels_of_run(self, run: str) -> list[dict]:
        return self._all("SELECT * FROM kernels WHERE run = ? ORDER BY created, id", run)

    def specs_named(self, name: str) -> list[dict]:
        """Specs whose name is ``name`` or whose fingerprint starts with it (6 characters
        at least)."""
        return self._all("SELECT * FROM specs WHERE name = ? OR (length(?) >= 6 AND "
                         "substr(fingerprint, 1, length(?)) = ?) ORDER BY first_seen",
                         name, name, name, name)

    def summary(self) -> list[dict]:
        """One row per spec and machine: names, best cycles, runs, kernels, last run."""
        return self._all("""
            SELECT s.name AS spec, s.fingerprint AS spec_fingerprint, m.name AS machine,
                   m.fingerprint AS machine_fingerprint,
                   (SELECT MIN(cycles) FROM kernels k WHERE k.spec = s.fingerprint
                        AND k.machine = m.fingerprint AND k.refuted IS NULL) AS best_cycles,
                   (SELECT MAX(baseline_cycles) FROM runs r WHERE r.spec = s.fingerprint
                        AND r.machine = m.fingerprint) AS baseline_cycles,
                   (SELECT COUNT(*) FROM runs r WHERE r.spec = s.fingerprint
                        AND r.machine = m.fingerprint) AS runs,
                   (SELECT COUNT(*) FROM kernels k WHERE k.spec = s.fingerprint
                        AND k.machine = m.fingerprint) AS kernels,
                   (SELECT MAX(started) FROM runs r WHERE r.spec = s.fingerprint
                        AND r.machine = m.fingerprint) AS last_run
            FROM specs s JOIN machines m
            WHERE EXISTS (SELECT 1 FROM runs r WHERE r.spec = s.fingerprint
                          AND r.machine = m.fingerprint)
               OR EXISTS (SELECT 1 FROM kernels k WHERE k.spec = s.fingerprint
                          AND k.machine = m.fingerprint)
            ORDER BY s.name, m.name, last_run""")

    def specs_like(self, family: str, ops: str | None, exclude: str) -> list[dict]:
        """Other specs of the same family, then of the same op multiset."""
        return self._all("""SELECT *, family = ? AS same_family FROM specs
                            WHERE fingerprint != ? AND (family = ? OR (ops IS NOT NULL
                                                                     AND ops = ?))
                            ORDER BY same_family DESC, first_seen DESC""",
                         family, exclude, family, ops)

    def rule_totals(self, families: list[str]) -> dict[tuple[str, str], list[int]]:
        """(proposer, move) -> [tries, accepted, improvements] summed over the families."""
        if not families:
            return {}
        marks = ", ".join("?" for _ in families)
        rows = self.connection.execute(
            f"SELECT proposer, move, SUM(tries), SUM(accepted), SUM(improvements) FROM "
            f"rule_stats WHERE family IN ({marks}) GROUP BY proposer, move", families)
        return {(r[0], r[1]): [r[2], r[3], r[4]] for r in rows}

    def schema_version(self) -> int:
        return VERSION
