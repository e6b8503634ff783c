"""The llm proposer inside a chain, against a real loopback HTTP server that speaks the
chat-completions protocol (tests/llm_server.py), through the real openai client."""

import json
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from stochopt.backend.cost import cost  # noqa: E402
from stochopt.llm.options import llm_options  # noqa: E402
from stochopt.lower import lower  # noqa: E402
from stochopt.machine import load_machine  # noqa: E402
from stochopt.search.chain import ChainConfig  # noqa: E402
from stochopt.search.chain_run import ChainRun  # noqa: E402
from stochopt.search.llm_proposer import LLMProposer  # noqa: E402
from stochopt.spec import load_spec  # noqa: E402
from tests.llm_server import NO_CODE, LLMServer, error, held, raw, reply, slow  # noqa: E402

FAST = (ROOT / "docs" / "examples" / "softmax_fast.leir").read_text().replace(
    "def kernel(", "def softmax(")
WRONG = FAST.replace("store(e * r)", "store(e)")   # forgets to normalise
FAST_CYCLES = 2264


def block(text: str) -> str:
    return f"The rows are spread over more PEs.\n```leir\n{text}```\n"


@pytest.fixture(scope="module")
def softmax():
    machine = load_machine("mncore2")
    spec = load_spec(ROOT / "specs" / "softmax.py")
    return spec, machine, lower(spec, machine)


@pytest.fixture
def server():
    with LLMServer() as s:
        yield s


def make_chain(softmax, server, run_dir, arms=("llm",), **settings):
    spec, machine, baseline = softmax
    # the kernel form, unconstrained (the other forms and constrained decoding have
    # tests of their own: test_llm_forms.py, test_llm_structured.py)
    options = llm_options({"model": "gpt-4o-mini", "base_url": server.url, "concurrency": 1,
                           "backoff_s": 0.01, "timeout_s": 5.0, "structured": "off",
                           "forms": ["kernel"], **settings})
    llm = LLMProposer(options, spec, machine, baseline, run_dir, 0,
                      deadline=time.time() + 60)  # a test can never wait longer
    chain = ChainRun(0, spec, baseline, cost(baseline, machine).cycles, baseline, machine,
                     list(arms), 0, ChainConfig(full_examples=4), llm)
    return chain, llm


def steps(chain, count: int) -> list[dict]:
    return [chain.step()[0] for _ in range(count)]


def transcripts(run_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((run_dir / "llm").glob("chain*.json"))]


# -- kernels from replies ----------------------------------------------------------------------
@pytest.mark.slow  # runs a chain against a fake endpoint for seconds
def test_a_faster_correct_kernel_from_the_llm_becomes_the_best(softmax, server, tmp_path):
    server.push(reply(block(FAST), prompt_tokens=1000, completion_tokens=200))
    chain, llm = make_chain(softmax, server, tmp_path)
    event, best, facts = chain.step()
    assert event["proposer"] == "llm" and event["outcome"] == "best"
    assert event["cycles"] == FAST_CYCLES and best is not None and facts["equivalent"]
    assert "8_L1B,4_PE,32" in chain.best_text
    assert event["tokens"] == 1200
    assert event["cost_usd"] == pytest.approx((1000 * 0.15 + 200 * 0.60) / 1e6)
    llm.close()
    [t] = [t for t in transcripts(tmp_path) if t["id"] == event["llm_request"]]
    assert t["status"] == "ok" and t["candidates"][0]["outcome"] == "best"
    assert t["usage"]["prompt_tokens"] == 1000 and t["replies"][0] == block(FAST)


def test_the_next_prompt_starts_from_the_new_best(softmax, server, tmp_path):
    server.push(reply(block(FAST)), reply(NO_CODE))
    chain, llm = make_chain(softmax, server, tmp_path)
    steps(chain, 2)
    llm.close()
    assert "8_L1B,4_PE,32" not in server.user_prompt(0)
    assert f"The best kernel so far: {FAST_CYCLES} cycles" in server.user_prompt(1)


