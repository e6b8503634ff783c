"""Transform plans: short sequences of named rewrites, each at a numbered site.

One vocabulary for everything that strings rewrites together: the LLM chooses a plan
from a menu of what applies to the current kernel, a compound move proposes one, the
lookahead searches over them by the cost model alone, greedy's descent records the one
it took, and a run keeps the plan of its best kernel so that it can be replayed on the
same spec with other shapes.

A ``Step`` names a rule of ``rewrite.RULES``, a site by its index in ``rule.find(kernel)``
of the kernel the earlier steps made, and the rule's option where it takes one (the
divisor of a spread or gathered factor). Rules keep meaning, so every plan whose steps
apply gives a kernel with the spec's meaning; a step that no longer applies ends the
plan, and the steps before it are the result.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stochopt.backend.cost import cost
from stochopt.errors import StochoptError
from stochopt.leir.ir import Kernel
from stochopt.leir.render import expression, value_names
from stochopt.transform.choice import weighted_choice
from stochopt.transform.pattern import Match, Rule
from stochopt.transform.rewrite import RULES

RULES_BY_NAME: dict[str, Rule] = {r.name: r for r in RULES}
MAX_PLAN_STEPS = 8


class PlanError(StochoptError):
    """A step that does not apply to the kernel it is given."""


@dataclass(frozen=True)
class Step:
    rule: str
    site: int                  # index into rule.find(kernel) of the kernel it applies to
    option: int | None = None  # the rule's parameter, for rules that take one

    def to_json(self) -> list:
        return [self.rule, self.site] + ([self.option] if self.option is not None else [])

    @staticmethod
    def from_json(data: Any) -> Step:
        """A step as to_json wrote it: ``[rule, site]`` or ``[rule, site, option]``."""
        ok = (isinstance(data, list | tuple) and len(data) in (2, 3)
              and isinstance(data[0], str)
              and all(isinstance(v, int) and not isinstance(v, bool) for v in data[1:]))
        if not ok:
            raise PlanError(f"a plan step is [rule, site] or [rule, site, option], got "
                            f"{data!r:.80}")
        return Step(data[0], data[1], data[2] if len(data) == 3 else None)

    def describe(self) -> str:
        option = "" if self.option is None else f", option {self.option}"
        return f"{self.rule} at site {self.site}{option}"


def plan_units(steps: Sequence[Step]) -> float:
    """The work of applying a plan, in kernels made and costed (Rule.units each)."""
    return sum(RULES_BY_NAME[s.rule].units for s in steps) or 1.0


def plan_to_json(steps: Sequence[Step]) -> list[list]:
    return [s.to_json() for s in steps]


def plan_from_json(data: Any) -> list[Step]:
    if not isinstance(data, list):
        raise PlanError(f"a plan is a list of steps, got {type(data).__name__}")
    return [Step.from_json(s) for s in data]


def rule_named(name: str) -> Rule:
    rule = RULES_BY_NAME.get(name)
    if rule is None:
        raise PlanError(f"no rewrite rule is named {name!r}",
                        hint="rules: " + ", ".join(RULES_BY_NAME))
    return rule


def options_at(rule: Rule, kernel: Kernel, site: Any, machine) -> list:
    """The option values the rule takes at a site; [None] for a rule that takes none."""
    return rule.options(kernel, site, machine) if rule.options is not None else [None]


def apply_step(kernel: Kernel, step: Step, machine) -> Kernel:
    """The kernel the step makes; PlanError where it does not apply (no such site or
    option, the rule declines, or the result would break a constraint)."""
    rule = rule_named(step.rule)
    sites = rule.find(kernel)
    if not 0 <= step.site < len(sites):
        raise PlanError(f"{step.rule} has {len(sites)} site(s) here, not site {step.site}")
    site = sites[step.site]
    options = options_at(rule, kernel, site, machine)
    if step.option not in options:
        raise PlanError(f"{step.rule} at site {step.site} takes option "
                        f"{' or '.join(map(str, options)) or 'none here'}, not {step.option}")
    try:
        out = apply_at(rule, kernel, site, step.option, machine)
    except StochoptError as e:
        raise PlanError(f"{step.rule} at site {step.site}: {e}") from None
    if out is None:
        raise PlanError(f"{step.rule} at site {step.site} changes nothing here")
    return out


def apply_at(rule: Rule, kernel: Kernel, site: Any, option, machine) -> Kernel | None:
    """The rule at a site it found, with the option where it takes one (None where it
    declines; StochoptError where it refuses)."""
    if rule.options is None:
        return rule.apply(kernel, site, machine, None)
    return rule.apply(kernel, site, machine, None, option=option)


@dataclass
class PlanResult:
    kernel: Kernel
    applied: list[Step] = field(default_factory=list)
    stopped: str | None = None   # why the plan ended before its last step
    skipped: list[str] = field(default_factory=list)  # with skip: the steps left out


def apply_plan(kernel: Kernel, steps: Sequence[Step], machine,
               skip: bool = False) -> PlanResult:
    """Apply the steps in order, each to the kernel the ones before made; the first step
    that does not apply ends the plan with those before it. With ``skip`` (replaying a
    plan made on another kernel: the same spec at other shapes) such a step is skipped,
    with why, and the rest go on; ``applied`` then replays to the result."""
    result = PlanResult(kernel)
    for number, step in enumerate(steps, 1):
        try:
            result.kernel = apply_step(result.kernel, step, machine)
        except PlanError as e:
            why = f"step {number} ({step.rule}): {e}"
            if not skip:
                result.stopped = why
                break
            result.skipped.append(why)
            continue
        result.applied.append(step)
    return result


def replay_plan(kernel: Kernel, steps: Sequence[Step], machine) -> PlanResult:
    """apply_plan with skip: a plan from another kernel, the steps that apply."""
    return apply_plan(kernel, steps, machine, skip=True)


# -- every step, and one drawn at random ---------------------------------------------

def all_steps(kernel: Kernel, machine, rng: random.Random | None = None,
              rules: Sequence[Rule] = RULES) -> Iterator[tuple[Rule, Any, Step]]:
    """Every rule at every site, in RULES order, not yet applied: (the rule, the site,
    the step). A rule with options takes one drawn from ``rng`` (as the rule itself would
    draw it), or with no ``rng`` is tried once per option; a site where it has no option
    to take gives one step with option None (the rule declines there)."""
    for rule in rules:
        for index, site in enumerate(rule.find(kernel)):
            if rule.options is None:
                yield rule, site, Step(rule.name, index)
                continue
            options = rule.options(kernel, site, machine)
            chosen = options if rng is None else [rng.choice(options)] if options else []
            if not chosen:
                yield rule, site, Step(rule.name, index)
            for option in chosen:
                yield rule, site, Step(rule.name, index, option)


def made_by(rule: Rule, kernel: Kernel, site: Any, step: Step, machine
            ) -> Kernel | None | StochoptError:
    """The kernel a step of all_steps makes: None where the rule declines, the
    StochoptError where it refuses."""
    if rule.options is not None and step.option is None:
        return None
    try:
        return apply_at(rule, kernel, site, step.option, machine)
    except StochoptError as e:
        return e


def every_step(kernel: Kernel, machine, rng: random.Random | None = None,
               rules: Sequence[Rule] = RULES
               ) -> Iterator[tuple[Step, Kernel | None | StochoptError]]:
    """all_steps, each applied: (the step, the kernel it makes, or None where the rule
    declines, or the StochoptError that refused it)."""
    for rule, site, step in all_steps(kernel, machine, rng, rules):
        yield step, made_by(rule, kernel, site, step, machine)


def applicable(kernel: Kernel, rules: Sequence[Rule] = RULES) -> list[tuple[Rule, list]]:
    """The rules that apply to the kernel, each with its sites."""
    return [(r, s) for r in rules for s in [r.find(kernel)] if s]


def draw_step(kernel: Kernel, found: list[tuple[Rule, list]], rng: random.Random, machine,
              weights: Mapping[str, float] | None = None) -> tuple[Rule, Any, Step] | None:
    """The rewrite proposer's draw among ``found`` (applicable's list): a rule by
    weight, a site and an option uniformly. (rule, site, step); the step's option is None
    where the rule has no option to take here. None: no rule applies."""
    if not found:
        return None
    rule, sites = weighted_choice(rng, found, [r.name for r, _ in found],
                                  [r.weight for r, _ in found], weights)
    index = rng.randrange(len(sites))
    if rule.options is None:
        return rule, sites[index], Step(rule.name, index)
    options = rule.options(kernel, sites[index], machine)
    return rule, sites[index], Step(rule.name, index, rng.choice(options) if options else None)


def random_step(kernel: Kernel, rng: random.Random, machine,
                weights: Mapping[str, float] | None = None, rules: Sequence[Rule] = RULES
                ) -> Step | None:
    """A rule drawn by weight among those that apply here, a site and an option drawn
    uniformly: the rewrite proposer's draw, as a step (None: no rule applies)."""
    drawn = draw_step(kernel, applicable(kernel, rules), rng, machine, weights)
    if drawn is None:
        return None
    rule, _, step = drawn
    return None if rule.options is not None and step.option is None else step


