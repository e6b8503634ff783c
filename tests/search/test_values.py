"""The chain's value caches give the answers a fresh computation gives, and a value graph
proved once is not fully checked again."""

import math
import random
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stochopt import load_spec
from stochopt.backend.cost import cost, cycles
from stochopt.backend.emulate import emulate
from stochopt.errors import StochoptError
from stochopt.leir import parse, render
from stochopt.lower import lower
from stochopt.machine import MNCORE2
from stochopt.search import full_checks as full_checks_module
from stochopt.search.chain import Candidate
from stochopt.search.chain_run import ChainRun
from stochopt.search.values import CachedScreening, NodeValues, Proofs
from stochopt.transform.mutate import propose_mutation
from stochopt.verify.check import Verdict
from stochopt.verify.screening import ScreeningSet

SPEC = load_spec("specs/attention_decode.py")
BASELINE = lower(SPEC, MNCORE2)
FRESH = ScreeningSet(SPEC, BASELINE, MNCORE2, 3, seed=5)
CACHED = CachedScreening(SPEC, BASELINE, MNCORE2, 3, seed=5)  # shared: a warm cache


@pytest.fixture(autouse=True, scope="module")
def one_blas_thread():
    """As the chains run (driver.worker): BLAS threads only fight on a busy machine."""
    from threadpoolctl import threadpool_limits
    with threadpool_limits(1):
        yield


def mutated(seed: int, moves: int):
    """A kernel a few random mutations away from the baseline (or None)."""
    rng, kernel = random.Random(seed), BASELINE
    for _ in range(moves):
        try:
            _, out = propose_mutation(kernel, rng, MNCORE2)
        except StochoptError:
            continue
        if out is not None and out.output_type.shape == BASELINE.output_type.shape:
            kernel = out
    return kernel


def same_array(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


def check_cache_against_fresh(kernel) -> None:
    for i in range(len(FRESH)):
        fresh = FRESH._one(kernel, i)
        assert CACHED._one(kernel, i) == fresh
        assert CACHED._one(kernel, i) == fresh  # from the cache this time
        for exact in (True, False):
            assert same_array(CACHED.output(kernel, i, exact),
                              emulate(kernel, FRESH.inputs[i], exact=exact))
    assert CACHED.error(kernel) == FRESH.error(kernel)
    refused = FRESH.range_refused(kernel)
    assert CACHED.range_refused(kernel) == refused
    assert CACHED.range_refused(kernel) == refused  # from the cache this time


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 10**6), st.integers(1, 6))
def test_a_cached_screening_verdict_equals_a_fresh_one(seed, moves):
    check_cache_against_fresh(mutated(seed, moves))


def test_cached_screening_verdicts_equal_fresh_ones_on_a_few_mutants():
    for seed in range(3):
        check_cache_against_fresh(mutated(seed, 4))


def test_an_edit_recomputes_only_what_lies_downstream():
    values = NodeValues()
    inputs = FRESH.inputs[0]
    values.output(BASELINE, 0, inputs, exact=True)
    first = values.computed
    # every node once, but those that leave an exact value as it is: data movement, and
    # casts between float dtypes (exact mode never rounds)
    moves = sum(1 for n in BASELINE.nodes if n.op in ("load", "relayout", "store") or (
        n.op == "cast" and n.type.dtype in ("f32", "bf16")
        and BASELINE.nodes[n.inputs[0]].type.dtype in ("f32", "bf16")))
    assert first == len(BASELINE.nodes) - moves
    # the same kernel again, or one that only moves data: nothing to compute
    text = render(BASELINE)
    last = BASELINE.nodes[BASELINE.nodes[BASELINE.output].inputs[0]]
    name = re.search(r"return store\((\w+)\)", text).group(1)
    values.output(parse(text, MNCORE2), 0, inputs, exact=True)
    relaid = parse(text.replace(f"return store({name})",
                                f'return store(relayout({name}, "{last.type.layout}"))'),
                   MNCORE2)
    assert relaid.terms[relaid.output] is not BASELINE.terms[BASELINE.output]
    values.output(relaid, 0, inputs, exact=True)
    assert values.computed == first
    # two ops appended at the end: those two alone
    negated = parse(text.replace(f"return store({name})", f"return store(-(-{name}))"),
                    MNCORE2)
    values.output(negated, 0, inputs, exact=True)
    assert values.computed == first + 2
    assert same_array(values.output(negated, 0, inputs, exact=True),
                      emulate(negated, inputs, exact=True))