def test_a_wrong_kernel_is_refused_and_its_counterexample_feeds_the_next_prompt(
        softmax, server, tmp_path):
    server.push(reply(block(WRONG)), reply(NO_CODE))
    chain, llm = make_chain(softmax, server, tmp_path)
    first, second = steps(chain, 2)
    llm.close()
    assert first["outcome"] == "wrong" and chain.best_cycles == chain.objective.baseline_cycles
    prompt = server.user_prompt(1)
    assert "# Your recent candidates that did not beat it" in prompt
    assert "1. wrong (" in prompt and "expected" in prompt and "got" in prompt
    assert "return store(e)" in prompt                   # the kernel it was about
    assert "None yet." in server.user_prompt(0)


@pytest.mark.parametrize("content, outcome, message", [
    ("Sorry, I cannot help with that.", "parse_error", "holds no code block"),
    ("\x00\x01 garbage ]]]} {{{", "parse_error", "holds no code block"),
    (block("def softmax(x: \"f32[128,1024] @ dram\") -> \"f32[128,1024] @ dram\":\n"
           "    y = load(x, \n"), "parse_error", "line"),
    (block(FAST.replace("xs = load", "xs = lod")), "parse_error", "lod"),
    (block(FAST.replace("def softmax(x:", "def softmax(y:").replace("load(x,", "load(y,")),
     "invalid", "spec softmax has x"),
    (block(FAST.replace("8_L1B,4_PE,32", "8_L1B,8_PE,16")), "invalid", "PE"),
])
def test_unreadable_replies_are_recorded_and_fed_back(softmax, server, tmp_path, content,
                                                      outcome, message):
    server.push(reply(content), reply(NO_CODE))
    chain, llm = make_chain(softmax, server, tmp_path)
    first, _ = steps(chain, 2)
    llm.close()
    assert first["proposer"] == "llm" and first["outcome"] == outcome
    assert message in first["error"]
    assert f"1. {outcome}: " in server.user_prompt(1)


def test_hostile_code_is_only_ever_parsed(softmax, server, tmp_path):
    marker = tmp_path / "pwned"
    hostile = (f"```python\nimport os\nos.system('touch {marker}')\n```\n"
               f"```leir\ndef softmax(x: \"f32[128,1024] @ dram\") -> \"f32[128,1024] @ dram\":"
               f"\n    y = __import__('os').system('touch {marker}')\n    return store(y)\n```\n"
               f"```python\nopen('{marker}', 'w').write('x')\nexec('import os')\n```\n")
    server.push(reply(hostile))
    chain, llm = make_chain(softmax, server, tmp_path)
    events = steps(chain, 3)
    llm.close()
    assert [e["outcome"] for e in events] == ["parse_error"] * 3
    assert not marker.exists()


def test_search_replace_edits_are_applied_to_the_best_kernel(softmax, server, tmp_path):
    spec, machine, baseline = softmax
    layout = '"(128,1024)/((8_L2B,8_L1B,2_MAB),(1024))"'
    assert layout in chain_text(baseline)
    edit = ("```\n<<<<<<< SEARCH\n" + f"    v1 = load(x, {layout})\n" + "=======\n"
            '    v1 = load(x, "(128,1024)/((8_L2B,16_MAB),(8_L1B,4_PE,32))")\n'
            ">>>>>>> REPLACE\n```")
    server.push(reply(edit))
    chain, llm = make_chain(softmax, server, tmp_path)
    event = chain.step()[0]
    llm.close()
    assert event["move"] == "edit" and event["outcome"] == "best"
    assert event["cycles"] < chain.objective.baseline_cycles


def chain_text(kernel) -> str:
    from stochopt.leir.render import render
    return render(kernel)


def test_several_choices_make_several_candidates_and_the_request_is_paid_once(
        softmax, server, tmp_path):
    server.push(reply(block(WRONG), block(FAST), prompt_tokens=3000, completion_tokens=1000))
    chain, llm = make_chain(softmax, server, tmp_path, n=2)
    first, second = steps(chain, 2)
    llm.close()
    assert server.requests[0]["body"]["n"] == 2
    assert (first["outcome"], second["outcome"]) == ("wrong", "best")
    assert (first["tokens"], second["tokens"]) == (4000, 0)
    assert first["cost_usd"] + second["cost_usd"] == pytest.approx(
        (3000 * 0.15 + 1000 * 0.60) / 1e6)
    assert first["llm_request"] == second["llm_request"]


