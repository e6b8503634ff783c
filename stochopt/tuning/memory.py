"""A memory for the LLM: slow -> fast kernel pairs from earlier runs, shown in its prompt
as worked examples (as AccelOpt feeds its model past optimizations).

A pair is an earlier run's starting kernel (its spec's lowering) and the fastest kernel
it proved, with the plan between them where it is known. When a run starts, the main
process takes a small pool of pairs from the database (``example_pool``: this spec's
earlier runs, then the nearest specs'), and the pool travels with the LLM's settings to
every chain. Each prompt then shows the one or two pairs most like the kernel it asks
about (``examples_text``: by the ops they use), within a character budget, each as a
plan and as kernel text; a prompt with no pair that fits shows nothing.
"""

from __future__ import annotations

import math
from collections import Counter

from stochopt.errors import StochoptError
from stochopt.leir.ir import Kernel
from stochopt.leir.render import render
from stochopt.transform.plan import PlanError, plan_from_json
from stochopt.tuning.store import TuningDB, kernel_body, kernel_sha256

POOL = 6            # pairs a run takes from the database
MOST_SHOWN = 2      # pairs one prompt shows
MIN_SPEEDUP = 1.05  # a pair must be at least this much faster to teach anything


def kernel_ops(kernel: Kernel) -> dict[str, int]:
    """How many times the kernel uses each op (the inputs left out)."""
    return dict(Counter(n.op for n in kernel.nodes if n.op != "input"))


def example_pool(db: TuningDB, spec_fingerprint: str, machine: str, machine_obj) -> list[dict]:
    """Up to POOL pairs: the spec's own earlier runs first, then specs of its family and
    op multiset; one pair per run, the run's fastest unrefuted kernel against its
    baseline. Each pair is plain data (it goes to the chains with the LLM settings)."""
    from stochopt.leir.parser import parse

    own = db.spec(spec_fingerprint)
    if own is None:
        return []
    pool: list[dict] = []
    for spec in [own] + db.specs_like(own["family"], own["ops"], spec_fingerprint):
        for run in reversed(db.runs_of(spec["fingerprint"], machine)):
            kernels = [k for k in db.kernels_of_run(run["uid"]) if k["refuted"] is None]
            if not kernels or not run["baseline"] or not run["baseline_cycles"]:
                continue
            fast = min(kernels, key=lambda k: k["cycles"])
            if run["baseline_cycles"] < MIN_SPEEDUP * fast["cycles"]:
                continue
            try:
                fast_ops = kernel_ops(parse(fast["text"], machine_obj))
            except StochoptError:
                continue  # written by another version of LEIR
            pool.append({"spec": spec["name"], "run_dir": run["run_dir"],
                         "same_spec": spec["fingerprint"] == spec_fingerprint,
                         "slow": run["baseline"], "slow_cycles": run["baseline_cycles"],
                         "fast": fast["text"], "fast_cycles": fast["cycles"],
                         "plan": fast["plan"], "ops": fast_ops})
            if len(pool) >= POOL:
                return pool
    return pool


def similarity(a: dict[str, int], b: dict[str, int]) -> float:
    """Cosine of two op-count vectors (1: the same ops in the same proportions)."""
    dot = sum(a[k] * b.get(k, 0) for k in a)
    norm = math.sqrt(sum(v * v for v in a.values()) * sum(v * v for v in b.values()))
    return dot / norm if norm else 0.0


def ranked(pool: list[dict], kernel: Kernel) -> list[dict]:
    """The pairs most similar to ``kernel`` first (this spec's before others', the
    larger speedup first), none whose fast kernel is the kernel itself."""
    own = kernel_sha256(render(kernel))
    ops = kernel_ops(kernel)
    return sorted((p for p in pool if kernel_sha256(p["fast"]) != own),
                  key=lambda p: (-similarity(ops, p["ops"]), not p["same_spec"],
                                 p["fast_cycles"] / p["slow_cycles"]))


def choose(pool: list[dict], kernel: Kernel, budget_chars: int,
           most: int = MOST_SHOWN) -> list[tuple[dict, bool]]:
    """The pairs a prompt about ``kernel`` shows: most similar first, none whose fast
    kernel is the kernel itself, as many as fit ``budget_chars`` (up to ``most``); each
    with whether its slow kernel fits too."""
    chosen, left = [], budget_chars
    for pair in ranked(pool, kernel):
        if len(chosen) == most:
            break
        whole = len(format_pair(pair, 1, True))
        if whole <= left:
            chosen.append((pair, True))
            left -= whole
        elif len(format_pair(pair, 1, False)) <= left:
            chosen.append((pair, False))
            left -= len(format_pair(pair, 1, False))
    return chosen


def plan_examples_text(pool: list[dict] | None, kernel: Kernel,
                       most: int = MOST_SHOWN) -> str:
    """The plan prompt's section of earlier runs' plans: a line each (where, how much
    faster, the rules in order), most similar first; '' when no pair has a plan. A plan
    prompt is short (small models read slowly), so it names rules, not kernels."""
    lines = []
    for pair in ranked(pool or [], kernel):
        plan = _plan(pair)
        if plan:
            lines.append(f"- {_where(pair)}, {pair['slow_cycles']} -> {pair['fast_cycles']} "
                         f"cycles ({pair['slow_cycles'] / pair['fast_cycles']:.2f}x): "
                         + " -> ".join(step.rule for step in plan))
        if len(lines) == most:
            break
    if not lines:
        return ""
    return ("\n# Plans from earlier runs\n\nThe rules, in order, that made kernels like "
            "this one faster (the tuning database); menu entries of these rules are worth "
            "trying:\n\n" + "\n".join(lines) + "\n")


def _plan(pair: dict) -> list | None:
    try:
        return plan_from_json(pair["plan"]) if pair["plan"] is not None else None
    except PlanError:
        return None


def _where(pair: dict) -> str:
    return "this spec, an earlier run" if pair["same_spec"] else f"spec {pair['spec']}"


def format_pair(pair: dict, number: int, with_slow: bool) -> str:
    """One example: where it comes from, its plan, its kernels."""
    speedup = pair["slow_cycles"] / pair["fast_cycles"]
    lines = [f"## Example {number}: {_where(pair)}, {pair['slow_cycles']} -> "
             f"{pair['fast_cycles']} cycles ({speedup:.2f}x), from {pair['run_dir']}", ""]
    plan = _plan(pair)
    if plan:
        lines += ["The rewrites that made it, in order:"]
        lines += [f"{i}. {step.describe()}" for i, step in enumerate(plan, 1)] + [""]
    if with_slow:
        lines += ["Before:", "", "```leir", kernel_body(pair["slow"]).rstrip(), "```", ""]
    lines += ["After:" if with_slow else "The fast kernel:", "", "```leir",
              kernel_body(pair["fast"]).rstrip(), "```", ""]
    return "\n".join(lines)


def examples_text(pool: list[dict] | None, kernel: Kernel, budget_chars: int) -> str:
    """The prompt's examples section ('' when the pool is empty or nothing fits)."""
    if not pool or budget_chars <= 0:
        return ""
    head = ("\n# Examples from earlier runs\n\nSlow -> fast kernels that earlier runs "
            "proved equivalent, for kernels like this one:\n\n")
    chosen = choose(pool, kernel, budget_chars - len(head))
    if not chosen:
        return ""
    return head + "\n".join(format_pair(pair, i, with_slow)
                            for i, (pair, with_slow) in enumerate(chosen, 1))
