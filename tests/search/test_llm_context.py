"""The LLM proposer against limits real servers have: a context window that the prompt
must fit, errors that retrying cannot fix, and several requests in flight at once that
must not all ask the same thing. Through the loopback server (tests/llm_server.py)."""

import json
import random
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from stochopt.backend.cost import cost  # noqa: E402
from stochopt.llm.context import (  # noqa: E402
    TokenCounter,
    context_from_error,
    context_from_models,
    is_context_error,
    prompt_tokens_from_error,
    reply_room,
)
from stochopt.llm.options import llm_options  # noqa: E402
from stochopt.llm.prompt import LEVELS, PromptBuilder, load_templates  # noqa: E402
from stochopt.llm.variants import FOCI, draw_variants, pick_failures  # noqa: E402
from stochopt.lower import lower  # noqa: E402
from stochopt.machine import load_machine  # noqa: E402
from stochopt.search.chain import ChainConfig  # noqa: E402
from stochopt.search.chain_run import ChainRun  # noqa: E402
from stochopt.search.llm_proposer import GIVE_UP_AFTER, LLMProposer  # noqa: E402
from stochopt.spec import load_spec  # noqa: E402
from tests.llm_server import LLMServer, error, held, reply  # noqa: E402

FAST = (ROOT / "docs" / "examples" / "softmax_fast.leir").read_text().replace(
    "def kernel(", "def softmax(")


@pytest.fixture(scope="module")
def softmax():
    machine = load_machine("mncore2")
    spec = load_spec(ROOT / "specs" / "softmax.py")
    return spec, machine, lower(spec, machine)


def make_chain(softmax, url, run_dir, arms=("llm",), **settings):
    spec, machine, baseline = softmax
    # the kernel form, unconstrained (the other forms and constrained decoding have
    # tests of their own: test_llm_forms.py, test_llm_structured.py)
    options = llm_options({"model": "local-model", "base_url": url, "concurrency": 1,
                           "backoff_s": 0.01, "timeout_s": 5.0, "structured": "off",
                           "forms": ["kernel"], **settings})
    llm = LLMProposer(options, spec, machine, baseline, run_dir, 0,
                      deadline=time.time() + 60)
    chain = ChainRun(0, spec, baseline, cost(baseline, machine).cycles, baseline, machine,
                     list(arms), 0, ChainConfig(full_examples=20), llm)
    return chain, llm