def propose_step(kernel: Kernel, rng: random.Random, machine,
                 weights: Mapping[str, float] | None = None, rules: Sequence[Rule] = RULES,
                 found: list[tuple[Rule, list]] | None = None
                 ) -> tuple[Step | None, Kernel | None]:
    """The rewrite proposer: a random step (random_step's draw) and the kernel it makes
    (None where the rule declines; StochoptError, its ``move`` the rule, where it
    refuses). (None, None) when no rule applies. ``found``: ``applicable(kernel, rules)``
    when the caller has it already."""
    found = applicable(kernel, rules) if found is None else found
    drawn = draw_step(kernel, found, rng, machine, weights)
    if drawn is None:
        return None, None
    rule, site, step = drawn
    if rule.options is not None and step.option is None:
        return step, None  # no option to take at this site: the rule declines
    try:
        return step, apply_at(rule, kernel, site, step.option, machine)
    except StochoptError as e:
        e.move = rule.name
        raise


def propose_rewrite(kernel: Kernel, rng: random.Random, machine,
                    weights: Mapping[str, float] | None = None) -> tuple[str, Kernel | None]:
    """Apply a random rule (drawn by weight among those that apply) at a random place:
    (its name, the kernel, or None where it declines). The draw is propose_step's, which
    also names the step."""
    step, out = propose_step(kernel, rng, machine, weights)
    return ("none", None) if step is None else (step.rule, out)


