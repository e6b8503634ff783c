"""The prompt that asks for a transform plan: the kernel shown, the menu of rewrites that
apply to it now (stochopt.transform.plan.menu, each with the kernel's cycles after it),
the plans tried before, the request's focus.

It carries no language reference, so it is a fraction of a kernel prompt. Its levels
keep the richest that fits an eighth of the model's context: the spec, the kernel with
its profile, a line per rule of the menu and 40 entries; then the kernel and 24 entries;
then 12 entries alone. A model of an 8k context (a small one, read slowly on a CPU) gets
the last; one of 32k and more the first.
The menu lists the entries the cost model likes best first (plan.menu), and a shorter
level keeps the first of them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from functools import lru_cache

from stochopt.backend.cost import cost
from stochopt.leir.render import render
from stochopt.llm.forms import MAX_PLAN_STEPS
from stochopt.llm.prompt import Prompt, PromptBuilder, fill, profile_text
from stochopt.llm.variants import FOCI
from stochopt.transform.plan import RULES_BY_NAME, Entry, menu, render_menu
from stochopt.tuning.memory import plan_examples_text

PLAN_SHARE = 1 / 8      # of the model's context a plan prompt may take (speed, not room)
MENU_SECONDS = 5.0      # estimating the menu's cycles stops here (the rest unestimated)
SITE_CHARS = 72         # a site's statement is cut here in the menu


@dataclass(frozen=True)
class PlanLevel:
    name: str
    menu: int            # entries listed
    spec: bool           # the spec's source
    kernel: bool         # the kernel's text
    profile: bool        # its profile (the critical path)
    rules: bool          # one line per rule of the menu: its algebra
    failures: int        # plans tried before, shown


PLAN_LEVELS = (
    PlanLevel("full", 40, True, True, True, True, 4),
    PlanLevel("kernel and menu", 24, False, True, False, False, 2),
    PlanLevel("menu only", 12, False, False, False, False, 1),
)


@dataclass
class PlanPrompt(Prompt):
    entries: tuple[Entry, ...] = ()     # the menu the prompt lists (its numbers)

    @property
    def level_name(self) -> str:
        return PLAN_LEVELS[self.level].name


class PlanPrompts:
    """Plan prompts for the spec and machine of a PromptBuilder (its templates too)."""

    def __init__(self, builder: PromptBuilder) -> None:
        self.b = builder
        self.system = fill(builder.templates["plan_system.txt"], {
            "machine_name": builder.machine.name, "max_steps": MAX_PLAN_STEPS})

    def build(self, kernel, failures: list[dict], budget_tokens: int, estimate,
              focus: str = "open", context_tokens: int | None = None) -> PlanPrompt:
        """The richest plan prompt whose estimate fits the budget and, given the model's
        context, PLAN_SHARE of it (a model of a small context reads slowly: it gets the
        smallest prompt that still fits its whole budget). Its ``entries`` are the menu it
        lists; the last level, marked as not fitting, when none fits the budget."""
        profile = cost(kernel, self.b.machine)
        text = render(kernel)
        share = budget_tokens if context_tokens is None else min(
            budget_tokens, int(PLAN_SHARE * context_tokens))
        prompt = None
        for index, level in enumerate(PLAN_LEVELS):
            entries = _menu(text, self.b.machine, level.menu)
            messages = [{"role": "system", "content": self.system},
                        {"role": "user", "content": self.user(kernel, text, profile, entries,
                                                              failures, level, focus)}]
            tokens = estimate(messages)
            last = index == len(PLAN_LEVELS) - 1
            prompt = PlanPrompt(messages, index, tokens, tokens <= budget_tokens, entries)
            if tokens <= share or (last and prompt.fits):
                break
        return prompt

    def user(self, kernel, text: str, profile, entries, failures: list[dict],
             level: PlanLevel, focus: str) -> str:
        b = self.b
        busiest = profile.bottleneck()
        bottleneck = f"{busiest} ({100 * profile.busy_fraction()[busiest]:.0f}% busy)"
        kernel_section = ""
        if level.kernel:   # (without its "# spec: PATH" line: the spec is shown above)
            body = "\n".join(line for line in text.splitlines()
                             if not line.startswith("# spec:"))
            kernel_section = f"\n```leir\n{body}\n```\n"
        if level.profile:
            kernel_section += ("\nProfile (* marks the critical path):\n\n"
                               f"{profile_text(kernel, profile, critical_only=True)}\n")
        return fill(b.templates["plan.txt"], {
            "spec_name": b.spec.name,
            "spec_section": f"\n```python\n{b.spec.source.strip()}\n```\n" if level.spec
            else "",
            "kernel_cycles": profile.cycles, "baseline_cycles": b.baseline_cycles,
            "roofline_cycles": b.roofline_cycles, "bottleneck": bottleneck,
            "kernel_section": kernel_section,
            "rules": rules_text(entries) if level.rules else "",
            "menu": render_menu(entries, profile.cycles) if entries else
            "(no transform applies to this kernel)",
            "failures": plan_failures_text(failures[-level.failures:]),
            "examples": plan_examples_text(b.examples, kernel),
            "focus": FOCI.get(focus, FOCI["open"]).replace("$bottleneck", bottleneck),
            "max_steps": MAX_PLAN_STEPS,
        })


@lru_cache(maxsize=16)
def _menu(text: str, machine, limit: int) -> tuple[Entry, ...]:
    """The menu of a kernel (by its text), with each site's statement cut short."""
    from stochopt.leir.parser import parse

    entries = menu(parse(text, machine), machine, limit=limit,
                   deadline=time.monotonic() + MENU_SECONDS)
    return tuple(replace(e, where=_short(e.where)) for e in entries)


def _short(where: str) -> str:
    """A site in at most about SITE_CHARS characters: the statement is cut, never what
    follows it (the axis, factor, level or tile count that tell entries apart)."""
    if len(where) <= SITE_CHARS or not where.startswith("`"):
        return where
    end = where.index("`", 1) if "`" in where[1:] else len(where)
    statement, rest = where[1:end], where[end + 1:]
    room = max(32, SITE_CHARS - len(rest) - 5)
    return f"`{statement[:room]}...`{rest}" if len(statement) > room else where


def rules_text(entries) -> str:
    """One line per rule the menu names: what it does."""
    names = sorted({e.step.rule for e in entries})
    if not names:
        return ""
    lines = [f"- {n}: {RULES_BY_NAME[n].algebra}" for n in names]
    return "\n# The transforms on the menu\n\n" + "\n".join(lines) + "\n"


def plan_failures_text(failures: list[dict]) -> str:
    """Plans tried before that did not beat the best, one line each: the transforms they
    applied (their numbers belong to an older menu), the outcome and why."""
    lines = []
    for f in failures:
        steps = ", ".join(f.get("rules") or []) or "(no step applied)"
        cycles = f" ({f['cycles']} cycles)" if f.get("cycles") else ""
        lines.append(f"- {steps}: {f['outcome']}{cycles}: {str(f.get('error') or '')[:200]}")
    return "\n".join(lines) or "None yet."
