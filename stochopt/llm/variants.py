"""Prompt variants: what each LLM request asks for, so that requests in flight together
differ (AlphaEvolve and ShinkaEvolve both owe much of their gain to varied prompts).

A variant is drawn per request: the form of the reply it asks for (a transform plan,
edits or a whole kernel, weighted by what each has yielded: forms.py), a focus (the kind
of change it asks for), which of the recent failures it shows, whether it shows an
earlier best for contrast, and its temperature. Requests started together never share a
focus while there are foci left, and their temperatures are spread over the range. The
transcript records the variant and the report counts what each form and focus produced.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

from stochopt.llm.forms import draw_form

# name -> the paragraph the prompt's task section opens with ($focus). The bottleneck
# focus names the resource the profile says is busiest.
FOCI: dict[str, str] = {
    "bottleneck": "Focus on the bottleneck: the profile says $bottleneck. Take work off "
                  "that resource: fewer bytes moved, fewer passes, or the work moved to "
                  "an idle resource.",
    "layout": "Focus on layouts: spread the busy axes over more of the tree (more PEs "
              "and MABs working at once), or choose layouts that make the following ops "
              "need no relayout.",
    "fusion": "Focus on fusion: fewer ops and fewer passes over the data. Combine "
              "elementwise ops, reuse values instead of recomputing them, and avoid "
              "storing and reloading.",
    "tiling": "Focus on tiling: cut the work into tiles (slices of the inputs loaded "
              "separately, stored tiles joined with concat) so that loads, compute and "
              "stores of different tiles overlap.",
    "precision": "Focus on precision: matmul operands in bf16 (cast before the matmul; "
                 "it still accumulates in f32) run far more MACs per cycle. Keep the "
                 "result within the spec's tolerance.",
    "relayout": "Focus on movement: remove relayouts and replications that are not "
                "needed, or replace a costly relayout with a cheaper layout chosen at "
                "load time.",
    "latency": "Focus on the critical path: shorten the longest chain of dependent ops "
               "so that more work runs at the same time.",
    "open": "Any change that makes the kernel faster is welcome: choose what the profile "
            "suggests.",
}
FAILURE_CHOICES = ("recent", "varied", "sampled")   # which failures the prompt shows
DEFAULT_TEMPERATURES = (0.2, 1.0)


@dataclass
class Variant:
    focus: str
    failures: str            # recent: the latest; varied: one per outcome; sampled: at random
    earlier_best: bool       # show an earlier, slower best beside the current one
    temperature: float | None
    form: str = "kernel"     # plan, edit or kernel (forms.py)

    def to_json(self) -> dict:
        return asdict(self)


def draw_variants(rng: random.Random, count: int, busy_foci: set[str],
                  temperatures: tuple[float, float] | None,
                  form_weights: dict[str, float] | None = None) -> list[Variant]:
    """``count`` variants for requests starting now; their foci differ from each other and
    from ``busy_foci`` (those of requests in flight) while there are foci left; each
    form drawn by ``form_weights`` (none: the whole kernel, as before forms)."""
    free = [f for f in FOCI if f not in busy_foci]
    rng.shuffle(free)
    others = list(FOCI)
    foci = [free[i] if i < len(free) else rng.choice(others) for i in range(count)]
    temps: list[float | None] = [None] * count
    if temperatures is not None:
        low, high = temperatures
        # stratified: one draw in each of ``count`` equal slices of the range, shuffled
        temps = [round(low + (high - low) * (i + rng.random()) / count, 3)
                 for i in range(count)]
        rng.shuffle(temps)
    forms = [draw_form(rng, form_weights) if form_weights else "kernel" for _ in foci]
    return [Variant(focus, rng.choice(FAILURE_CHOICES), rng.random() < 0.3, temp, form)
            for focus, temp, form in zip(foci, temps, forms, strict=True)]


def pick_failures(failures: list[dict], how: str, limit: int,
                  rng: random.Random) -> list[dict]:
    """The failures a variant shows, oldest first."""
    if limit <= 0 or not failures:
        return []
    if how == "varied":   # the latest of each outcome, so one kind of error does not crowd
        latest: dict[str, dict] = {}
        for f in failures:
            latest[f["outcome"]] = f
        chosen = [f for f in failures if latest.get(f["outcome"]) is f]
        return chosen[-limit:]
    if how == "sampled" and len(failures) > limit:
        keep = sorted(rng.sample(range(len(failures)), limit))
        return [failures[i] for i in keep]
    return failures[-limit:]


def temperature_range(setting, model: str) -> tuple[float, float] | None:
    """The range temperatures are drawn from: a fixed --temperature is a range of one
    value; unset, DEFAULT_TEMPERATURES, except for reasoning models, which refuse any
    temperature but their own."""
    from stochopt.llm.context import is_reasoning_model

    if isinstance(setting, int | float):
        return (float(setting), float(setting))
    if isinstance(setting, list | tuple):
        return (float(setting[0]), float(setting[1]))
    return None if is_reasoning_model(model) else DEFAULT_TEMPERATURES
