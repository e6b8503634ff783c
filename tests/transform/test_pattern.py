"""The pattern matcher: what a pattern matches, what a site binds, where a rewrite puts
its new nodes; and the rules table built on it."""

import inspect

import pytest

from stochopt.leir import parse, render
from stochopt.leir.rules import Const
from stochopt.machine import MNCORE2
from stochopt.transform.local_rules import ARITHMETIC, DTYPES, MOVEMENT
from stochopt.transform.pattern import (
    Bound,
    Local,
    Match,
    Pat,
    PatternMatcher,
    new,
    rewrite_at,
)
from stochopt.transform.rewrite import LOCAL, MATCHER, RULES

KERNEL = """
def k(a: "f32[16,64] @ dram", b: "f32[1,64] @ dram") -> "f32[16,64] @ dram":
    x = load(a, "(16,64)/((16),(64))")
    s = load(b, "(1,64)/((1),(64))")
    y = x + x
    z = x + s
    w = (z * 2.0) / 4.0
    return store(w + y)
"""

X = Pat.tensor("x")


def _bound(k, index):
    return Bound(index, k.nodes[index])


def test_at_least_ten_rules_are_pattern_entries_and_all_are_in_rules():
    entries = [e.name for e in MOVEMENT + DTYPES + ARITHMETIC]
    assert len(entries) >= 10
    in_rules = [r.name for r in RULES if r.pattern is not None]
    assert sorted(in_rules) == sorted(entries) == sorted(LOCAL)


def test_every_rule_takes_the_same_arguments():
    for rule in RULES:
        params = list(inspect.signature(rule.apply).parameters)
        # (kernel, site, machine, rng), and option= for the rules that list options
        assert len(params) == 4 + (rule.options is not None), (rule.name, params)
        assert (params[4:] == ["option"]) == (rule.options is not None), rule.name


def test_a_name_bound_twice_must_bind_the_same_node():
    k = parse(KERNEL)
    same = PatternMatcher([Local("double", "x + x -> 2x", Pat("add", X, X), lambda m: m.x)])
    roots = [m.root for m in same.sites(k)["double"]]
    assert [k.nodes[i].name for i in roots] == ["y"]


def test_alternatives_bind_the_first_that_matches():
    k = parse(KERNEL)
    scale = Pat.any(Pat("mul", X, Pat.const("c")), Pat("div", X, Pat.const("c")), name="s")
    matcher = PatternMatcher([Local("scale", "x*c", scale, lambda m: m.x)])
    found = matcher.sites(k)["scale"]
    assert [(m.s.op, m.c.value) for m in found] == [("mul", 2.0), ("div", 4.0)]
    assert found[1].x.op == "mul"  # the division's tensor is the product


def test_the_matcher_finds_what_each_pattern_matches_alone():
    k = parse(KERNEL)
    for entry in MATCHER.entries:
        alone = PatternMatcher([entry]).sites(k)[entry.name]
        assert [m.root for m in MATCHER.sites(k)[entry.name]] == [m.root for m in alone]
    # only the entries whose root op is the node's are tried there
    assert {e.name for e, _ in MATCHER.by_op["div"]} >= {"fold_scales",
                                                       "divide_by_constant_as_multiply"}
    assert "fold_scales" not in {e.name for e, _ in MATCHER.by_op.get("add", [])}


def test_a_site_carries_its_bindings_and_belongs_to_its_kernel():
    k = parse(KERNEL)
    rule = LOCAL["fold_scales"]
    (site,) = rule.find(k)
    assert isinstance(site, Match)
    assert (site.c1.value, site.c2.value, site.x.op) == (2.0, 4.0, "add")
    out = rule.apply(k, site, MNCORE2, None)
    assert "z * 0.5" in render(out)
    with pytest.raises(ValueError, match="another kernel"):
        rule.apply(parse(KERNEL), site, MNCORE2, None)
    with pytest.raises(AttributeError, match="binds no"):
        site.nowhere  # noqa: B018


def test_new_nodes_go_just_before_the_root_which_keeps_its_name():
    k = parse(KERNEL)
    root = next(i for i, n in enumerate(k.nodes) if n.name == "z")
    x, s = k.nodes[root].args
    # z = x + s  ->  z = neg(neg(x)) + s
    inner = new("neg", x, like=_bound(k, x))
    out = rewrite_at(k, root, new("add", new("neg", inner, like=inner), s,
                                  like=_bound(k, root)), MNCORE2)
    ops = [(n.op, n.name) for n in out.nodes]
    at = ops.index(("add", "z"))
    assert [op for op, _ in ops[at - 2:at]] == ["neg", "neg"]
    assert len(out.nodes) == len(k.nodes) + 2


def test_a_bound_node_as_replacement_takes_the_roots_readers():
    k = parse(KERNEL.replace("(z * 2.0) / 4.0", "relayout(z, \"(16,64)/((16),(64))\")"))
    rule = LOCAL["drop_noop_relayout"]
    (site,) = rule.find(k)
    out = rule.apply(k, site, MNCORE2, None)
    assert "relayout" not in render(out)


def test_a_root_pattern_needs_an_op():
    with pytest.raises(ValueError, match="op at its root"):
        PatternMatcher([Local("any", "x -> x", Pat.var("x"), lambda m: m.x)])


def test_a_pattern_may_not_bind_a_name_a_match_holds():
    with pytest.raises(ValueError, match="root"):
        PatternMatcher([Local("r", "x -> x", Pat("neg", Pat.tensor("root")), lambda m: m.x)])


def test_patterns_print_their_shape():
    assert repr(LOCAL["fold_relayout_into_load"].pattern) == "relayout(load(x))"
    assert repr(Pat("add", X, Pat.const("c"))) == "add(x, c)"


def test_literals_are_sources_too():
    k = parse(KERNEL)
    root = next(i for i, n in enumerate(k.nodes) if n.name == "w")
    out = rewrite_at(k, root, _bound(k, root).but(k.nodes[root].args[0], Const(0.25),
                                                  op="mul"), MNCORE2)
    assert "* 0.25" in render(out)
