"""Constrained decoding against loopback servers that enforce what they take (OpenAI's
shape: a JSON schema in response_format; vLLM's: that and a grammar in
structured_outputs) or refuse it; llama.cpp's is tested for real in
tests/integration/test_local_llm.py."""

import json
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from stochopt.backend.cost import cost  # noqa: E402
from stochopt.llm import gbnf  # noqa: E402
from stochopt.llm.client import Client, RequestFailed  # noqa: E402
from stochopt.llm.options import llm_options  # noqa: E402
from stochopt.llm.structured import PROBE_WORD, fields, obeyed  # noqa: E402
from stochopt.lower import lower  # noqa: E402
from stochopt.machine import load_machine  # noqa: E402
from stochopt.search.chain import ChainConfig  # noqa: E402
from stochopt.search.chain_run import ChainRun  # noqa: E402
from stochopt.search.llm_proposer import LLMProposer  # noqa: E402
from stochopt.spec import load_spec  # noqa: E402
from tests.llm_server import ConstrainingServer, LLMServer, error, reply  # noqa: E402

FAST_BODY = "".join(line + "\n" for line in (
    ROOT / "docs" / "examples" / "softmax_fast.leir").read_text().splitlines()
    if not line.startswith("#")).replace("def kernel(", "def softmax(")
OPENAI = {"takes": ["json_schema"], "refuses": ["grammar", "structured_outputs"]}
VLLM = {"takes": ["json_schema", "structured_outputs"]}


@pytest.fixture(scope="module")
def softmax():
    machine = load_machine("mncore2")
    spec = load_spec(ROOT / "specs" / "softmax.py")
    return spec, machine, lower(spec, machine)


def run_chain(softmax, server, run_dir, steps: int, **settings):
    spec, machine, baseline = softmax
    options = llm_options({"model": "local", "base_url": server.url, "concurrency": 1,
                           "backoff_s": 0.01, "timeout_s": 5.0, **settings})
    llm = LLMProposer(options, spec, machine, baseline, run_dir, 0, deadline=time.time() + 60)
    chain = ChainRun(0, spec, baseline, cost(baseline, machine).cycles, baseline, machine,
                     ["llm"], 0, ChainConfig(full_examples=4), llm)
    events = [chain.step()[0] for _ in range(steps)]
    llm.close()
    return events, llm


def sent_constraints(server) -> list[set[str]]:
    keys = ("response_format", "grammar", "structured_outputs")
    return [{k for k in keys if k in r["body"]} for r in server.requests]


def test_auto_against_openai_constrains_plans_by_schema_and_says_kernels_are_free_text(
        softmax, tmp_path):
    with ConstrainingServer(default=reply("I pick the first."), **OPENAI) as server:
        events, llm = run_chain(softmax, server, tmp_path, 2, forms=["plan"])
    assert llm.structured.describe() == {"mode": "auto", "json": "json_schema",
                                         "grammar": None}
    assert sent_constraints(server) == [{"response_format"}] * 2
    schema = server.requests[0]["body"]["response_format"]["json_schema"]["schema"]
    menu = schema["properties"]["steps"]["items"]["enum"]
    assert menu == list(range(1, len(menu) + 1)) and len(menu) >= 5
    # the server decoded under the schema: the prose became a plan, read and applied
    assert all(e["move"] == "plan" and e["outcome"] != "parse_error" for e in events)
    note = events[0]["llm_note"]
    assert "does not constrain replies by grammar" in note and "free text" in note
    assert "llm_note" not in events[1]   # said once


def test_auto_against_vllm_constrains_kernels_by_grammar(softmax, tmp_path):
    with ConstrainingServer([reply(FAST_BODY), reply("A faster kernel, surely.")],
                            **VLLM) as server:
        events, llm = run_chain(softmax, server, tmp_path, 2, forms=["kernel"])
    assert llm.structured.describe()["grammar"] == "structured_outputs"
    assert sent_constraints(server) == [{"structured_outputs"}] * 2
    grammar = gbnf.from_gbnf(server.requests[0]["body"]["structured_outputs"]["grammar"])
    assert gbnf.accepts(grammar, FAST_BODY)
    assert events[0]["outcome"] == "best" and events[0]["cycles"] == 2264
    # the prose was replaced by a text of the grammar: a kernel, never "no code block"
    transcript = json.loads((tmp_path / "llm" / f"{events[1]['llm_request']}.json")
                            .read_text())
    assert transcript["replies"][0].startswith('def softmax(x: "f32[128,1024] @ dram")')
    assert events[1]["move"] == "kernel"


