"""events.jsonl stays small however long the run, and the report still counts every
candidate and credits every improvement as if each had its own line."""

import json
import random

import pytest

from stochopt.report import facts
from stochopt.search import event_log
from stochopt.search.event_log import (
    INTERVAL_S,
    LINE_BYTES,
    NOTABLE_PER_INTERVAL,
    SAMPLED_PER_INTERVAL,
    BoundedEventLog,
)

START = 8000
BOUND_BYTES = 200 * 1024**2   # the stated bound of a 48-hour run's events.jsonl


def candidates(n: int, rate: float, chains: int = 4, seed: int = 0, llm_share=0.002,
               error_kinds: int = 50):
    """n candidates at ``rate`` per second from chains walking over cycle counts: moves
    taken up and down hill, new bests, refusals with numbered errors, some LLM ones and
    some chains moved back to the global best."""
    rng = random.Random(seed)
    current = [START] * chains
    best = START
    for i in range(n):
        chain = rng.randrange(chains)
        proposer = "llm" if rng.random() < llm_share else rng.choice(["mutate", "rewrite"])
        event = {"chain": chain, "proposer": proposer, "move": rng.choice("abc"),
                 "cycles": None, "error": None, "tokens": 0, "cost_usd": 0.0,
                 "seconds": 0.0002, "t": round(i / rate, 4)}
        if proposer == "llm":
            event.update(tokens=500, cost_usd=0.001)
        draw = rng.random()
        if draw < 0.4:
            event.update(outcome="invalid",
                         error=f"line {rng.randrange(error_kinds)}: no such op; 12 args")
        elif draw < 0.7:
            event.update(outcome="rejected", cycles=current[chain] + rng.randrange(1, 400))
        else:
            cycles = max(100, current[chain] + rng.randrange(-120, 100))
            outcome = "accepted"
            if cycles < best and rng.random() < 0.5:
                best, outcome = cycles, "best"
            current[chain] = cycles
            event.update(outcome=outcome, cycles=cycles, error=0.0)
        if rng.random() < 0.0005:
            event["restarted_from_best"] = True
            current[chain] = best
        yield event


def write_both(tmp_path, events, monkeypatch, detail=200):
    """The same events through the bounded log and one line each."""
    monkeypatch.setattr(event_log, "FULL_DETAIL_EVENTS", detail)
    bounded = BoundedEventLog(tmp_path / "bounded.jsonl")
    with open(tmp_path / "full.jsonl", "w") as full:
        for e in events:
            full.write(json.dumps(e) + "\n")
            bounded.write(dict(e))
    bounded.close()
    return tmp_path / "bounded.jsonl", tmp_path / "full.jsonl"


def read(path):
    return facts._read_events(path, [], START)


@pytest.mark.slow
def test_the_report_counts_and_credits_as_if_every_candidate_had_its_line(
        tmp_path, monkeypatch):
    events = list(candidates(30_000, rate=100.0))
    bounded, full = write_both(tmp_path, events, monkeypatch)
    lines = bounded.read_text().splitlines()
    assert len(lines) < len(events) / 10  # it did leave most candidates to the counts
    a, b = read(bounded), read(full)
    for key in ("proposals", "accepted", "outcomes", "tokens"):
        assert a[key] == b[key], key
    assert a["cost_usd"] == pytest.approx(b["cost_usd"])
    assert a["last_t"] == b["last_t"]
    for name, row in b["by_proposer"].items():
        for key in ("proposals", "outcomes", "accepted", "tokens"):
            assert a["by_proposer"][name][key] == row[key], (name, key)
    assert len(a["steps"]) == len(b["steps"]) > 10
    for x, y in zip(a["steps"], b["steps"], strict=True):
        assert {k: v for k, v in x.items() if k != "largest_moves"} == \
            {k: v for k, v in y.items() if k != "largest_moves"}
        assert [m["saved"] for m in x["largest_moves"]] == \
            [m["saved"] for m in y["largest_moves"]]


def test_short_runs_keep_every_candidate(tmp_path):
    events = list(candidates(3_000, rate=200.0))
    log = BoundedEventLog(tmp_path / "events.jsonl")
    for e in events:
        log.write(dict(e))
    log.close()
    assert [json.loads(line) for line in open(tmp_path / "events.jsonl")] == events


@pytest.mark.parametrize("rate, detail", [
    (50.0, 1_000),  # the fast tier: a shorter full-detail part before the same intervals
    pytest.param(5_000.0, event_log.FULL_DETAIL_EVENTS, marks=pytest.mark.slow)])
def test_an_interval_holds_a_bounded_number_of_lines_whatever_the_rate(tmp_path, rate, detail,
                                                                      monkeypatch):
    monkeypatch.setattr(event_log, "FULL_DETAIL_EVENTS", detail)
    n = int(rate * INTERVAL_S * 2) + 2 * detail  # past the full-detail part, two intervals more
    log = BoundedEventLog(tmp_path / "events.jsonl")
    for e in candidates(n, rate=rate, error_kinds=10_000):
        log.write(e)
    log.close()
    lines = [json.loads(line) for line in open(tmp_path / "events.jsonl")]
    late = [e for e in lines[event_log.FULL_DETAIL_EVENTS:] if "outcome" in e]
    per_interval: dict[int, int] = {}
    for e in late:
        if e["outcome"] != "best":
            k = int(e["t"] // INTERVAL_S)
            per_interval[k] = per_interval.get(k, 0) + 1
    assert max(per_interval.values()) <= NOTABLE_PER_INTERVAL + SAMPLED_PER_INTERVAL
    assert all(len(json.dumps(e)) <= LINE_BYTES for e in late)
    assert read(tmp_path / "events.jsonl")["proposals"] == n


@pytest.mark.slow
def test_a_tenth_of_48_hours_at_every_cap_stays_under_a_tenth_of_the_bound(tmp_path):
    """The worst a run can write: every interval fills its notable and sampled lines (new
    kinds of error, LLM candidates, long error texts) and its aggregate, with 64 chains;
    the candidates in between are only counted, so the rate does not matter past this.
    Intervals are alike, so a tenth of 48 hours under a tenth of the bound proves it
    (benchmarks/event_bound.py writes the whole 48 hours and times the report on it)."""
    from benchmarks.event_bound import saturated_events

    path = tmp_path / "events.jsonl"
    candidates = saturated_events(path, hours=4.8)
    intervals = int(4.8 * 3600 // INTERVAL_S)
    lines = sum(1 for _ in open(path))
    assert lines >= intervals * (NOTABLE_PER_INTERVAL + SAMPLED_PER_INTERVAL)  # caps full
    assert path.stat().st_size < BOUND_BYTES / 10
    assert read(path)["proposals"] == candidates