# -- faults ------------------------------------------------------------------------------------
def test_429_is_retried_after_the_time_the_server_asks_for(softmax, server, tmp_path):
    server.push(error(429, retry_after_ms=300), reply(block(FAST)))
    chain, llm = make_chain(softmax, server, tmp_path)
    event = chain.step()[0]
    llm.close()
    assert event["outcome"] == "best" and len(server.requests) == 2
    [attempt] = transcripts(tmp_path)[0]["attempts"]
    assert attempt["status"] == 429 and attempt["retry_after_s"] == 0.3
    assert attempt["wait_s"] >= 0.3
    assert server.requests[1]["time"] - server.requests[0]["time"] >= 0.3


def test_server_errors_broken_json_and_timeouts_are_retried(softmax, server, tmp_path):
    server.push(error(500), error(503), raw("{'choices': [oops"), raw("<html>bad gateway</html>",
                content_type="text/html"), slow(2), reply(block(FAST)))
    chain, llm = make_chain(softmax, server, tmp_path, timeout_s=0.5, retries=5)
    event = chain.step()[0]
    llm.close()
    assert event["outcome"] == "best"
    attempts = transcripts(tmp_path)[0]["attempts"]
    assert [a["status"] for a in attempts] == [500, 503, None, None, None]
    assert "not a chat completion" in attempts[2]["error"]
    assert "timeout" in attempts[4]["error"]
    assert all(a["retried"] for a in attempts)


@pytest.mark.slow  # runs a chain against a fake endpoint for seconds
def test_an_endpoint_that_keeps_failing_is_reported_and_never_stops_the_chain(
        softmax, tmp_path):
    with LLMServer(default=error(500, message="the GPU is on fire")) as server:
        chain, llm = make_chain(softmax, server, tmp_path, ("mutate", "rewrite", "llm"),
                                retries=1)
        # at least 150 steps, and on until the failed request is heard: a step from the
        # cache can take less time than the request's round trip on a loaded machine
        events = steps(chain, 150)
        end = time.time() + 30
        while not any(e["proposer"] == "llm" for e in events) and time.time() < end:
            events += steps(chain, 10)
        llm.close()
    failures = [e for e in events if e["proposer"] == "llm"]
    assert failures and all(e["outcome"] == "invalid" and e["move"] == "request_failed"
                            for e in failures)
    assert "the GPU is on fire" in failures[0]["error"]
    assert sum(e["proposer"] != "llm" for e in events) > 100
    assert chain.proposer.bandit.arms["llm"].improvement == 0
    # after each failed request the proposer pauses, longer each time
    assert len(server.requests) <= 2 * (len(failures) + 1)
    t = transcripts(tmp_path)[0]
    assert t["status"] == "failed" and len(t["attempts"]) == 2


def test_a_slow_failing_endpoint_costs_its_arm_its_latency(softmax, server, tmp_path):
    server.push(slow(2))
    chain, llm = make_chain(softmax, server, tmp_path, timeout_s=0.3, retries=0)
    event = chain.step()[0]
    llm.close()
    assert event["move"] == "request_failed" and "timeout" in event["error"]
    # the bandit charged the arm ~200 builtin proposals per second of waiting
    assert chain.proposer.bandit.arms["llm"].units >= 50


def test_huge_replies_are_refused_or_cut(softmax, server, tmp_path):
    server.push(raw(b'{"choices": [{"message": {"content": "' + b"x" * (2 << 20) + b'"}}]}'),
                reply(block(FAST) + "\n" + "padding " * 20_000))
    chain, llm = make_chain(softmax, server, tmp_path, retries=0)
    first, second = steps(chain, 2)
    llm.close()
    assert first["outcome"] == "invalid" and "larger than" in first["error"]
    assert second["outcome"] == "best"           # the code came before the cut
    t = transcripts(tmp_path)[1]
    assert t["truncated"] and len(t["replies"][0]) == 1 << 16


