"""Export, import and prune: a portable file that carries every row, imports that add
what is new and nothing twice, and pruning that keeps the fastest."""

import gzip
import json

import pytest

from stochopt.errors import StochoptError
from stochopt.tuning.database import Database
from stochopt.tuning.exchange import TABLES, export_file, import_file, prune

from .conftest import remember, softmax_at


@pytest.fixture
def two_specs(store):
    rows = []
    for started, shape in enumerate(((16, 512), (256, 64))):   # one run each, two bests
        spec, baseline, kernel, plan = softmax_at(*shape)
        rows.append(remember(store, spec, baseline, [], run_dir=f"runs/{shape}",
                             started=started))
        rows.append(remember(store, spec, kernel, plan, run_dir=f"runs/{shape}",
                             started=started))
    store.put_rule_stats(rows[0]["run"], 1.0, "family", {("mutate", "swap"): [9, 2, 1]})
    return store, rows


@pytest.mark.parametrize("name", ["out.json", "out.json.gz"])
def test_an_export_imported_elsewhere_holds_every_row_and_twice_adds_nothing(
        tmp_path, two_specs, name):
    store, rows = two_specs
    written = export_file(store, tmp_path / name)
    assert written == {"specs": 2, "machines": 1, "runs": 2, "kernels": 4, "rule_stats": 1}
    if name.endswith(".gz"):
        assert json.loads(gzip.decompress((tmp_path / name).read_bytes()))["format"]
    with Database(tmp_path / "other.db") as other:
        assert import_file(other, tmp_path / name) == written
        assert import_file(other, tmp_path / name) == dict.fromkeys(TABLES, 0)
        for row in rows:
            copy = other.kernel(row["uid"])
            assert copy["text"] == row["text"] and copy["plan"] == row["plan"]
            assert copy["checked_here"] == 0   # proved elsewhere: checked before use
        assert other.list() == store.list()
        assert other.rule_totals(["family"]) == {("mutate", "swap"): [9, 2, 1]}


def test_an_export_of_one_spec_holds_its_rows_alone(tmp_path, two_specs):
    store, rows = two_specs
    name = store.spec(rows[0]["spec"])["fingerprint"]
    assert export_file(store, tmp_path / "one.json", spec=name)["kernels"] == 2
    with pytest.raises(StochoptError, match="no spec 'nope'"):
        export_file(store, tmp_path / "none.json", spec="nope")


@pytest.mark.parametrize("content, says", [
    (b"\x1f\x8b not gzip", "cannot read"), (b"[1, 2]", "not a tuning database export"),
    (json.dumps({"format": "stochopt-tuning-database", "schema": 99}).encode(), "newer"),
    (json.dumps({"format": "stochopt-tuning-database", "schema": 1,
                 "kernels": [{"uid": 3}]}).encode(), "kernels row 1: uid must be str"),
    (json.dumps({"format": "stochopt-tuning-database", "schema": 1,
                 "runs": "all"}).encode(), "runs must be a list")])
def test_a_bad_file_is_refused_with_what_is_wrong_and_nothing_imported(
        tmp_path, store, content, says):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(StochoptError, match=says):
        import_file(store, path)
    assert store.list() == []


def test_rows_that_name_what_the_file_lacks_import_nothing(tmp_path, two_specs):
    store, _ = two_specs
    export_file(store, tmp_path / "all.json")
    data = json.loads((tmp_path / "all.json").read_text())
    data["runs"] = []   # kernels whose runs are gone
    (tmp_path / "cut.json").write_text(json.dumps(data))
    with Database(tmp_path / "other.db") as other:
        with pytest.raises(StochoptError, match="nothing was imported"):
            import_file(other, tmp_path / "cut.json")
        assert other.list() == []


def test_prune_keeps_the_fastest_kernels_and_drops_the_refuted(two_specs):
    store, rows = two_specs
    store.mark_refuted(rows[3]["uid"], "a test")
    assert prune(store, keep=1) == {"kernels": 2, "runs": 0, "specs": 0}
    kept = {k["uid"] for s in store.list()
            for k in store.best_kernels(s["spec_fingerprint"], s["machine_fingerprint"])}
    assert kept == {rows[1]["uid"], rows[2]["uid"]}
    with pytest.raises(StochoptError, match="at least one"):
        prune(store, keep=0)


def test_prune_of_old_runs_leaves_those_that_keep_a_kernel(two_specs):
    store, rows = two_specs
    store.connection.execute("DELETE FROM kernels WHERE run = ?", (rows[0]["run"],))
    gone = prune(store, keep=5, older_than_s=3600)   # both runs started in 1970
    assert gone == {"kernels": 0, "runs": 1, "specs": 1}
    assert [r["spec"] for r in store.list()] == ["softmax"]
    assert store.rule_totals(["family"]) == {}   # the statistics went with their run
