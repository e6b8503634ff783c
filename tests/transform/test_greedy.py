"""Greedy: the rewrite rules to a fixpoint, the best improving rewrite at each step."""

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from stochopt import load_spec
from stochopt.backend.cost import cost
from stochopt.lower import lower
from stochopt.machine import MNCORE2, load_machine
from stochopt.transform import greedy
from stochopt.transform.greedy import greedy_fixpoint
from stochopt.verify import check


@pytest.fixture(scope="module")
def vector_add():
    spec = load_spec("specs/vector_add.py")
    return spec, lower(spec)


@pytest.mark.slow
def test_each_step_lowers_the_cycles_and_a_seed_gives_one_result(vector_add):
    spec, kernel = vector_add
    first = greedy.greedy_fixpoint(kernel, spec, MNCORE2, examples=20, seed=0)
    again = greedy.greedy_fixpoint(kernel, spec, MNCORE2, examples=20, seed=0)
    assert first.verified and first.steps
    cycles = [cost(kernel, MNCORE2).cycles] + [c for _, c in first.steps]
    assert all(later < earlier for earlier, later in zip(cycles, cycles[1:], strict=False))
    assert first.cycles == cycles[-1] == cost(first.kernel, MNCORE2).cycles
    assert (first.steps, first.cycles) == (again.steps, again.cycles)


@pytest.mark.slow
def test_a_result_the_full_check_refuses_gives_back_the_start_kernel(vector_add, monkeypatch):
    spec, kernel = vector_add
    real = greedy.check

    def refuse(*args, **kwargs):
        return replace(real(*args, **kwargs), equivalent=False)
    monkeypatch.setattr(greedy, "check", refuse)
    result = greedy.greedy_fixpoint(kernel, spec, MNCORE2, examples=20, seed=0)
    assert result.kernel is kernel and result.steps == []
    assert result.cycles == cost(kernel, MNCORE2).cycles
    assert result.verified  # the start kernel is the baseline: nothing left to prove


def test_a_refused_descent_is_steered_by_its_counterexample_and_made_again(monkeypatch):
    """mla_decode at seed 1: the descent's first step rounds p @ c_kv's operands to bf16,
    the full check refuses it (1.05 of the tolerance), and greedy gave back the lowering.
    Now the counterexample joins the screening inputs and the descent starts again."""
    machine = load_machine("small")
    spec = load_spec("specs/softmax.py")
    baseline = lower(spec, machine)
    wrong, right = object(), object()
    counterexample = {"x": np.full((128, 1024), 3.0, np.float32)}
    seen: list[int] = []   # screening inputs at each descent

    def descend(kernel, machine, screening_error, rng, max_steps):
        seen.append(len(screening_error.__self__.inputs))
        made = wrong if len(seen) == 1 else right
        return greedy.Descent(made, 7, [("some_rule", 7)], 5, [])

    def check(kernel, *args, **kwargs):
        refused = SimpleNamespace(inputs=counterexample)
        return SimpleNamespace(equivalent=kernel is right,
                               counterexample=None if kernel is right else refused)
    monkeypatch.setattr(greedy, "descend", descend)
    monkeypatch.setattr(greedy, "check", check)
    result = greedy_fixpoint(baseline, spec, machine, examples=10)
    assert result.kernel is right and result.steps == [("some_rule", 7)]
    assert seen == [seen[0], seen[0] + 1] and result.candidates == 10

    def refuse(kernel, *args, **kwargs):  # every descent refused: the start kernel
        return SimpleNamespace(equivalent=False,
                               counterexample=SimpleNamespace(inputs=counterexample))
    seen.clear()
    monkeypatch.setattr(greedy, "check", refuse)
    result = greedy_fixpoint(baseline, spec, machine, examples=10)
    assert result.kernel is baseline and result.steps == [] and len(seen) == 1 + greedy.REDESCENTS


def test_greedy_steps_only_downhill_and_its_kernel_passes_the_check():
    machine = load_machine("small")
    spec = load_spec("specs/softmax.py")
    baseline = lower(spec, machine)
    start = cost(baseline, machine).cycles
    result = greedy_fixpoint(baseline, spec, machine, max_steps=2, examples=10)
    assert result.steps, "no rewrite lowered softmax's cycles on the small machine"
    assert result.verified
    after = [cycles for _, cycles in result.steps]
    assert after == sorted(after, reverse=True) and after[0] < start
    assert result.cycles == after[-1] == cost(result.kernel, machine).cycles
    assert check(result.kernel, spec, examples=10, machine=machine,
                 baseline=baseline).equivalent
