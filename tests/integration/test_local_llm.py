"""The LLM proposer against a real model: llama-cpp-python's OpenAI-compatible server with
SmolLM2-135M-Instruct at its 8,192-token context, started on a free loopback port.

The server is built by tests/integration/local_llm.sh into $STOCHOPT_LOCAL_LLM (default
~/.cache/stochopt/local_llm) when it is not there yet; the tests are skipped, saying why,
only when that build fails. Run them alone with `pytest -m llm_server`.

A 135M model writes almost no valid LEIR: the tests pin what must hold whatever it
writes. Requests succeed from the first one (the prompt fits the context), tokens come
from the server's usage, every reply is read and judged, transcripts are written, and the
run ends at its budget.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.llm_server, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "tests" / "integration" / "local_llm.sh"
CONTEXT = 8192


def server_dir() -> Path:
    return Path(os.environ.get("STOCHOPT_LOCAL_LLM")
                or Path.home() / ".cache" / "stochopt" / "local_llm")


def _ready(folder: Path) -> tuple[Path, Path] | None:
    python, model_path = folder / "venv" / "bin" / "python", folder / "model_path"
    if not (python.exists() and model_path.exists()):
        return None
    model = Path(model_path.read_text().strip())
    works = subprocess.run([str(python), "-c", "import llama_cpp.server"],
                           capture_output=True).returncode == 0
    return (python, model) if works and model.exists() else None


def find_or_build() -> tuple[Path, Path]:
    """The server's python and the model file; builds them the first time."""
    folder = server_dir()
    found = _ready(folder)
    if found:
        return found
    done = subprocess.run(["bash", str(BUILD), str(folder)], capture_output=True, text=True,
                          timeout=3600)
    found = _ready(folder)
    if done.returncode != 0 or found is None:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        pytest.skip(f"the local LLM server could not be built by {BUILD.name} "
                    f"(exit status {done.returncode}: {last})")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def local_server(tmp_path_factory):
    """The base URL of a running server; stopped by its process id afterwards."""
    python, model = find_or_build()
    port = free_port()
    log_path = tmp_path_factory.mktemp("llm_server") / "server.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [str(python), "-m", "llama_cpp.server", "--model", str(model), "--host",
             "127.0.0.1", "--port", str(port), "--n_ctx", str(CONTEXT)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        for _ in range(600):  # up to two minutes on a busy machine
            if process.poll() is not None:
                pytest.fail(f"the LLM server exited ({process.returncode}): "
                            f"{log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=2):
                    break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail(f"the LLM server did not answer within 2 minutes: {log_path}")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


def optimize(url: str, spec: str, run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "stochopt", "optimize", str(ROOT / "specs" / f"{spec}.py"),
         "--proposer", "llm", "--model", "smollm2", "--base-url", url, "--chains", "1",
         "--run-dir", str(run_dir), "--quiet", *extra],
        capture_output=True, text=True, timeout=1800, cwd=run_dir.parent,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "",
             "OPENAI_BASE_URL": "", "COLUMNS": "300"})


def transcripts(run_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((run_dir / "llm").glob("chain*.json"))]


