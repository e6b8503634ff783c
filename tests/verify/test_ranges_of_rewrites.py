"""The range analysis accepts what the search's exact rewrites make of a kernel it
accepts: a refusal there would be a false one (the rewritten kernel computes the same
values) and would block the search (docs/verification.md, section 2)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from stochopt.errors import StochoptError
from stochopt.leir import parse, render
from stochopt.machine import MNCORE2
from stochopt.transform.rewrite import RULES
from stochopt.verify.ranges import (
    OVERFLOW,
    ZERO_DIVISION,
    analyze,
    declared_ranges,
    range_refusal,
)
from tests.tiers import QUICK_AND_FULL
from tests.transform.test_moves_and_rules import LOSSY

REPO = Path(__file__).resolve().parents[2]
SPECS = sorted(p.stem for p in (REPO / "specs").glob("*.py"))
# the bundled specs and the corpus's wide-range ones, where a lost relation is a hazard
ALL_SPECS = [f"specs/{name}.py" for name in SPECS] + sorted(
    str(p.relative_to(REPO)) for p in (REPO / "tests/verify/corpus/specs").glob("*.py"))
EXACT = [r for r in RULES if r.name not in LOSSY]
WALKS, STEPS = 12, 6
# compound sequences: every ordered pair of rules, then random runs of 3 and 4 rules
SEQUENCES, LONGEST = 40, 4


def _rewrites(kernel, rng):
    """Every exact rule at every place it applies: (rule name, rewritten kernel)."""
    for rule in EXACT:
        for site in rule.find(kernel):
            try:
                out = rule.apply(kernel, site, MNCORE2, rng)
            except StochoptError:
                continue  # a rewrite the machine or the types refuse: not a kernel
            if out is not None:
                yield rule.name, out


def _refused(kernel, baseline, spec, how: str) -> str | None:
    hazard = range_refusal(kernel, baseline, spec)
    if hazard is None:
        return None
    return f"{how}: {hazard.describe()}\n{render(kernel)}"


@pytest.mark.slow
@pytest.mark.parametrize("name", SPECS)
def test_exact_rewrites_of_an_accepted_kernel_are_accepted(name, spec_and_baseline):
    spec, baseline = spec_and_baseline(f"specs/{name}.py")
    assert analyze(baseline, declared_ranges(spec)).poison is None
    rng = random.Random(0)
    applied = set()
    # one step: every rule at every site of the baseline
    for rule, out in _rewrites(baseline, rng):
        applied.add(rule)
        refused = _refused(out, baseline, spec, rule)
        assert refused is None, refused
    # a few steps: rules that apply only after others (a spread axis, tiles), each step
    # checked, so the rule that loses a relation is the one named
    for walk in range(WALKS):
        rng = random.Random(walk)
        current, path = baseline, []
        for _ in range(STEPS):
            # a rule first, then a place: a rule with one site (reduce_by_relayout) is
            # drawn as often as one with dozens
            options = [(rule, sites) for rule in EXACT for sites in [rule.find(current)]
                       if sites]
            if not options:
                break
            rule, sites = rng.choice(options)
            site = rng.choice(sites)
            try:
                out = rule.apply(current, site, MNCORE2, rng)
            except StochoptError:
                continue
            if out is None:
                continue
            current = out
            path.append(rule.name)
            applied.add(rule.name)
            refused = _refused(current, baseline, spec, " -> ".join(path))
            assert refused is None, refused
    assert applied, f"no exact rule applies to {name}"


def _apply_one(rule, kernel, rng):
    """The rule at a random one of its places, or None where it declines or is refused."""
    sites = rule.find(kernel)
    if not sites:
        return None
    try:
        return rule.apply(kernel, rng.choice(sites), MNCORE2, rng)
    except StochoptError:
        return None


@pytest.mark.parametrize("full", QUICK_AND_FULL)
def test_compound_sequences_of_exact_rules_are_accepted(full, spec_and_baseline):
    """Rules applied 2, 3 and 4 in a row (every ordered pair, then random runs), on every
    bundled spec and the corpus's wide-range specs; each step is checked, so the rule
    that loses a relation is named with the ones before it."""
    specs = ALL_SPECS if full else ["specs/attention_decode.py"]
    sequences = 0
    for path in specs:
        spec, baseline = spec_and_baseline(path)
        assert analyze(baseline, declared_ranges(spec)).poison is None, path
        rng = random.Random(0)
        for first in EXACT:
            once = _apply_one(first, baseline, rng)
            if once is None:
                continue
            for second in EXACT:
                twice = _apply_one(second, once, rng)
                if twice is not None:
                    sequences += 1
                    refused = _refused(twice, baseline, spec, f"{first.name} -> {second.name}")
                    assert refused is None, refused
        for run in range(SEQUENCES if full else SEQUENCES // 4):
            rng = random.Random(run)
            current, names = baseline, []
            for _ in range(3 + run % (LONGEST - 2)):
                options = [rule for rule in EXACT if rule.find(current)]
                if not options:
                    break
                rule = rng.choice(options)
                out = _apply_one(rule, current, rng)
                if out is None:
                    continue
                current = out
                names.append(rule.name)
                refused = _refused(current, baseline, spec, " -> ".join(names))
                assert refused is None, refused
    assert sequences > (300 if full else 40)


def _tiled_logsumexp(shift_parts: tuple[str, str], total: str, share: str) -> str:
    """Logsumexp over two tiles computed as separate values (as tile_reduction makes
    them from two matmuls): each tile shifted by `shift_parts`, summed as `total`."""
    return ("# spec: tests/verify/corpus/specs/logsumexp_wide.py\n"
            'def kernel(x: "f32[64,512] @ dram") -> "f32[64,1] @ dram":\n'
            '    a = load(x[0:64, 0:256], "(64,256)/((8_L2B,8_L1B),(256))") * 1.0\n'
            '    b = load(x[0:64, 256:512], "(64,256)/((8_L2B,8_L1B),(256))") * 1.0\n'
            "    ma = reduce_max(a, axis=1, keepdims=True)\n"
            "    mb = reduce_max(b, axis=1, keepdims=True)\n"
            "    m = maximum(ma, mb)\n"
            f"    ea = exp(a - {shift_parts[0]})\n"
            f"    eb = exp(b - {shift_parts[1]})\n"
            "    sa = reduce_sum(ea, axis=1, keepdims=True)\n"
            "    sb = reduce_sum(eb, axis=1, keepdims=True)\n"
            f"    s = {total}\n"
            f"    return store(m + log(s) + reduce_max({share}, axis=1, keepdims=True))\n")


def test_tiles_that_are_separate_values_keep_the_row_max_and_the_peak(spec_and_baseline):
    spec, baseline = spec_and_baseline("tests/verify/corpus/specs/logsumexp_wide.py")
    right = parse(_tiled_logsumexp(("m", "m"), "sa + sb", "ea / s"))
    found = analyze(right, declared_ranges(spec))
    assert found.hazards == [] and range_refusal(right, baseline, spec) is None


@pytest.mark.parametrize("shift_parts, total, share, kind", [
    (("ma", "ma"), "sa + sb", "ea / s", OVERFLOW),   # stale: the first tile's max
    (("mb", "m"), "sa + sb", "ea / s", OVERFLOW),    # the second tile's max for the first
    (("m", "m"), "sa", "ea / s", ZERO_DIVISION),    # a tile missing from the sum
    (("m", "m"), "sb + sb", "ea / s", ZERO_DIVISION),  # the same tile twice
    (("m", "m"), "sa + sa", "eb / s", ZERO_DIVISION),  # a share of a sum without it
])
def test_tiles_that_miss_a_part_lose_the_relation(shift_parts, total, share, kind,
                                                  spec_and_baseline):
    spec, baseline = spec_and_baseline("tests/verify/corpus/specs/logsumexp_wide.py")
    hazard = range_refusal(parse(_tiled_logsumexp(shift_parts, total, share)), baseline, spec)
    assert hazard is not None and hazard.kind == kind, hazard


def test_a_broadcast_that_adds_an_axis_drops_the_peak(spec_and_baseline):
    # the peak is one per row along axis 1; broadcast to (2, 64, 512), axis 1 is the
    # rows, whose sum per column holds no peak: exp(...) / that sum may divide by 0
    spec, baseline = spec_and_baseline("tests/verify/corpus/specs/logsumexp_wide.py")
    kernel = parse("# spec: tests/verify/corpus/specs/logsumexp_wide.py\n"
                   'def kernel(x: "f32[64,512] @ dram") -> "f32[64,1] @ dram":\n'
                   '    xs = load(x, "(64,512)/((8_L2B,8_L1B),(512))")\n'
                   "    e = exp(xs - reduce_max(xs, axis=1, keepdims=True))\n"
                   "    wide = broadcast_to(e, shape=(2, 64, 512))\n"
                   "    s = reduce_sum(wide, axis=1, keepdims=True)\n"
                   "    r = reduce_max(reduce_max(wide / s, axis=0), axis=1, keepdims=True)\n"
                   "    return store(r)\n")
    hazard = range_refusal(kernel, baseline, spec)
    assert hazard is not None and hazard.kind == ZERO_DIVISION, hazard
