"""A Ray chain's link to the coordinator, without a cluster: how often it calls, what a
batch holds, and the stochopt a chain's worker imports."""

import pickle
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'stochopt[ray]'")

from stochopt.search import ray_actors  # noqa: E402
from stochopt.search.ray_actors import Link, _imports_from  # noqa: E402
from stochopt.search.ray_executor import SYNC_S, import_paths, sync_period  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


class FakeCoordinator:
    """Records each call of sync(); hands back the inbox it is given, once."""

    def __init__(self) -> None:
        self.batches: list[list] = []
        self.inbox: list = []
        outer = self

        class Sync:
            @staticmethod
            def remote(index, batch, files):
                outer.batches.append(pickle.loads(batch))
                delivered, outer.inbox = outer.inbox, []
                return delivered, False

        self.sync = Sync


@pytest.fixture
def link(tmp_path, monkeypatch):
    monkeypatch.setattr(ray, "get", lambda value: value)  # the fake's calls return values
    coordinator = FakeCoordinator()
    return Link(coordinator, 0, tmp_path, sync_s=0.5), coordinator


def _state(proposals: int) -> tuple:
    return ("state", 0, {"proposals": proposals, "counterexamples": []})


def test_a_batch_goes_at_a_state_once_the_period_is_over_and_ends_with_it(link, monkeypatch):
    link, coordinator = link
    clock = [link.last_sync]
    monkeypatch.setattr(ray_actors.time, "monotonic", lambda: clock[0])
    for step in range(1, 5):  # events and a state every quarter second
        clock[0] += 0.25
        link.put(("events", 0, [{"step": step}]))
        link.put(_state(step))
    # two states to a batch: at 0.5 s and 1.0 s
    assert [[m[0] for m in batch] for batch in coordinator.batches] == \
        [["events", "state", "events", "state"]] * 2
    assert [batch[-1][2]["proposals"] for batch in coordinator.batches] == [2, 4]
    clock[0] += 0.1
    link.put(("events", 0, [{"step": 5}]))
    link.put(_state(5))
    assert len(coordinator.batches) == 2  # too soon: it waits in the link
    link.put(("done", 0))  # the end goes at once, with what waited
    assert [m[0] for m in coordinator.batches[-1]] == ["events", "state", "done"]


def test_what_the_coordinator_hands_back_reaches_the_chain(link):
    link, coordinator = link
    coordinator.inbox = [("best", "kernel text", 1864, True)]
    link.put(("done", 0))
    assert link.get_nowait() == ("best", "kernel text", 1864, True)


def test_a_chain_calls_every_half_second_and_the_coordinator_at_most_500_times_a_second():
    assert sync_period(1) == sync_period(250) == SYNC_S == 0.5
    assert sync_period(1024) == pytest.approx(1024 / 500)


def test_a_chain_imports_the_stochopt_the_driver_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{ROOT}")
    assert import_paths() == [str(ROOT), str(tmp_path)]  # this checkout first, once
    _imports_from(ROOT)
    _imports_from(tmp_path / "not on this node")  # a node without the folder: its own
    with pytest.raises(ImportError, match=f"imports stochopt from {ROOT}, the driver "
                                          f"from {tmp_path}"):
        _imports_from(tmp_path)