def test_json_mode_falls_back_to_free_text_with_one_line_when_the_server_refuses(
        softmax, tmp_path):
    refusing = {"refuses": ["json_schema", "json_object", "grammar", "structured_outputs"]}
    with ConstrainingServer(default=reply('{"steps": [1]}'), **refusing) as server:
        events, llm = run_chain(softmax, server, tmp_path, 2, forms=["plan"],
                                structured="json")
    assert not server.probes   # an explicit mode is taken at its word, not probed
    # both response_format shapes refused once each, then free text from then on
    assert sent_constraints(server) == [{"response_format"}, {"response_format"}, set(),
                                        set()]
    assert events[0]["outcome"] != "parse_error" and events[0]["move"] == "plan"
    assert events[0]["llm_note"].count("refused") == 1
    assert "plans are read from free text with the same parser" in events[0]["llm_note"]
    transcript = json.loads((tmp_path / "llm" / f"{events[0]['llm_request']}.json")
                            .read_text())
    assert [r["dialect"] for r in transcript["structured_refused"]] == ["json_schema",
                                                                        "json_object"]


def test_grammar_mode_against_openai_falls_back_to_free_text(softmax, tmp_path):
    with ConstrainingServer(default=reply(f"```leir\n{FAST_BODY}```"), **OPENAI) as server:
        events, llm = run_chain(softmax, server, tmp_path, 1, forms=["kernel"],
                                structured="grammar")
    assert sent_constraints(server) == [{"grammar"}, {"structured_outputs"}, set()]
    assert events[0]["outcome"] == "best"
    assert "kernels, edits and plans are read from free text" in events[0]["llm_note"]


def test_off_sends_no_constraint_and_no_probe(softmax, tmp_path):
    with ConstrainingServer(default=reply('{"steps": [1]}'), **VLLM) as server:
        run_chain(softmax, server, tmp_path, 1, forms=["plan"], structured="off")
    assert not server.probes and sent_constraints(server) == [set()]


def test_the_chains_of_a_run_probe_the_endpoint_once(softmax, tmp_path):
    with ConstrainingServer(default=reply('{"steps": [1]}'), **VLLM) as server:
        run_chain(softmax, server, tmp_path, 1, forms=["plan"])
        probes = len(server.probes)
        run_chain(softmax, server, tmp_path, 1, forms=["plan"])
    # grammar (ignored: not obeyed), structured_outputs, json_schema; the next chain reads
    assert probes == 3 and len(server.probes) == 3
    assert json.loads((tmp_path / "llm" / "structured.json").read_text()) == {
        "json": ["json_schema"], "grammar": ["structured_outputs"]}


def test_a_server_error_that_names_the_constraint_is_not_retried(tmp_path):
    """llama-cpp-python answers an unknown response_format type with a 500."""
    message = "1 validation error: ('body', 'response_format', 'type') Input should be ..."
    with LLMServer([error(500, message=message)] * 4) as server:
        client = Client(llm_options({"model": "m", "base_url": server.url, "retries": 2,
                                     "backoff_s": 0.01}))
        with pytest.raises(RequestFailed) as e:
            client.complete([{"role": "user", "content": "hi"}], {},
                            {"response_format": {"type": "json_schema"}})
        assert e.value.kind == "constraint" and len(server.requests) == 1
        with pytest.raises(RequestFailed) as e:   # without a constraint: a server error
            client.complete([{"role": "user", "content": "hi"}])
        assert e.value.kind != "constraint" and len(server.requests) == 4   # retried twice


def test_each_dialect_puts_the_constraint_where_its_servers_read_it():
    schema = {"type": "object"}
    assert fields("json_schema", schema, "plan") == {"response_format": {
        "type": "json_schema", "json_schema": {"name": "plan", "schema": schema,
                                               "strict": True}}}
    assert fields("json_object", schema) == {"response_format": {"type": "json_object",
                                                                 "schema": schema}}
    assert fields("grammar", "root ::= \"a\"") == {"grammar": "root ::= \"a\""}
    assert fields("structured_outputs", "g") == {"structured_outputs": {"grammar": "g"}}
    # a probe counts only when the reply is the text its constraint alone produces
    assert obeyed("grammar", f"{PROBE_WORD}-42") and not obeyed("grammar", "Hello.")
    assert obeyed("json_object", f'{{"probe": "{PROBE_WORD}"}}')
    assert not obeyed("json_schema", '{"probe": "hello"}')
