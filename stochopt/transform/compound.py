"""Compound moves: a short plan applied at once and judged only at its end.

A single rewrite cannot cross a valley: tiling a reduced axis is slower until the tiles'
layouts are re-derived and the loads scheduled ahead; a hi/lo split is slower until its
casts move to the matmul; a relayout pushed into a group is slower until it folds into a
load. With beta = 60 a chain almost never accepts several slower kernels in a row, so the
whole sequence is proposed as one candidate (STOKE's extended moves, MetaSchedule's
composite transforms) and only the kernel at its end is costed and screened.

Each rule names its natural follow-ups in FOLLOW_UPS (data, one line per rule); a
follow-up is applied at a site *connected* to what the steps before it changed (a node
they made, or one reading or read by such a node), so the sequence works on one region
of the kernel instead of scattering. Beside the rules' own follow-ups, ``connected_k``
strings k rules drawn at random, each at a connected site. The moves are named units
with weights (COMPOUND_WEIGHTS, overridden by ChainConfig.move_weights like any move);
the chain's bandit learns what the ``compound`` arm is worth. A follow-up that does not
apply, declines or refuses is skipped: the plan is what was applied, and it replays.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

from stochopt.errors import StochoptError
from stochopt.leir.ir import Kernel
from stochopt.transform.choice import weighted_choice
from stochopt.transform.pattern import Match, Rule
from stochopt.transform.plan import RULES_BY_NAME, Step, applicable, apply_at, propose_step

# rule -> the rules that naturally follow it, applied in this order where they connect
FOLLOW_UPS: dict[str, tuple[str, ...]] = {
    # tiles of a reduced axis: re-derive their layouts, fold the relayouts into loads, reorder
    "tile_reduction": ("propagate_layout", "fold_relayout_into_load", "list_schedule"),
    # blocks of the output: spread each block's work, then issue loads ahead
    "tile_output": ("spread_over_more_of_the_tree", "list_schedule"),
    # a tile cut in two: its loads go ahead of the work around it
    "split_stored_tile": ("list_schedule",),
    # a hi/lo split: move its casts towards the matmul, where bf16 operands pay off
    "split_matmul_operand_hi_lo": ("hoist_movement", "hoist_movement",
                                   "bf16_matmul_operands", "drop_widening_cast_pair"),
    "round_matmul_operands_to_bf16": ("hoist_movement", "hoist_movement",
                                      "bf16_matmul_operands", "drop_widening_cast_pair"),
    # a movement pushed through an op: on into its group, then into the load
    "hoist_movement": ("hoist_movement", "bf16_matmul_operands", "propagate_layout",
                       "fold_relayout_into_load"),
    # a relayout pushed through a group, then folded into a load
    "propagate_layout": ("propagate_layout", "fold_relayout_into_load",
                         "drop_noop_relayout"),
    "relayout_instead_of_reload": ("propagate_layout", "fold_relayout_into_load"),
    "reduce_by_relayout": ("propagate_layout", "fold_relayout_into_load", "list_schedule"),
    # a new spread or gathered factor changes every stage's time: reorder
    "spread_over_more_of_the_tree": ("gather_spread_factor", "list_schedule"),
    "gather_spread_factor": ("spread_over_more_of_the_tree", "list_schedule"),
    # one load in longer runs: its sibling loads too, then reorder around the relayouts
    "load_in_longer_runs": ("load_in_longer_runs", "list_schedule"),
    # an epilogue spread by a relayout: its loads go ahead of the spread work
    "spread_group_by_relayout": ("list_schedule",),
    # K cut into batches: lay the batches out, then reorder
    "split_k_to_batch": ("propagate_layout", "spread_over_more_of_the_tree", "list_schedule"),
    "swap_matmul_orientation": ("cancel_transposes", "hoist_movement", "propagate_layout"),
    "store_parts": ("spread_over_more_of_the_tree", "list_schedule"),
    # one load for the pieces: spread the pieces' layouts again, then reorder
    "load_slices_together": ("spread_over_more_of_the_tree", "list_schedule"),
    "reuse_loaded_tensor": ("list_schedule",),
}

# how often each compound move is drawn when the compound arm proposes (data)
COMPOUND_WEIGHTS = {"follow_ups": 2.0, "connected_2": 1.0, "connected_3": 1.0,
                    "connected_4": 0.5}

HEAD_ATTEMPTS = 4  # first steps drawn before a compound move counts as refused

# rules whose site is the whole kernel: every site of theirs is connected
WHOLE_KERNEL = frozenset({"tile_output", "split_stored_tile", "list_schedule"})
# rules whose site is a tuple led by something other than the node it rewrites
SITE_NODE_AT = {"propagate_layout": 1}


def site_nodes(rule: str, site: Any) -> set[int] | None:
    """The nodes a site rewrites (None: the whole kernel)."""
    if rule in WHOLE_KERNEL:
        return None
    if isinstance(site, Match):
        return {site.root} | {v for v in site.bindings.values() if isinstance(v, int)}
    if isinstance(site, int):
        return {site}
    if rule in ("relayout_instead_of_reload", "load_slices_together"):
        return set(site)
    return {site[SITE_NODE_AT.get(rule, 0)]}


def changed_region(kernel: Kernel, original: frozenset) -> set[int]:
    """The nodes of ``kernel`` that ``original`` (a kernel's set of terms) does not
    have, with the nodes they read and the nodes that read them."""
    made = {i for i, t in enumerate(kernel.terms) if t not in original}
    region = set(made)
    for i, node in enumerate(kernel.nodes):
        if i in made:
            region.update(node.inputs)
        elif any(a in made for a in node.inputs):
            region.add(i)
    return region


def connected_sites(rule: Rule, kernel: Kernel, region: set[int]) -> list[tuple[int, Any]]:
    """(index, site) of the rule's sites that touch the region."""
    out = []
    for index, site in enumerate(rule.find(kernel)):
        nodes = site_nodes(rule.name, site)
        if nodes is None or nodes & region:
            out.append((index, site))
    return out


def _step_at(rule: Rule, kernel: Kernel, index: int, site: Any, rng: random.Random,
             machine) -> tuple[Step, Kernel] | None:
    """Apply the rule at one site (an option drawn where it takes one); None where it
    declines or refuses: a follow-up that does not work here is skipped."""
    option = None
    if rule.options is not None:
        options = rule.options(kernel, site, machine)
        if not options:
            return None
        option = rng.choice(options)
    try:
        out = apply_at(rule, kernel, site, option, machine)
    except StochoptError:
        return None
    return None if out is None else (Step(rule.name, index, option), out)


def _follow(kernel: Kernel, steps: list[Step], rules: list[str], rng: random.Random,
            machine, original: frozenset) -> Kernel:
    """Apply each rule in turn at a random site connected to what the plan changed so
    far; a rule with no connected site, or that does not apply there, is skipped."""
    for name in rules:
        rule = RULES_BY_NAME[name]
        sites = connected_sites(rule, kernel, changed_region(kernel, original))
        if not sites:
            continue
        index, site = rng.choice(sites)
        made = _step_at(rule, kernel, index, site, rng, machine)
        if made is not None:
            steps.append(made[0])
            kernel = made[1]
    return kernel


def follow_ups(kernel: Kernel, rng: random.Random, machine,
               weights: Mapping[str, float] | None = None,
               found: list[tuple[Rule, list]] | None = None
               ) -> tuple[list[Step], Kernel | None]:
    """A rule that has follow-ups, drawn by weight, then its follow-ups in order.
    ``found``: plan.applicable(kernel) when the caller has it."""
    found = applicable(kernel) if found is None else found
    heads = [(rule, sites) for rule, sites in found if rule.name in FOLLOW_UPS]
    step, out = propose_step(kernel, rng, machine, weights, found=heads)
    if out is None:
        return ([step] if step is not None else []), None
    steps = [step]
    return steps, _follow(out, steps, list(FOLLOW_UPS[step.rule]), rng, machine,
                          frozenset(kernel.terms))


def connected(k: int) -> Callable[..., tuple[list[Step], Kernel | None]]:
    """k rules drawn at random: the first anywhere, each next one by weight among the
    rules with a site connected to what the steps before changed."""
    def move(kernel: Kernel, rng: random.Random, machine,
             weights: Mapping[str, float] | None = None,
             found: list[tuple[Rule, list]] | None = None
             ) -> tuple[list[Step], Kernel | None]:
        step, out = propose_step(kernel, rng, machine, weights, found=found)
        if out is None:
            return ([step] if step is not None else []), None
        steps, original = [step], frozenset(kernel.terms)
        for _ in range(k - 1):
            region = changed_region(out, original)
            options = [(rule, sites) for rule in RULES_BY_NAME.values()
                       for sites in [connected_sites(rule, out, region)] if sites]
            if not options:
                break
            rule, sites = weighted_choice(rng, options, [r.name for r, _ in options],
                                          [r.weight for r, _ in options], weights)
            index, site = rng.choice(sites)
            made = _step_at(rule, out, index, site, rng, machine)
            if made is not None:
                steps.append(made[0])
                out = made[1]
        return steps, out
    return move


COMPOUNDS = {"follow_ups": follow_ups, "connected_2": connected(2),
             "connected_3": connected(3), "connected_4": connected(4)}


def propose_compound(kernel: Kernel, rng: random.Random, machine,
                     weights: Mapping[str, float] | None = None,
                     found: list[tuple[Rule, list]] | None = None
                     ) -> tuple[str, Kernel | None, list[Step] | None]:
    """A compound move drawn by weight: (its name and the rules it applied, e.g.
    ``follow_ups:tile_reduction+propagate_layout``, the kernel at its end or None where
    its first step declines, the plan from ``kernel`` to it). A first step that refuses
    raises StochoptError, its ``move`` naming the compound move. ``found``:
    plan.applicable(kernel) when the caller has it."""
    names = tuple(COMPOUNDS)
    name = weighted_choice(rng, names, names, [COMPOUND_WEIGHTS[n] for n in names], weights)
    for attempt in range(HEAD_ATTEMPTS):  # a plan is worth its end: redraw a refused head
        try:
            steps, out = COMPOUNDS[name](kernel, rng, machine, weights, found)
            break
        except StochoptError as e:
            if attempt == HEAD_ATTEMPTS - 1:
                e.move = f"{name}:{getattr(e, 'move', '?')}"
                raise
    label = f"{name}:{'+'.join(s.rule for s in steps) or 'none'}"
    return label, out, steps if out is not None else None