def test_a_short_llm_search_against_a_real_small_model(local_server, tmp_path):
    # two replies end the run (a 2-core machine takes minutes to read a 3k-token prompt);
    # --max-tokens keeps the 135M model from rambling for the whole reply room
    run_dir = tmp_path / "softmax"
    done = optimize(local_server, "softmax", run_dir, "--budget", "12m", "--max-proposals",
                    "2", "--max-tokens", "256", "--llm-concurrency", "1",
                    "--llm-timeout", "600")
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"stopped by (max_proposals|budget)", done.stdout)
    sent = transcripts(run_dir)
    answered = [t for t in sent if t["status"] == "ok"]
    assert answered, [t.get("error") for t in sent]
    # the prompt fitted from the first request: no context error, no shrinking
    assert sent[0]["status"] in ("ok", "abandoned: the run ended before the reply")
    assert not [t for t in sent if "shrunk" in t or t.get("error_kind") == "context"]
    for t in answered:
        usage = t["usage"]
        assert usage["reported"] and 0 < usage["prompt_tokens"] <= CONTEXT - 256
        assert usage["prompt_tokens"] <= t["prompt"]["estimate_tokens"]  # the safe side
        assert t["variant"]["focus"] and t["params"]["max_tokens"] == 256
        assert all(c["outcome"] for c in t["candidates"])   # every reply read and judged
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    assert sum(e["tokens"] for e in events) >= sum(
        t["usage"]["prompt_tokens"] + t["usage"]["completion_tokens"] for t in answered
        if t["candidates"][0]["outcome"] and "not evaluated" not in t["candidates"][0][
            "outcome"])
    report = subprocess.run([sys.executable, "-m", "stochopt", "report", str(run_dir),
                             "--json"], capture_output=True, text=True, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    llm = json.loads(report.stdout)["llm"]
    assert llm["answered"] == len(answered) and llm["status"] == ""
    assert 0 < llm["prompt_tokens_max"] <= CONTEXT - 256
    assert sum(llm["outcomes"].values()) >= len(answered)
    # the server constrains plans by schema and the rest by grammar: a plan reply is
    # always a plan from the menu, read into a well-typed kernel
    assert json.loads((run_dir / "llm" / "structured.json").read_text()) == {
        "json": ["json_object"], "grammar": ["grammar"]}
    plans = [t for t in answered if t["variant"]["form"] == "plan"]
    for t in plans:
        assert t["structured"]["constrained"] == "json_object"
        assert all(c["well_typed"] for c in t["candidates"] if "well_typed" in c)
        assert all(c.get("read_as") != "parse_error" for c in t["candidates"])
    assert sum(r["requests"] for r in llm["yield"]) == llm["requests"]


def test_llama_cpp_takes_the_grammars_and_schemas_stochopt_sends(local_server):
    """Each constraint, sent to the real server: llama.cpp's grammar parser reads ours (a
    grammar it cannot read ends the server process) and the replies obey them."""
    from stochopt.leir.render import render
    from stochopt.llm.client import Client
    from stochopt.llm.forms import read_plan
    from stochopt.llm.gbnf import to_gbnf
    from stochopt.llm.grammar import edit_grammar, kernel_grammar, plan_grammar, plan_schema
    from stochopt.llm.options import llm_options
    from stochopt.llm.structured import Structured, fields
    from stochopt.lower import lower
    from stochopt.machine import load_machine
    from stochopt.spec import load_spec

    client = Client(llm_options({"model": "smollm2", "base_url": local_server,
                                 "retries": 0, "timeout_s": 600.0}))
    found = Structured("auto")
    assert found.probe(client, {"max_tokens": 24, "temperature": 0.0}) == []
    assert found.describe() == {"mode": "auto", "json": "json_object", "grammar": "grammar"}

    def ask(constraint: dict, max_tokens: int, content: str) -> str:
        reply = client.complete([{"role": "user", "content": content}],
                                {"max_tokens": max_tokens, "temperature": 0.7}, constraint)
        return reply.contents[0]

    menu = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    for constraint in (fields("json_object", plan_schema(menu, 6)),
                       fields("grammar", to_gbnf(plan_grammar(menu, 6)))):
        steps = read_plan(ask(constraint, 48, "Choose transforms 2 and 5 of the menu."))
        assert 1 <= len(steps) <= 6 and set(steps) <= set(menu)
    machine = load_machine("mncore2")
    text = render(lower(load_spec(ROOT / "specs" / "softmax.py"), machine))
    def_line = next(line for line in text.splitlines() if line.startswith("def "))
    start = ask(fields("grammar", to_gbnf(kernel_grammar(def_line, comments=False))), 6,
                "Write a faster kernel.")
    assert def_line.startswith(start) and start.startswith("def")
    start = ask(fields("grammar", to_gbnf(edit_grammar(text))), 6, "Edit the kernel.")
    assert "<<<<<<< SEARCH".startswith(start[:14]) or start.startswith("<<<<<<< SEARCH")
    ask(fields("grammar", to_gbnf(kernel_grammar())), 1, "A kernel.")  # the whole grammar
    with urllib.request.urlopen(f"{local_server}/models", timeout=10):
        pass   # the server still answers: it read every grammar


def test_an_oversized_context_setting_is_corrected_by_the_server(local_server, tmp_path):
    """Told the model has 32k tokens, the proposer's first kernel prompt is refused by
    the server's 8k context; it learns the context from the 400, shrinks and retries
    once, and the next requests fit at once. (A plan prompt takes an eighth of the
    context and always fits: the run asks for whole kernels, through the Python API,
    which alone has the forms setting.) Softmax's full prompt is already over 8k tokens;
    the reply is kept short and free (no grammar) because what is tested is the prompt's
    size, and a grammar-constrained reply costs this 2-core machine a minute more."""
    run_dir = tmp_path / "softmax"
    script = ("import sys; from stochopt import optimize; optimize(sys.argv[1], "
              "proposer='llm', chains=1, budget='12m', max_proposals=1, run_dir=sys.argv[2], "
              "llm={'model': 'smollm2', 'base_url': sys.argv[3], 'context_tokens': 32768, "
              "'max_tokens': 64, 'concurrency': 1, 'timeout_s': 600.0, "
              "'forms': ['kernel'], 'structured': 'off'})")
    done = subprocess.run([sys.executable, "-c", script, str(ROOT / "specs" / "softmax.py"),
                           str(run_dir), local_server], capture_output=True, text=True,
                          timeout=1800, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "",
                               "OPENAI_BASE_URL": ""})
    assert done.returncode == 0, done.stdout + done.stderr
    sent = transcripts(run_dir)
    assert "shrunk" in sent[0] and sent[0]["shrunk"]["error"].startswith("HTTP 400")
    assert sent[0]["prompt"]["context_tokens"] == CONTEXT
    # the shrunk prompt was sent; on a loaded 2-core machine its reply (a 4k-token prompt)
    # may not come within the budget: the first test is the one that needs replies
    assert sent[0]["status"] in ("ok", "abandoned: the run ended before the reply")
    assert sent[0]["shrunk"]["from_estimate_tokens"] > CONTEXT
    assert sent[0]["prompt"]["estimate_tokens"] <= CONTEXT - 64
    answered = [t for t in sent if t["status"] == "ok"]
    assert all(t["usage"]["prompt_tokens"] <= CONTEXT - 64 for t in answered)
    assert not [t for t in sent[1:] if "shrunk" in t]
