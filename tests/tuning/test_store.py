"""The database file: where it lives, what it says when it cannot be used, and the rows
runs read back."""

import os
import sqlite3
import threading

import pytest

from stochopt.tuning.store import DatabaseUnavailable, TuningDB, default_path, kernel_sha256

from .conftest import descended, remember, softmax_spec


def test_the_default_file_is_in_the_users_cache_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_path() == tmp_path / "cache" / "stochopt" / "tuning.db"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_path() == tmp_path / "home" / ".cache" / "stochopt" / "tuning.db"


@pytest.mark.parametrize("content", [b"not a database at all" * 100,
                                     b"SQLite format 3\x00" + b"\xff" * 4000])
def test_a_file_that_is_not_a_sound_database_is_named_in_one_line(tmp_path, content):
    path = tmp_path / "t.db"
    path.write_bytes(content)
    with pytest.raises(DatabaseUnavailable) as e:
        TuningDB(path)
    assert str(path) in e.value.message and "\n" not in str(e.value)
    assert "move it away" in e.value.hint
    assert path.read_bytes() == content  # left as it was, for the user to look at


def test_a_damaged_page_is_found_when_the_file_is_opened(tmp_path, store):
    spec = softmax_spec(tmp_path)
    _, kernel, plan = descended(spec)
    remember(store, spec, kernel, plan)
    store.close()
    data = bytearray(store.path.read_bytes())
    for page in range(1, len(data) // 4096):  # every page after the header: garbage
        data[page * 4096 + 8: page * 4096 + 1000] = b"\x42" * 992
    store.path.write_bytes(bytes(data))
    for suffix in ("-wal", "-shm"):
        (store.path.parent / (store.path.name + suffix)).unlink(missing_ok=True)
    with pytest.raises(DatabaseUnavailable, match="malformed|not a database"):
        TuningDB(store.path)


def test_a_folder_that_cannot_be_written_is_named(tmp_path):
    # a read-only folder stops everyone but root; a file where a folder must go stops
    # root too, so the test runs as either
    locked = tmp_path / "locked"
    if os.geteuid() == 0:
        locked.write_text("a file, not a folder")
    else:
        locked.mkdir(mode=0o500)
    with pytest.raises(DatabaseUnavailable) as e:
        TuningDB(locked / "sub" / "t.db")
    assert "--no-db" in e.value.hint and str(locked / "sub" / "t.db") in e.value.message


def test_reading_commands_do_not_make_a_file(tmp_path):
    with pytest.raises(DatabaseUnavailable, match="no tuning database"):
        TuningDB(tmp_path / "none.db", create=False)
    assert not (tmp_path / "none.db").exists()


def test_best_kernels_are_fastest_first_once_per_text_and_never_refuted(tmp_path, store):
    spec = softmax_spec(tmp_path)
    baseline, fast, plan = descended(spec)
    slow = remember(store, spec, baseline, [], run_dir="r1")
    best = remember(store, spec, fast, plan, run_dir="r1")
    again = remember(store, spec, fast, plan, run_dir="r2")  # the same kernel, another run
    found = store.best_kernels(best["spec"], best["machine"])
    assert [k["uid"] for k in found] == [best["uid"], slow["uid"]]
    assert found[0]["plan"] == again["plan"] and found[0]["proof"]["verdict"]["seed"] == 0
    store.mark_refuted(best["uid"], "a test")
    store.mark_refuted(again["uid"], "a test")
    assert [k["uid"] for k in store.best_kernels(best["spec"], best["machine"])] == \
        [slow["uid"]]
    assert store.best_kernels(best["spec"], best["machine"], with_plan=True)[0]["plan"] == []


def test_a_kernels_identity_ignores_the_comment_lines_of_its_file():
    text = "def k(x: \"f32[4] @ dram\") -> \"f32[4] @ dram\":\n    return x\n"
    assert kernel_sha256("# spec: a.py\n# machine: small\n" + text) == kernel_sha256(text)
    assert kernel_sha256(text) != kernel_sha256(text.replace("x\n", "x \n").replace("x ", "y"))


def test_rule_statistics_add_up_over_runs_and_replace_within_a_session(tmp_path, store):
    spec = softmax_spec(tmp_path)
    row = remember(store, spec, descended(spec)[1])
    family = store.spec(row["spec"])["family"]
    store.put_rule_stats(row["run"], 1.0, family, {("rewrite", "tile_output"): [10, 2, 1]})
    store.put_rule_stats(row["run"], 1.0, family, {("rewrite", "tile_output"): [20, 3, 1]})
    store.put_rule_stats(row["run"], 2.0, family, {("rewrite", "tile_output"): [5, 1, 1]})
    assert store.rule_totals([family]) == {("rewrite", "tile_output"): [25, 4, 2]}
    assert store.rule_totals(["another family"]) == {}


def test_two_connections_see_each_others_writes(tmp_path, store):
    spec = softmax_spec(tmp_path)
    with TuningDB(store.path) as other:
        row = remember(other, spec, descended(spec)[1])
    assert store.kernel(row["uid"])["cycles"] == row["cycles"]
    with sqlite3.connect(store.path) as c:
        assert c.execute("PRAGMA quick_check").fetchone()[0] == "ok"


def test_opening_a_file_another_process_is_writing_waits_for_it(tmp_path):
    # Switching to WAL while another connection holds the write lock fails at once in
    # SQLite, whatever the busy timeout: two runs opening a fresh file at once met it.
    path = tmp_path / "t.db"
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("CREATE TABLE other (x)")
    release = threading.Timer(0.3, lambda: writer.execute("COMMIT"))
    release.start()
    try:
        with TuningDB(path) as store:
            assert store.connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        release.join()
        writer.close()