def test_cached_values_are_read_only_and_inputs_are_converted_once():
    values = NodeValues()
    inputs = FRESH.inputs[0]
    out = values.output(BASELINE, 0, inputs, exact=False)
    with pytest.raises(ValueError):
        out[...] = 0
    converted = values.computed
    values.output(mutated(3, 2), 0, inputs, exact=False)
    held = [k for k in values.values if k[1].op == "input"]
    assert len(held) == len(SPEC.inputs) and values.computed >= converted


def test_the_value_budget_is_kept():
    values = NodeValues(budget_bytes=1)
    for i in range(2):
        values.output(BASELINE, i, FRESH.inputs[i], exact=True)
    assert len(values.values) == 1  # the newest only, whatever its size


def test_cached_cycles_equal_the_schedule_and_errors_repeat():
    for seed in range(30):
        kernel = mutated(seed, 3)
        try:
            expected = cost(kernel, MNCORE2).cycles
        except StochoptError as e:
            with pytest.raises(type(e), match="memory"):
                cycles(kernel, MNCORE2)
            continue
        assert cycles(kernel, MNCORE2) == expected == cycles(kernel, MNCORE2)


# ---------------------------------------------------------------------------------
# skipping the full check of a value graph proved earlier
# ---------------------------------------------------------------------------------

SOFTMAX = load_spec("specs/softmax.py")
SOFTMAX_BASELINE = lower(SOFTMAX, MNCORE2)


def layout_variant(kernel):
    """The same values, rows spread over other levels (the summed axis untouched)."""
    text = render(kernel)
    old = "(128,1024)/((8_L2B,8_L1B,2_MAB),(1024))"
    assert old in text
    return parse(text.replace(old, "(128,1024)/((8_L2B,16_MAB),(1024))"), MNCORE2)


def test_proofs_know_a_value_graph_whatever_its_layouts():
    proofs = Proofs()
    verdict = proofs.record(SOFTMAX_BASELINE, Verdict(True, 200, 0).to_json())
    again = proofs.earlier(layout_variant(SOFTMAX_BASELINE))
    assert again["value_graph"] == verdict["value_graph"]
    assert again["proved_earlier"] == f"proved earlier as value graph {verdict['value_graph']}"
    other = parse(render(SOFTMAX_BASELINE).replace("exp(", "tanh("), MNCORE2)
    assert proofs.earlier(other) is None


def test_a_chain_skips_the_full_check_of_a_value_graph_it_proved(monkeypatch):
    calls = []

    def fake_check(kernel, spec, **options):
        calls.append(kernel)
        return Verdict(True, options["examples"], options["seed"])

    monkeypatch.setattr(full_checks_module, "check", fake_check)
    run = ChainRun(0, SOFTMAX, SOFTMAX_BASELINE, cost(SOFTMAX_BASELINE, MNCORE2).cycles,
                   SOFTMAX_BASELINE, MNCORE2, ["mutate"], seed=1)

    def offer(kernel):
        run.checks.best_cycles = 10**9      # any correct kernel is a new best
        run.chain.current_cost = math.inf   # and always accepted
        event = {}
        best, facts = run.chain._evaluate(Candidate("mutate", "test", kernel), event)
        return event, best, facts

    event, best, facts = offer(SOFTMAX_BASELINE)
    assert event["outcome"] == "best" and len(calls) == 1 and "proved_earlier" not in facts
    event, best, facts = offer(layout_variant(SOFTMAX_BASELINE))
    assert event["outcome"] == "best" and len(calls) == 1  # no second full check
    assert facts["proved_earlier"].endswith(facts["value_graph"])
    assert event["proved_earlier"] == facts["value_graph"]
    wrong = parse(render(SOFTMAX_BASELINE).replace(" / ", " * "), MNCORE2)
    event, best, facts = offer(wrong)
    # accepted as a step of the chain (the cost is infinite), never a best: not checked
    assert event["outcome"] == "accepted" and event["error"] > 0 and len(calls) == 1
