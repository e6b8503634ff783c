"""The schema is versioned: a new file is made at the current version, an older one is
brought up to date one step at a time (each all or nothing), a newer one is refused."""

import sqlite3

import pytest

from stochopt.tuning import schema
from stochopt.tuning.store import DatabaseUnavailable, TuningDB


def version_of(path) -> int:
    with sqlite3.connect(path) as c:
        return c.execute("PRAGMA user_version").fetchone()[0]


def test_a_new_file_has_every_table_at_the_current_version(tmp_path):
    path = tmp_path / "t.db"
    TuningDB(path).close()
    assert version_of(path) == schema.VERSION
    with sqlite3.connect(path) as c:
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        mode = c.execute("PRAGMA journal_mode").fetchone()[0]
    assert tables == {"specs", "machines", "runs", "kernels", "rule_stats"}
    assert mode == "wal"


def test_an_older_file_is_migrated_once_and_keeps_its_rows(tmp_path, monkeypatch):
    path = tmp_path / "t.db"
    with TuningDB(path) as db:
        db.add_machine("m1", "small", {"lanes": 4})
    step = (schema.VERSION + 1, ["ALTER TABLE machines ADD COLUMN note TEXT DEFAULT 'x'"])
    monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS + [step])
    monkeypatch.setattr(schema, "VERSION", step[0])
    with TuningDB(path) as db:
        assert db.machine("m1")["note"] == "x"   # the old row, with the new column
    assert version_of(path) == step[0]
    TuningDB(path).close()  # at the version already: nothing runs again
    assert version_of(path) == step[0]


def test_a_step_that_fails_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    path = tmp_path / "t.db"
    TuningDB(path).close()
    step = (schema.VERSION + 1, ["CREATE TABLE half (x)", "THIS IS NOT SQL"])
    monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS + [step])
    monkeypatch.setattr(schema, "VERSION", step[0])
    with pytest.raises(DatabaseUnavailable):
        TuningDB(path)
    assert version_of(path) == step[0] - 1
    with sqlite3.connect(path) as c:
        assert not c.execute("SELECT name FROM sqlite_master WHERE name='half'").fetchall()


def test_a_file_from_a_newer_stochopt_is_refused_in_one_line(tmp_path):
    path = tmp_path / "t.db"
    TuningDB(path).close()
    with sqlite3.connect(path) as c:
        c.execute(f"PRAGMA user_version = {schema.VERSION + 1}")
    with pytest.raises(DatabaseUnavailable) as e:
        TuningDB(path)
    assert "newer" in e.value.message and str(path) in e.value.message
    assert "\n" not in str(e.value) and "upgrade stochopt" in e.value.hint