# -- the menu: what applies to a kernel now, numbered ----------------------------------

@dataclass(frozen=True)
class Entry:
    number: int          # 1, 2, ...: what a plan names
    step: Step
    where: str           # the site in the kernel's own words
    cycles: int | None   # the kernel's cycles after this step alone, where estimated


def menu(kernel: Kernel, machine, *, estimate: bool = True, limit: int | None = None,
         deadline: float | None = None) -> list[Entry]:
    """Every step that applies to the kernel now, numbered from 1. With ``estimate``
    each is applied and costed (the kernel's cycles after it), and steps that refuse are
    left out; past ``deadline`` (time.monotonic) the rest are listed unestimated. The
    estimated steps come first, cheapest first (ties and the unestimated in rule order):
    a model that answers "1, 2" takes what the cost model likes best, not what the rules
    happen to list first. With ``limit``, only the first ``limit`` are kept."""
    names = value_names(kernel)
    found: list[tuple[Step, int | None]] = []
    for step, out in every_step(kernel, machine):
        if deadline is not None and time.monotonic() > deadline:
            estimate = False
        if not estimate:
            if out is not None and not isinstance(out, StochoptError):
                found.append((step, None))
            continue
        if out is None or isinstance(out, StochoptError):
            continue
        try:
            found.append((step, cost(out, machine).cycles))
        except StochoptError:  # does not fit the machine: not worth a model's choice
            continue
    ranked = sorted(range(len(found)), key=lambda i: (found[i][1] is None,
                                                      found[i][1] or 0, i))
    found = [found[i] for i in ranked[:limit]]
    sites = {name: RULES_BY_NAME[name].find(kernel) for name in {s.rule for s, _ in found}}
    return [Entry(number, step, describe_site(kernel, step.rule, sites[step.rule][step.site],
                                              names), cycles)
            for number, (step, cycles) in enumerate(found, 1)]


def render_menu(entries: Sequence[Entry], cycles_now: int | None = None) -> str:
    """One line per entry: its number, rule, site, option and estimated effect."""
    lines = []
    for e in entries:
        option = "" if e.step.option is None else f" [option {e.step.option}]"
        effect = ""
        if e.cycles is not None:
            effect = f" -> {e.cycles} cycles"
            if cycles_now:
                effect += f" ({(e.cycles - cycles_now) / cycles_now:+.0%})"
        lines.append(f"{e.number}. {e.step.rule} at {e.where}{option}{effect}")
    return "\n".join(lines)


def _node_text(kernel: Kernel, i: int, names: list[str]) -> str:
    if kernel.nodes[i].op == "input":
        return f"input {names[i]}"
    text = f"{names[i]} = {expression(kernel.nodes[i], names)}"
    return text if len(text) <= 90 else text[:87] + "..."


def describe_site(kernel: Kernel, rule: str, site: Any, names: list[str] | None = None
                  ) -> str:
    """A site in the kernel's own words: the statement it rewrites, and what else the
    site fixes (an axis, a tile count, a level)."""
    names = names or value_names(kernel)
    if isinstance(site, Match):
        return f"`{_node_text(kernel, site.root, names)}`"
    if rule == "split_stored_tile":
        store = kernel.nodes[kernel.output].args[site]
        return f"stored tile {site} of the output (`{_node_text(kernel, store, names)}`), in 2"
    if isinstance(site, int):
        return f"`{_node_text(kernel, site, names)}`"
    if rule == "tile_output":
        axis, tiles = site
        return f"the output, axis {axis}, in {tiles} tiles"
    if rule == "tile_reduction":
        node, tiles = site
        return f"`{_node_text(kernel, node, names)}` (its reduced axis) in {tiles} tiles"
    if rule == "spread_over_more_of_the_tree":
        node, axis, factor, level = site
        axis += len(kernel.nodes[node].type.shape)
        return f"`{_node_text(kernel, node, names)}`, axis {axis}, factor {factor} over {level}"
    if rule in ("gather_spread_factor", "load_in_longer_runs"):
        node, axis, factor = site
        return f"`{_node_text(kernel, node, names)}`, axis {axis}, spread factor {factor}"
    if rule == "propagate_layout":
        _, node = site
        return f"`{_node_text(kernel, node, names)}`"
    if rule == "split_matmul_operand_hi_lo":
        node, side = site
        return f"`{_node_text(kernel, node, names)}`, operand {side}"
    if rule == "load_slices_together":
        return " and ".join(f"`{_node_text(kernel, i, names)}`" for i in site)
    if rule == "relayout_instead_of_reload":
        _, node = site
        return f"`{_node_text(kernel, node, names)}`"
    return repr(site)[:80]
