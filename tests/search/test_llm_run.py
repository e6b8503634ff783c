"""Whole runs with the llm proposer: optimize() and the CLI, with chains in worker
processes, against the loopback chat-completions server."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from stochopt.cli import main  # noqa: E402
from stochopt.rundir import read_events  # noqa: E402
from stochopt.search import optimize  # noqa: E402
from stochopt.search.chain import ChainConfig  # noqa: E402
from tests.llm_server import NO_CODE, LLMServer, error, reply  # noqa: E402

SPEC = str(ROOT / "specs" / "softmax.py")
FAST = (ROOT / "docs" / "examples" / "softmax_fast.leir").read_text().replace(
    "def kernel(", "def softmax(")
WRONG = FAST.replace("store(e * r)", "store(e)")


def block(text: str) -> str:
    return f"```leir\n{text}```"


@pytest.mark.slow  # a whole search run against a fake endpoint
def test_optimize_with_the_llm_alone_keeps_its_faster_kernel(tmp_path):
    run_dir = tmp_path / "run"
    with LLMServer([reply(block(FAST))]) as server:
        result = optimize(SPEC, proposer="llm", chains=1, budget="60s", max_proposals=2,
                          run_dir=str(run_dir), config=ChainConfig(full_examples=20),
                          llm={"model": "gpt-4o", "base_url": server.url, "concurrency": 1,
                               "api_key": "sk-do-not-store", "forms": ["kernel"]})
    assert result.best_cycles == 2264 and result.verified
    assert "8_L1B,4_PE,32" in (run_dir / "best.leir").read_text()
    events = read_events(run_dir / "events.jsonl")
    assert {e["proposer"] for e in events} == {"llm"}
    assert result.tokens == sum(e["tokens"] for e in events) == 2400
    assert result.cost_usd == pytest.approx(2 * (1000 * 2.5 + 200 * 10.0) / 1e6)
    run = json.loads((run_dir / "run.json").read_text())
    assert run["arms"] == ["llm"] and run["llm"]["model"] == "gpt-4o"
    assert "api_key" not in run["llm"]
    assert not any("sk-do-not-store" in p.read_text()
                   for p in run_dir.rglob("*") if p.is_file() and p.suffix != ".npz")
    assert len(list((run_dir / "llm").glob("chain0-*.json"))) >= 2


@pytest.mark.slow  # a whole search run against a fake endpoint
def test_max_cost_ends_a_mixed_run_cleanly(tmp_path):
    run_dir = tmp_path / "run"
    with LLMServer(default=reply(NO_CODE, prompt_tokens=10_000)) as server:
        result = optimize(SPEC, proposer="mixed", chains=1, budget="60s", max_cost=0.01,
                          run_dir=str(run_dir), config=ChainConfig(full_examples=20),
                          llm={"model": "local", "base_url": server.url, "price_in": 2.0})
    assert result.stopped_by == "max_cost"
    assert result.cost_usd >= 0.01 and result.elapsed_s < 60
    events = read_events(run_dir / "events.jsonl")
    assert {"mutate", "rewrite", "compound", "lookahead", "llm"} >= \
        {e["proposer"] for e in events} >= {"llm"}


@pytest.mark.slow  # a whole search run against a fake endpoint
def test_cli_optimize_with_an_llm_end_to_end(tmp_path):
    run_dir = tmp_path / "run"
    # kernel and edit requests get a wrong kernel, plan requests a plan
    with LLMServer(default=reply("Faster, I think.\n" + block(WRONG)),
                   plans=reply('{"steps": [1]}')) as server:
        done = subprocess.run(
            [sys.executable, "-m", "stochopt", "optimize", SPEC, "--proposer", "llm",
             "--base-url", server.url, "--model", "test-model", "--budget", "60s",
             "--chains", "1", "--max-proposals", "6", "--llm-concurrency", "1",
             "--run-dir", str(run_dir), "--quiet", "--seed", "1"],
            capture_output=True, text=True, timeout=120, cwd=tmp_path,
            env={**os.environ, "OPENAI_API_KEY": "", "OPENAI_BASE_URL": ""})
        assert server.requests[0]["body"]["model"] == "test-model"
        prompts = [server.user_prompt(i) for i in range(len(server.requests))]
    assert done.returncode == 0, done.stderr
    assert "LLM: test-model at http://127.0.0.1" in done.stderr
    assert "no LLM configured" not in done.stderr
    assert re.search(r"LLM yield \(plan\): \d+ asked", done.stdout)
    events = read_events(run_dir / "events.jsonl")
    assert {e["proposer"] for e in events} == {"llm"} and len(events) == 6
    forms = {e["llm_form"] for e in events}
    assert "plan" in forms and forms & {"kernel", "edit"}
    for e in events:
        assert e["outcome"] == "wrong" if e["llm_form"] != "plan" else \
            e["outcome"] in ("accepted", "best")
    first_wrong = next(i for i, e in enumerate(events) if e["outcome"] == "wrong")
    transcript = json.loads((run_dir / "llm" / f"{events[first_wrong]['llm_request']}.json")
                            .read_text())
    assert transcript["replies"][0].startswith("Faster")
    later = [p for p in prompts if "# Your recent candidates" in p][1:]
    assert not later or "wrong" in later[-1]   # the failure is fed back


def test_mixed_says_it_runs_without_an_llm_only_when_no_model_is_given(tmp_path):
    runner = CliRunner()
    missing = str(tmp_path / "missing.py")  # fails right after the message: no search runs
    without = runner.invoke(main, ["optimize", missing])
    with_model = runner.invoke(main, ["optimize", missing, "--model", "m",
                                      "--base-url", "http://127.0.0.1:9/v1"])
    assert without.exit_code == with_model.exit_code == 2
    assert "no LLM configured" in without.output
    assert "no LLM configured" not in with_model.output
    assert "LLM: m at http://127.0.0.1:9/v1" in with_model.output


def test_proposer_llm_without_a_model_is_an_error_that_says_what_to_pass():
    result = CliRunner().invoke(main, ["optimize", SPEC, "--proposer", "llm"])
    assert result.exit_code == 2
    assert "--proposer llm needs a model" in result.output and "--model" in result.output


# -- failing loudly ------------------------------------------------------------------------
def dead_url() -> str:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def run_cli(args: list[str], cwd) -> subprocess.CompletedProcess:
    """The CLI of this checkout, its lines unwrapped."""
    return subprocess.run([sys.executable, "-m", "stochopt", *args], capture_output=True,
                          text=True, timeout=180, cwd=cwd,
                          env={**os.environ, "OPENAI_API_KEY": "", "OPENAI_BASE_URL": "",
                               "PYTHONPATH": str(ROOT), "COLUMNS": "400"})


@pytest.mark.slow  # a whole search run against a fake endpoint
def test_proposer_llm_with_a_dead_endpoint_stops_early_and_exits_1(tmp_path):
    run_dir = tmp_path / "run"
    done = run_cli([
        "optimize", SPEC, "--proposer", "llm", "--base-url", dead_url(), "--model", "m",
        "--budget", "120s", "--chains", "1", "--llm-retries", "0", "--run-dir", str(run_dir),
        "--quiet"], tmp_path)
    assert done.returncode == 1, done.stderr
    assert "stopped by llm_failed" in done.stdout
    [line] = [x for x in done.stdout.splitlines() if "LLM proposer stopped" in x]
    assert "nothing answers at http://127.0.0.1" in line and "--base-url" in line
    events = read_events(run_dir / "events.jsonl")
    assert [e["move"] for e in events] == ["request_failed"] * 3
    assert events[-1]["llm_stopped"] in line
    for name in ("run.json", "best.json"):
        status = json.loads((run_dir / name).read_text())["llm_status"]
        assert "nothing answers" in status["stopped"] and status["requests_failed"] == 3
    # the report says it in all three forms
    text = run_cli(["report", str(run_dir)], tmp_path).stdout
    assert "LLM status" in text and "nothing answers at" in text.replace("\n", " ")
    facts = json.loads(run_cli(["report", str(run_dir), "--json"], tmp_path).stdout)
    assert "nothing answers at" in facts["llm"]["status"]
    assert facts["llm"]["failed"] >= 3 and facts["llm"]["answered"] == 0
    run_cli(["report", str(run_dir), "--html", str(tmp_path / "r.html")], tmp_path)
    page = (tmp_path / "r.html").read_text()
    assert "LLM status" in page and "nothing answers at" in page


@pytest.mark.slow  # a whole search run against a fake endpoint
def test_mixed_goes_on_without_a_failed_llm_and_warns(tmp_path):
    run_dir = tmp_path / "run"
    with LLMServer(default=error(401, message="Incorrect API key provided")) as server:
        result = optimize(SPEC, proposer="mixed", chains=1, budget="60s", max_proposals=3000,
                          run_dir=str(run_dir), config=ChainConfig(full_examples=20),
                          llm={"model": "m", "base_url": server.url, "backoff_s": 0.01})
    assert result.stopped_by != "llm_failed" and result.proposals > 100
    [note] = [n for n in result.notes if "LLM proposer stopped" in n]
    assert "API key" in note and "the built-in proposers went on" in note
    # stopped after the third identical failure; with 2 requests in flight per chain one
    # more may already have been sent when the third failure came back
    assert 3 <= len(server.requests) <= 4


@pytest.mark.slow  # a whole search run against a fake endpoint
def test_the_report_counts_what_each_prompt_variant_produced(tmp_path):
    run_dir = tmp_path / "run"
    with LLMServer([reply(block(WRONG)), reply(block(FAST))]) as server:
        optimize(SPEC, proposer="llm", chains=1, budget="60s", max_proposals=3,
                 run_dir=str(run_dir), config=ChainConfig(full_examples=20),
                 llm={"model": "m", "base_url": server.url, "concurrency": 1,
                      "forms": ["kernel"]},
                 check_workers=0)
    from stochopt.report.facts import run_facts
    llm = run_facts(run_dir)["llm"]
    assert llm["requests"] >= 2 and llm["answered"] >= 2 and llm["prompt_tokens_mean"] == 1000
    rows = {r["name"]: r for r in llm["variants"]}
    assert sum(r["proved"] for r in rows.values()) == 1
    assert llm["variants"][0]["proved"] == 1          # the productive variant first
    [kernels] = llm["yield"]
    assert kernels["name"] == "kernel" and kernels["well_typed"] == 2
    assert kernels["screened_equal"] == kernels["accepted"] == kernels["proved"] == 1
    assert kernels["tokens_per_accepted"] == kernels["tokens"] == 1200 * llm["answered"]
    [step] = llm["improvements"]
    assert step["form"] == "kernel" and "load(x" in step["made_by"]
    events = read_events(run_dir / "events.jsonl")
    assert {e["llm_variant"] for e in events} <= set(rows)
    assert [e["prompt_tokens"] for e in events if "prompt_tokens" in e][:2] == [1000, 1000]
    run = json.loads((run_dir / "run.json").read_text())
    assert run["llm_yield"]["forms"] == llm["yield"]


def test_the_live_view_shows_why_the_llm_stopped_until_the_end():
    import time

    from rich.console import Console

    from stochopt.search.display import progress_view
    from stochopt.search.stats import RunStats
    stats = RunStats({"spec": "softmax", "budget_s": 60.0, "baseline_cycles": 7652,
                    "roofline_cycles": 1536, "arms": ["mutate", "llm"]}, {}, time.time())
    why = "the LLM proposer stopped after 3 identical failures (HTTP 401): check the API key"
    stats.add({"proposer": "llm", "move": "request_failed", "outcome": "invalid",
               "error": "LLM request failed: HTTP 401", "llm_stopped": why})
    stats.add({"proposer": "mutate", "move": "swap", "outcome": "rejected", "error": None})
    console = Console(record=True, width=200)
    console.print(progress_view(stats.snapshot()))
    assert why in console.export_text()
    assert stats.llm_note() == why + "; the built-in proposers went on without it"


def test_the_live_rate_counts_the_events_of_the_last_five_seconds(monkeypatch):
    from stochopt.search import stats as stats_module
    now = [1000.0]
    monkeypatch.setattr(stats_module.time, "time", lambda: now[0])
    stats = stats_module.RunStats({"spec": "softmax", "budget_s": 60.0,
                                   "baseline_cycles": 7652, "roofline_cycles": 1536}, {}, 0.0)
    event = {"proposer": "mutate", "move": "swap", "outcome": "rejected", "error": None}
    for _ in range(10):  # ten at t = 1000
        stats.add(event)
    now[0] = 1003.0
    for _ in range(5):   # five more at t = 1003
        stats.add(event)
    assert stats.snapshot()["rate"] == 15 / 5.0
    now[0] = 1005.5      # the first ten are older than five seconds
    assert stats.snapshot()["rate"] == 5 / 5.0
    assert stats.proposals == 15