@pytest.mark.slow  # runs a chain against a fake endpoint for seconds
def test_take_never_waits_when_builtin_proposers_share_the_chain(softmax, server, tmp_path):
    gate = threading.Event()
    server.push(held(gate, reply(block(FAST))))
    # the 60 builtin steps may include full checks of new bests: the held request must
    # not time out and be retried meanwhile, which is not what this test is about
    chain, llm = make_chain(softmax, server, tmp_path, ("mutate", "rewrite", "llm"),
                            timeout_s=60.0)
    try:
        events = steps(chain, 60)
        assert len(server.requests) == 1                   # one request, still unanswered
        assert all(e["proposer"] != "llm" for e in events)
    finally:
        gate.set()
    for _ in range(2000):
        event = chain.step()[0]
        if event["proposer"] == "llm":
            break
        time.sleep(0.002)
    llm.close()
    assert event["proposer"] == "llm" and event["cycles"] is not None


# -- accounting, cache, transcripts -------------------------------------------------------------
def test_no_new_requests_once_max_cost_is_spent(softmax, server, tmp_path):
    server.push(reply(NO_CODE, prompt_tokens=1_000_000), reply(NO_CODE))
    chain, llm = make_chain(softmax, server, tmp_path, ("mutate", "llm"), max_cost=0.1)
    events = []
    for _ in range(3000):
        events.append(chain.step()[0])
        if any(e["proposer"] == "llm" for e in events):
            break
        time.sleep(0.001)
    steps(chain, 30)
    llm.close()
    assert len(server.requests) == 1
    assert sum(e["cost_usd"] for e in events) == pytest.approx(0.15 + 200 * 0.6 / 1e6)


def test_the_cache_replays_identical_prompts_without_a_request(softmax, server, tmp_path):
    server.push(reply(block(WRONG)), reply(block(FAST)))
    cache = tmp_path / "cache"
    chain, llm = make_chain(softmax, server, tmp_path / "one", cache=str(cache))
    first = chain.step()[0]
    llm.close()
    chain, llm = make_chain(softmax, server, tmp_path / "two", cache=str(cache))
    again = chain.step()[0]
    llm.close()
    assert len(server.requests) == 1
    assert first["outcome"] == again["outcome"] == "wrong"
    assert again["tokens"] == 0 and again["cost_usd"] == 0
    assert transcripts(tmp_path / "two")[0]["cached"] is True


def test_transcripts_hold_prompt_reply_usage_and_outcomes_but_no_key(softmax, server,
                                                                       tmp_path):
    server.push(reply(block(WRONG)), reply(block(FAST)))
    chain, llm = make_chain(softmax, server, tmp_path, api_key="sk-very-secret")
    steps(chain, 2)
    llm.close()
    assert server.requests and all("sk-very-secret" not in p.read_text()
                                   for p in (tmp_path / "llm").iterdir())
    one, two = transcripts(tmp_path)
    [system_file] = (tmp_path / "llm").glob("system-*.txt")
    assert one["messages"][0]["content_file"] == system_file.name
    assert "LEIR language reference" in system_file.read_text()
    assert one["messages"][1]["role"] == "user" and "# Spec softmax" in one["messages"][1][
        "content"]
    assert one["replies"] == [block(WRONG)] and one["latency_s"] >= 0
    assert one["usage"] == {"prompt_tokens": 1000, "completion_tokens": 200, "reported": True}
    assert one["candidates"][0]["outcome"] == "wrong" and "expected" in one["candidates"][0][
        "error"]
    assert two["candidates"][0]["outcome"] == "best"


def test_close_writes_requests_that_never_came_back(softmax, server, tmp_path):
    gate = threading.Event()
    server.push(held(gate))
    chain, llm = make_chain(softmax, server, tmp_path, ("mutate", "llm"))
    for _ in range(50):
        chain.step()
        if server.requests:
            break
    llm.close()
    [t] = transcripts(tmp_path)
    assert t["status"].startswith("abandoned")
    gate.set()  # a reply that lands after all rewrites its transcript, still unevaluated
    for _ in range(500):
        [t] = transcripts(tmp_path)
        if t["status"] == "ok":
            break
        time.sleep(0.01)
    assert t["status"] == "ok"
    assert t["candidates"][0]["outcome"].startswith("not evaluated")
