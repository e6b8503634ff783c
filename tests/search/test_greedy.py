"""The greedy peer (benchmarks run it beside the search): it only takes rewrites that
lower the cycle count, and what it returns passes the full check."""

from stochopt.backend.cost import cost
from stochopt.lower import lower
from stochopt.machine import load_machine
from stochopt.search.greedy import greedy_fixpoint
from stochopt.spec import load_spec
from stochopt.verify import check


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
