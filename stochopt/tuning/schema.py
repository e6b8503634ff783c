"""The tuning database's schema, versioned: the tables, and the migrations that bring an
older file up to date.

SQLite keeps the version in ``PRAGMA user_version``. A new file is created at the
current version; an older one is migrated step by step, each step in its own
transaction; a file from a newer stochopt is refused (its tables may mean other things).
To change the schema, append a step to MIGRATIONS and say what it does: never edit a
step that shipped.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

# Rows are plain values; JSON columns hold lists and dicts as text.
#
# specs     one row per spec fingerprint (stochopt/tuning/fingerprints.py): its name,
#           family (op structure and dtypes, shapes left out) and op multiset, the
#           inputs' shapes, dtypes and ranges, the normalized source
# machines  one row per machine fingerprint: its name and constants
# runs      one row per run that used the database: where, when, how it started
#           ("lowering", "transfer": the lowering with plans from similar specs,
#           "database": a warm start, "init": a --init kernel), its baseline kernel, and
#           how it ended; uid is the same in every database the run is imported into
# kernels   every proved kernel a run wrote to best.leir: text, cycles, proof (how it
#           was verified), the plan from the spec's lowering where known
# rule_stats  per run session, proposer and move: tries, accepted, improvements
CREATE = [
    """CREATE TABLE specs (
        fingerprint TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        family TEXT NOT NULL,
        ops TEXT,
        shapes TEXT NOT NULL,
        source TEXT NOT NULL,
        first_seen REAL NOT NULL)""",
    "CREATE INDEX specs_by_name ON specs (name)",
    "CREATE INDEX specs_by_family ON specs (family)",
    """CREATE TABLE machines (
        fingerprint TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        constants TEXT NOT NULL)""",
    """CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        uid TEXT NOT NULL UNIQUE,
        spec TEXT NOT NULL REFERENCES specs (fingerprint),
        machine TEXT NOT NULL REFERENCES machines (fingerprint),
        run_dir TEXT NOT NULL,
        host TEXT NOT NULL,
        started REAL NOT NULL,
        seed INTEGER,
        budget_s REAL,
        start TEXT NOT NULL,
        warm_from TEXT,
        baseline TEXT,
        baseline_cycles INTEGER,
        bound_cycles INTEGER,
        best_cycles INTEGER,
        stopped_by TEXT,
        ended REAL,
        stochopt_version TEXT NOT NULL)""",
    "CREATE INDEX runs_by_spec ON runs (spec, machine)",
    """CREATE TABLE kernels (
        id INTEGER PRIMARY KEY,
        uid TEXT NOT NULL UNIQUE,
        spec TEXT NOT NULL REFERENCES specs (fingerprint),
        machine TEXT NOT NULL REFERENCES machines (fingerprint),
        run TEXT NOT NULL REFERENCES runs (uid),
        text TEXT NOT NULL,
        text_sha256 TEXT NOT NULL,
        cycles INTEGER NOT NULL,
        source TEXT,
        t REAL,
        chain INTEGER,
        proof TEXT NOT NULL,
        verifier TEXT NOT NULL,
        checked_here INTEGER NOT NULL,
        precision_margin REAL,
        plan TEXT,
        refuted TEXT,
        created REAL NOT NULL,
        stochopt_version TEXT NOT NULL)""",
    "CREATE INDEX kernels_by_spec ON kernels (spec, machine, cycles)",
    """CREATE TABLE rule_stats (
        run TEXT NOT NULL REFERENCES runs (uid),
        session REAL NOT NULL,
        family TEXT NOT NULL,
        proposer TEXT NOT NULL,
        move TEXT NOT NULL,
        tries INTEGER NOT NULL,
        accepted INTEGER NOT NULL,
        improvements INTEGER NOT NULL,
        PRIMARY KEY (run, session, proposer, move))""",
    "CREATE INDEX rule_stats_by_family ON rule_stats (family)",
]

# (the version a step brings the file to, its statements); the first step creates it
MIGRATIONS: list[tuple[int, list[str]]] = [
    (1, CREATE),
]
VERSION = MIGRATIONS[-1][0]


class NewerSchema(Exception):
    """The file was written by a newer stochopt."""


@contextmanager
def transaction(connection: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction: it takes the write lock at once (BEGIN IMMEDIATE, so two
    writers queue on the busy timeout instead of failing mid-way), commits at the end,
    rolls back on any error. The connection is in autocommit mode otherwise."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield connection
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


def migrate(connection: sqlite3.Connection) -> int:
    """Bring the file to VERSION; returns the version it had (0: it was empty)."""
    found = connection.execute("PRAGMA user_version").fetchone()[0]
    if found > VERSION:
        raise NewerSchema(f"its schema is version {found}, newer than this stochopt's "
                          f"({VERSION})")
    for version, statements in MIGRATIONS:
        if version <= found:
            continue
        with transaction(connection):  # one per step: a kill leaves the step undone
            # another process may have migrated it while this one waited for the lock
            if connection.execute("PRAGMA user_version").fetchone()[0] >= version:
                continue
            for statement in statements:
                connection.execute(statement)
            connection.execute(f"PRAGMA user_version = {version}")
    return found