def transcripts(run_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((run_dir / "llm").glob("chain*.json"))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the context ---------------------------------------------------------------------------
LLAMA_CPP_400 = ("This model's maximum context length is 8192 tokens. However, you requested "
                 "13708 tokens (13708 in the messages, 0 in the completion). Please reduce the "
                 "length of the messages or completion.")


def test_context_errors_are_recognised_and_read():
    assert is_context_error(400, LLAMA_CPP_400)
    assert context_from_error(LLAMA_CPP_400) == 8192
    assert prompt_tokens_from_error(LLAMA_CPP_400) == 13708
    vllm = ("'max_tokens' or 'max_completion_tokens' is too large: 2048. This model's maximum "
            "context length is 4096 tokens and your request has 3000 input tokens")
    assert context_from_error(vllm) == 4096 and prompt_tokens_from_error(vllm) == 3000
    llama_server = "the request exceeds the available context size, try increasing it"
    assert is_context_error(400, llama_server) and context_from_error(llama_server) is None
    assert not is_context_error(400, "temperature must be at most 2")
    assert context_from_models([{"id": "m", "max_model_len": 32768}], "m") == 32768
    assert context_from_models([{"id": "x", "meta": {"n_ctx_train": 4096}}], "m") == 4096
    assert context_from_models([{"id": "a"}, {"id": "b"}], "m") is None


def test_the_reply_keeps_a_quarter_of_the_context_within_bounds():
    assert reply_room(8192, None) == 2048
    assert reply_room(2048, None) == 1024 and reply_room(1024, None) == 512
    assert reply_room(1_000_000, None) == 8192 and reply_room(8192, 300) == 300


def test_the_token_estimate_starts_safe_and_follows_the_server():
    counter = TokenCounter()
    messages = [{"role": "user", "content": "x" * 10_000}]
    first = counter.estimate(messages)
    assert first >= 10_000 / 3.5          # more than any real tokenizer counts for text
    counter.observe(messages, 2016)        # the server saw 2,000 tokens of text
    assert 2000 < counter.estimate(messages) <= 2016 / 0.85
    counter.observe(messages, 5016)        # a denser text later: only ever safer
    assert counter.estimate(messages) >= 5016


def test_each_level_of_the_prompt_is_smaller_than_the_one_before(softmax):
    spec, machine, baseline = softmax
    builder = PromptBuilder(load_templates(), spec, machine, baseline)
    failures = [{"outcome": "wrong", "cycles": 2000, "error": "expected 1, got 2 " * 60,
                 "code": FAST * 4}] * 4
    sizes = []
    for index in range(len(LEVELS)):
        prompt = builder.at_level(index, baseline, failures, 1, lambda m: sum(
            len(x["content"]) for x in m), "open", (9000, FAST))
        assert prompt.level == index and not prompt.fits
        sizes.append(prompt.estimate_tokens)
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == len(sizes)
    full, cheat = (builder.at_level(i, baseline, failures, 1, len).messages[0]["content"]
                   for i in (0, len(LEVELS) - 1))
    assert "TensorLayout" in full and "reduce_max(x, axis, keepdims=False)" in cheat
    assert sizes[-1] < 0.3 * sizes[0]


def test_a_small_context_gets_a_prompt_that_fits_from_the_first_request(softmax, tmp_path):
    with LLMServer(context_tokens=4096, chars_per_token=3.0) as server:
        chain, llm = make_chain(softmax, server.url, tmp_path, context_tokens=4096)
        event = chain.step()[0]
        llm.close()
    assert event["move"] != "request_failed" and len(server.requests) == 1
    body = server.requests[0]["body"]
    assert server.prompt_tokens(body) + body["max_tokens"] <= 4096
    assert body["max_tokens"] == 1024 and event["prompt_tokens"] == 1000
    [t] = transcripts(tmp_path)
    assert t["prompt"]["context_tokens"] == 4096
    assert t["prompt"]["context_source"] == "--context-tokens"
    assert t["prompt"]["estimate_tokens"] <= 4096 - 1024
    assert t["prompt"]["level"] != "full"


def test_the_context_the_server_lists_is_used(softmax, tmp_path):
    with LLMServer(context_tokens=6000, listing={"max_model_len": 6000}) as server:
        chain, llm = make_chain(softmax, server.url, tmp_path)
        event = chain.step()[0]
        llm.close()
    assert event["move"] != "request_failed" and len(server.requests) == 1
    [t] = transcripts(tmp_path)
    assert (t["prompt"]["context_tokens"], t["prompt"]["context_source"]) == (
        6000, "the server's /v1/models")


def test_a_context_400_shrinks_the_prompt_and_retries_once(softmax, tmp_path):
    # the user claims 16k; the server has 6k and counts 2 characters per token, more
    # than the estimate assumed: the first prompt is refused, the retry is smaller
    with LLMServer(context_tokens=6000, chars_per_token=2.0) as server:
        chain, llm = make_chain(softmax, server.url, tmp_path, context_tokens=16_000)
        first, second = chain.step()[0], chain.step()[0]
        llm.close()
    assert first["move"] != "request_failed" and second["move"] != "request_failed"
    sizes = [server.prompt_tokens(r["body"]) for r in server.requests]
    assert len(sizes) == 3 and sizes[1] < sizes[0] and sizes[2] <= 6000
    one, two = transcripts(tmp_path)
    assert one["shrunk"]["error"].startswith("HTTP 400") and one["status"] == "ok"
    assert one["prompt"]["level"] != one["shrunk"]["from_level"]
    assert one["prompt"]["context_tokens"] == 6000
    assert one["prompt"]["context_source"] == "the server's error"
    assert "shrunk" not in two          # learned: the next request fits at once


@pytest.mark.slow  # waits out retries
def test_a_prompt_that_never_fits_stops_the_proposer_with_what_to_change(softmax, tmp_path):
    with LLMServer(context_tokens=300) as server:
        chain, llm = make_chain(softmax, server.url, tmp_path, ("mutate", "llm"),
                                context_tokens=8000, max_tokens=100)
        events = [chain.step()[0] for _ in range(400)]
        for _ in range(200):
            if llm.stopped:
                break
            events.append(chain.step()[0])
            time.sleep(0.01)
        requests = len(server.requests)
        events += [chain.step()[0] for _ in range(100)]
        llm.close()
    assert llm.stopped and "3 identical failures" in llm.stopped
    assert "--context-tokens" in llm.stopped and "context of 300 tokens" in llm.stopped
    assert "context is 300 tokens (from the server's error)" in llm.stopped
    assert requests <= 6 and len(server.requests) == requests   # no request after the stop
    [stop] = [e for e in events if e.get("llm_stopped")]
    assert stop["llm_stopped"] == llm.stopped
    assert sum(e["proposer"] != "llm" for e in events) > 300    # mixed goes on
    assert [t for t in transcripts(tmp_path) if t.get("stopped")]


@pytest.mark.parametrize("case", ["dead", "model", "key"])
def test_errors_retrying_cannot_fix_stop_the_proposer_and_say_what_to_change(
        softmax, tmp_path, case):
    hint = {"dead": "nothing answers at", "model": "check --model: ", "key": "API key"}[case]
    server = LLMServer(model="served-model", default={
        "model": error(404, message="The model `local-model` does not exist."),
        "key": error(401, message="Invalid API key")}.get(case))
    server.start()
    url = server.url
    if case == "dead":
        server.stop()
        url = f"http://127.0.0.1:{free_port()}/v1"
    try:
        chain, llm = make_chain(softmax, url, tmp_path, retries=1)
        events = [chain.step()[0] for _ in range(GIVE_UP_AFTER)]
        llm.close()
    finally:
        if case != "dead":
            server.stop()
    assert [e["move"] for e in events] == ["request_failed"] * GIVE_UP_AFTER
    assert events[-1]["llm_stopped"] == llm.stopped and hint in llm.stopped
    if case == "model":
        assert "serves served-model" in llm.stopped


@pytest.mark.slow  # waits out retries
def test_transient_failures_do_not_stop_the_proposer(softmax, tmp_path):
    with LLMServer(default=error(503, message="loading the model")) as server:
        chain, llm = make_chain(softmax, server.url, tmp_path, retries=0)
        events = [chain.step()[0] for _ in range(4)]
        server.default = reply(f"```leir\n{FAST}```")
        events.append(chain.step()[0])
        llm.close()
    assert llm.stopped is None and not any(e.get("llm_stopped") for e in events)
    assert events[-1]["outcome"] == "best"


# -- diverse requests -------------------------------------------------------------------------
def test_requests_in_flight_together_differ_and_transcripts_name_their_variant(
        softmax, tmp_path):
    gate = threading.Event()
    with LLMServer(default=held(gate)) as server:
        # a long timeout: a chain step may run a full check for seconds meanwhile, and
        # a retried request would count twice
        chain, llm = make_chain(softmax, server.url, tmp_path, ("mutate", "llm"),
                                concurrency=4, timeout_s=25.0)
        for _ in range(2000):
            chain.step()
            if len(server.requests) >= 4:
                break
            time.sleep(0.005)
        bodies = [r["body"] for r in server.requests]
        gate.set()
        llm.close()
    assert len(bodies) == 4
    prompts = [b["messages"][-1]["content"] for b in bodies]
    assert len(set(prompts)) == 4                        # no two ask the same thing
    temperatures = [b["temperature"] for b in bodies]
    assert len(set(temperatures)) == 4 and all(0.2 <= t <= 1.0 for t in temperatures)
    foci = {t["variant"]["focus"] for t in transcripts(tmp_path)}
    assert len(foci) == 4 and foci <= set(FOCI)
    assert all(FOCI[f].split(":")[0] in "\n".join(prompts) for f in foci)


def test_a_fixed_temperature_is_sent_as_given(softmax, tmp_path):
    with LLMServer() as server:
        chain, llm = make_chain(softmax, server.url, tmp_path, temperature=0.4)
        chain.step()
        llm.close()
    assert server.requests[0]["body"]["temperature"] == 0.4


def test_variants_draw_distinct_foci_and_failures_of_each_kind():
    rng = random.Random(1)
    variants = draw_variants(rng, 5, {"tiling"}, (0.2, 1.0))
    assert len({v.focus for v in variants}) == 5 and "tiling" not in {v.focus for v in variants}
    assert len({v.temperature for v in variants}) == 5
    failures = [{"outcome": o, "n": i} for i, o in enumerate(
        ["wrong", "wrong", "parse_error", "wrong", "invalid", "wrong"])]
    assert [f["n"] for f in pick_failures(failures, "recent", 2, rng)] == [4, 5]
    assert [f["outcome"] for f in pick_failures(failures, "varied", 4, rng)] == [
        "parse_error", "invalid", "wrong"]
    assert len(pick_failures(failures, "sampled", 3, rng)) == 3
