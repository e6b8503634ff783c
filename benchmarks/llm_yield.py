"""The LLM's plans against chance: the same spec, seed and chain with the LLM arm asking
a model for transform plans, then with the same arm answered by uniformly random plans of
the same lengths drawn from the same menus, and by the menu's top entries (1, 2, ...: the
steps the cost model likes best, as many as the model's plan had). Acceptance and
improvement rates of the three, with their spread over seeds.

    tests/integration/local_llm.sh          # builds the server and SmolLM2-135M once
    ~/.cache/stochopt/local_llm/venv/bin/python -m llama_cpp.server --model \\
        "$(cat ~/.cache/stochopt/local_llm/model_path)" --port 8089 --n_ctx 8192 &
    python benchmarks/llm_yield.py --base-url http://127.0.0.1:8089/v1 \\
        --specs softmax,attention_scores --seeds 0,1,2 --requests 8

Each arm is a chain of its own (the llm arm alone, full checks on its path), started
from the spec's lowering (``--start fixpoint``: from greedy's descent, where single
rewrites no longer pay) and stepped until ``--requests`` plans were judged. Chance reads
the menu from the request's own constraint (the JSON schema's enum of entry numbers), so
it draws from exactly the menu the model was shown; the k-th random plan has as many
steps as the model's k-th plan of the same seed, and the k-th top plan is the menu's
first entries, as many. A model that beats chance but not the top plan reads the menu's
order, not the kernel. Rates are per plan: accepted (the chain
moved to it) and improving (its kernel was faster than the chain's). The model's replies
are constrained where the server takes a schema, as in a run. No assertions: measurements.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from stochopt.backend.cost import cost
from stochopt.llm.client import Client, Reply
from stochopt.llm.options import llm_options
from stochopt.llm.structured import PROBE_WORD
from stochopt.lower import lower
from stochopt.machine import load_machine
from stochopt.rundir import TAKEN
from stochopt.search.chain import ChainConfig
from stochopt.search.chain_run import ChainRun
from stochopt.search.llm_proposer import LLMProposer
from stochopt.spec import load_spec
from stochopt.transform.greedy import descend

SPECS = Path(__file__).resolve().parents[1] / "specs"


class MenuClient(Client):
    """A stand-in model: each plan request is answered with entries of the menu its
    schema lists, as many as ``lengths`` says for that request (in order): drawn
    uniformly (``top=False``: chance), or the first ones (``top=True``)."""

    def __init__(self, options: dict, lengths: list[int], seed: int, top: bool) -> None:
        super().__init__({**options, "base_url": "http://127.0.0.1:9/v1"})
        self.lengths, self.rng, self.asked = list(lengths), random.Random(seed), 0
        self.top = top

    def served_models(self):
        return None

    def _once(self, messages, overrides, constraint=None) -> Reply:
        schema = _schema(constraint)
        if schema is None or "steps" not in schema.get("properties", {}):   # a probe
            return Reply([json.dumps({"probe": PROBE_WORD}) if schema else
                          f"{PROBE_WORD}-00"])
        menu = schema["properties"]["steps"]["items"]["enum"]
        length = self.lengths[self.asked] if self.asked < len(self.lengths) else 1
        self.asked += 1
        steps = (sorted(menu)[:length] if self.top
                 else [self.rng.choice(menu) for _ in range(length)])
        return Reply([json.dumps({"steps": steps})])


def _schema(constraint: dict | None) -> dict | None:
    if not constraint or "response_format" not in constraint:
        return None
    fmt = constraint["response_format"]
    return fmt.get("schema") or (fmt.get("json_schema") or {}).get("schema")


def run_arm(spec_name: str, seed: int, requests: int, llm: dict, start: str,
            client_for=None) -> dict:
    """One chain with the llm arm alone until ``requests`` plans were judged."""
    machine = load_machine("mncore2")
    spec = load_spec(SPECS / f"{spec_name}.py")
    baseline = lower(spec, machine)
    options = llm_options({**llm, "forms": ["plan"], "concurrency": 1})
    run_dir = Path(tempfile.mkdtemp(prefix=f"llm-yield-{spec_name}-"))
    client = client_for(options) if client_for else None
    proposer = LLMProposer(options, spec, machine, baseline, run_dir, 0,
                           deadline=time.time() + 7200, seed=seed, client=client)
    chain = ChainRun(0, spec, baseline, cost(baseline, machine).cycles, baseline, machine,
                     ["llm"], seed, ChainConfig(full_examples=20, escape_kernels=0),
                     proposer)  # no escape from the start: every step is the arm's
    if start == "fixpoint":
        opened = descend(baseline, machine, chain.objective.error, random.Random(seed))
        chain.restart_from(opened.kernel, opened.plan)
    kernel = chain.current
    plans = []
    while len(plans) < requests:
        before = chain.chain.current_cycles
        event = chain.step()[0]
        if event.get("llm_form") != "plan" or event["move"] != "plan":
            continue
        plans.append({"length": len(_asked(proposer, event)),
                      "accepted": event["outcome"] in TAKEN,
                      "improved": event["outcome"] in TAKEN
                      and event["cycles"] is not None and event["cycles"] < before,
                      "outcome": event["outcome"], "cycles": event.get("cycles")})
    proposer.close()
    return {"plans": plans, "start_cycles": cost(kernel, machine).cycles,
            "end_cycles": chain.chain.current_cycles, "run_dir": str(run_dir)}


def _asked(proposer: LLMProposer, event: dict) -> list[int]:
    t = proposer.transcripts.get(event["llm_request"]) or {}
    cands = t.get("candidates") or [{}]
    return cands[event.get("llm_candidate", 0)].get("plan") or []


def rates(arm: dict) -> dict:
    plans = arm["plans"]
    return {"acceptance": sum(p["accepted"] for p in plans) / len(plans),
            "improvement": sum(p["improved"] for p in plans) / len(plans),
            "speedup": arm["start_cycles"] / arm["end_cycles"]}


def spread(values: list[float]) -> str:
    mean = statistics.mean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:.2f} ± {sd:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--specs", default="softmax,attention_scores")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--start", choices=["lowering", "fixpoint"], default="lowering")
    parser.add_argument("--out", default=None, help="write every plan's record here (JSON)")
    args = parser.parse_args()
    llm = {"model": args.model, "base_url": args.base_url, "max_tokens": args.max_tokens,
           "timeout_s": 900.0}
    records = []
    print("| spec | arm | acceptance | improvement | speedup of the chain | plan steps |")
    print("| --- | --- | --- | --- | --- | --- |")
    for spec_name in args.specs.split(","):
        by_arm: dict[str, list[dict]] = {"model": [], "chance": [], "menu's top": []}
        for seed in [int(s) for s in args.seeds.split(",")]:
            record = {"spec": spec_name, "seed": seed}
            record["model"] = run_arm(spec_name, seed, args.requests, llm, args.start)
            lengths = [p["length"] for p in record["model"]["plans"]]
            for arm, top in (("chance", False), ("menu's top", True)):
                record[arm] = run_arm(
                    spec_name, seed, args.requests, llm, args.start,
                    lambda o, top=top, lengths=lengths, seed=seed: MenuClient(
                        o, lengths, seed, top))
            for arm, result in by_arm.items():
                result.append(record[arm])
            records.append(record)
        for name, arms in by_arm.items():
            r = [rates(a) for a in arms]
            steps = [p["length"] for a in arms for p in a["plans"]]
            print(f"| {spec_name} | {args.model if name == 'model' else name} | "
                  f"{spread([x['acceptance'] for x in r])} | "
                  f"{spread([x['improvement'] for x in r])} | "
                  f"{spread([x['speedup'] for x in r])} | "
                  f"{statistics.mean(steps):.1f} |", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
