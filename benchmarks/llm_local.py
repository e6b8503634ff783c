"""The LLM proposer against a local OpenAI-compatible server: prompt tokens per request
before and after fitting the context, then a short --proposer llm run per spec with its
latency per request and the outcomes of the replies.

    tests/integration/local_llm.sh          # builds the server and SmolLM2-135M once
    ~/.cache/stochopt/local_llm/venv/bin/python -m llama_cpp.server --model \\
        "$(cat ~/.cache/stochopt/local_llm/model_path)" --port 8089 --n_ctx 8192 &
    python benchmarks/llm_local.py --base-url http://127.0.0.1:8089/v1 --budget 90s

"before" is the fullest prompt (the whole references, the whole profile: what every
request carried before prompts were fitted to the context); "after" is the prompt the
proposer builds for the server's context. Both are counted by the server's tokenizer
(a 400 names the count of a prompt that does not fit). No assertions: measurements.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from pathlib import Path

import openai

from stochopt.llm.context import TokenCounter, reply_room
from stochopt.llm.prompt import PromptBuilder, load_templates
from stochopt.lower import lower
from stochopt.machine import load_machine
from stochopt.report.facts import run_facts
from stochopt.search import optimize
from stochopt.spec import load_spec

SPECS = Path(__file__).resolve().parents[1] / "specs"


def server_tokens(client, model: str, messages: list[dict]) -> int:
    """The prompt's tokens as the server counts them."""
    try:
        reply = client.chat.completions.create(model=model, messages=messages, max_tokens=1)
        return reply.usage.prompt_tokens
    except openai.BadRequestError as e:   # too long for the context: the 400 says how long
        m = re.search(r"(\d+) in the messages|requested (\d+) tokens", str(e))
        return int(m.group(1) or m.group(2)) if m else -1


def prompt_sizes(client, model: str, spec_name: str, context: int) -> dict:
    machine = load_machine("mncore2")
    spec = load_spec(SPECS / f"{spec_name}.py")
    baseline = lower(spec, machine)
    builder = PromptBuilder(load_templates(), spec, machine, baseline)
    before = builder.messages(baseline, [])
    budget = context - reply_room(context, None)
    after = builder.build(baseline, [], budget, TokenCounter().estimate)
    return {"before_chars": sum(len(m["content"]) for m in before),
            "before_tokens": server_tokens(client, model, before),
            "after_level": after.level_name, "after_estimate": after.estimate_tokens,
            "after_chars": sum(len(m["content"]) for m in after.messages),
            "after_tokens": server_tokens(client, model, after.messages)}


def short_run(base_url: str, model: str, spec_name: str, budget: str) -> dict:
    run_dir = Path(tempfile.mkdtemp(prefix=f"llm-{spec_name}-")) / "run"
    result = optimize(str(SPECS / f"{spec_name}.py"), proposer="llm", chains=1,
                      budget=budget, run_dir=str(run_dir), db=False,
                      llm={"model": model, "base_url": base_url, "timeout_s": 300.0,
                           "concurrency": 1})
    llm = run_facts(run_dir)["llm"]
    return {"run_dir": str(run_dir), "stopped_by": result.stopped_by,
            "best_cycles": result.best_cycles, "baseline_cycles": result.baseline_cycles,
            **{k: llm[k] for k in ("requests", "answered", "failed", "prompt_tokens_mean",
                                   "prompt_tokens_max", "latency_s_mean", "outcomes",
                                   "status")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--context", type=int, default=8192)
    parser.add_argument("--budget", default="90s")
    parser.add_argument("--specs", default="softmax,mla_decode")
    args = parser.parse_args()
    client = openai.OpenAI(base_url=args.base_url, api_key="sk-no-key-needed", timeout=600)
    for spec_name in args.specs.split(","):
        sizes = prompt_sizes(client, args.model, spec_name, args.context)
        print(json.dumps({"spec": spec_name, **sizes}))
        print(json.dumps({"spec": spec_name, **short_run(args.base_url, args.model, spec_name,
                                                        args.budget)}))


if __name__ == "__main__":
    main()
