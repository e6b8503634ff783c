"""The three forms a reply may take, what each request asks for, and reading plans.

- ``plan``: entry numbers from the menu of rewrites that apply to the kernel shown
  (stochopt.transform.plan.menu); every step keeps meaning, so a plan whose first step
  applies is a well-typed kernel. Cheap to ask for (no language reference) and to read.
- ``edit``: SEARCH/REPLACE blocks applied to the kernel shown.
- ``kernel``: the whole kernel.

Each request's form is part of its variant, drawn by ``form_weights``: what the form has
yielded so far in this proposer (well-typed and accepted candidates per request) per
token it cost, from a prior that says what is known before the first reply (a plan is
well-typed by construction and its prompt carries no language reference), with a floor
so no form is ever given up. A server on this machine is asked for the cheapest form
until its first reply, then for the forms whose replies can come back in time
(``forms_in_time``): one long reply would hold it, and the chains' cores, for minutes.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass

from stochopt.errors import ParseError

FORMS = ("plan", "edit", "kernel")
MAX_PLAN_STEPS = 6
# before any reply: the well-typed share expected of a form, and its relative cost (the
# kernel and edit prompts carry the language reference and fill most of the context; a
# plan prompt takes at most an eighth of it: four times less is on the safe side)
PRIOR_YIELD = {"plan": 1.0, "edit": 0.5, "kernel": 0.5}
PRIOR_COST = {"plan": 1.0, "edit": 4.0, "kernel": 4.0}
PRIOR_REQUESTS = 1.0     # how many requests the prior weighs as
ACCEPTED_WEIGHT = 2.0    # an accepted candidate counts this many well-typed ones
FLOOR = 0.03             # every allowed form keeps at least this share (as the bandit's arms)
# a server on this machine answers one request at a time, and a reply generated under a
# grammar costs it a third of a second a token (SmolLM2-135M on 2 cores: one edit request,
# the first it took, held it for a whole 5-minute run and no plan was answered): there,
# a form is asked only while its reply is expected back within this share of the time left
LOCAL_TIME_SHARE = 0.5


@dataclass
class FormYield:
    """What one form's requests have yielded in this proposer."""
    requests: int = 0
    tokens: int = 0          # over the requests whose usage came back
    measured: int = 0        # requests whose tokens are known
    well_typed: int = 0
    accepted: int = 0
    answered: int = 0        # requests whose reply came (not from the cache)
    seconds: float = 0.0     # their time in flight, together

    def value(self, form: str) -> float:
        gained = self.well_typed + ACCEPTED_WEIGHT * self.accepted
        return (PRIOR_YIELD[form] * PRIOR_REQUESTS + gained) / (PRIOR_REQUESTS + self.requests)


def form_weights(yields: dict[str, FormYield], allowed=FORMS) -> dict[str, float]:
    """Each allowed form's share of the next requests: its yield per request over its
    tokens per request (measured once known, else the prior's ratio to what is known)."""
    forms = [f for f in FORMS if f in allowed]
    if len(forms) == 1:
        return {forms[0]: 1.0}
    measured = [(y.tokens / y.measured) / PRIOR_COST[f] for f, y in yields.items()
                if f in forms and y.measured]
    unit = sum(measured) / len(measured) if measured else 1.0
    raw = {}
    for f in forms:
        y = yields.get(f) or FormYield()
        cost = y.tokens / y.measured if y.measured else PRIOR_COST[f] * unit
        raw[f] = y.value(f) / max(cost, 1e-9)
    total = sum(raw.values())
    spare = 1.0 - FLOOR * len(forms)
    return {f: FLOOR + spare * raw[f] / total for f in forms}


def expected_latency(form: str, yields: dict[str, FormYield]) -> float | None:
    """Seconds a reply of this form is expected to take: its own replies' mean, else the
    slowest answered form's mean scaled by the prior costs; None before any reply."""
    own = yields.get(form)
    if own is not None and own.answered:
        return own.seconds / own.answered
    known = [y.seconds / y.answered / PRIOR_COST[f] for f, y in yields.items() if y.answered]
    return PRIOR_COST[form] * max(known) if known else None


def forms_in_time(allowed, yields: dict[str, FormYield], seconds_left: float | None
                  ) -> tuple[tuple[str, ...], dict[str, str]]:
    """The allowed forms a server on this machine is asked for now: before any reply the
    cheapest alone (its replies measure the server), then each whose expected latency is
    within LOCAL_TIME_SHARE of the time left (``seconds_left`` None: no deadline); the
    cheapest allowed form always. With them, a line for each form that waits though its
    latency is known, saying why."""
    forms = [f for f in FORMS if f in allowed]
    cheapest = min(forms, key=PRIOR_COST.__getitem__)
    now, waiting = [], {}
    for f in forms:
        t = expected_latency(f, yields)
        if f == cheapest or (t is not None and (
                seconds_left is None or t <= LOCAL_TIME_SHARE * seconds_left)):
            now.append(f)
        elif t is not None:
            waiting[f] = (f"a reply in the {f} form is expected to take {t:.0f} s on this "
                          f"server, more than {LOCAL_TIME_SHARE:.0%} of the "
                          f"{max(seconds_left, 0):.0f} s left: {f} requests wait")
    return tuple(now), waiting


def draw_form(rng: random.Random, weights: dict[str, float]) -> str:
    forms = list(weights)
    return rng.choices(forms, [weights[f] for f in forms])[0]


# -- what each form asks for: the last paragraph of the prompt ------------------------------

def answer_text(form: str, constrained: bool) -> str:
    """The instructions that end a kernel or edit prompt ($answer in user.txt)."""
    if form == "edit":
        head = ("Answer with edits of the kernel above, each written as" if constrained else
                "Answer with one or more edits of the kernel above in a code block, each "
                "written as")
        return (f"{head}\n\n<<<<<<< SEARCH\na line copied exactly from the kernel above\n"
                f"=======\nthe lines that replace it\n>>>>>>> REPLACE\n\nKeep every name "
                f"the later lines use; only LEIR statements in the replacement.")
    if constrained:
        return ("Answer with the whole new kernel only, starting with its def line: the "
                "same def name, parameters and return annotation, every op written out.")
    return ("Answer with exactly one fenced code block, ```leir ... ```, holding the whole "
            "new kernel: the same def name, parameters and return annotation as the kernel "
            "above, every op written out, no imports and nothing that is not LEIR. Explain "
            "your idea in at most three sentences before the block.")


# -- reading a plan -------------------------------------------------------------------------

# a list of numbers on a line of its own, or after the word steps or plan (not any list
# in the text: "f32[128,1024]" is no plan)
_LIST = re.compile(r"(?:\b(?:steps|plan)\b[^\[\]\n]{0,12}|^[ \t]*)"
                   r"\[\s*(\d+(?:\s*,\s*\d+)*)\s*,?\s*\]", re.I | re.M)


def read_plan(text: str) -> list[int]:
    """The entry numbers of a plan reply: the first JSON object with "steps" (or
    "plan"), else a bracketed list of numbers on a line of its own or after the word
    steps or plan; ParseError when there is none.
    Constrained or free, every plan reply is read here."""
    text = re.sub(r"<think>.*?(?:</think>|\Z)", "", text, flags=re.S)
    decoder = json.JSONDecoder()
    for m in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, m.start())
        except ValueError:
            continue
        steps = _steps_of(value)
        if steps is not None:
            return steps
    m = _LIST.search(text)
    if m:
        return [int(n) for n in re.findall(r"\d+", m.group(1))]
    raise ParseError("the reply holds no plan",
                     hint='answer with JSON only: {"steps": [entry numbers from the menu]}')


def _steps_of(value) -> list[int] | None:
    if not isinstance(value, dict):
        return None
    steps = value.get("steps", value.get("plan"))
    if not isinstance(steps, list) or not steps:
        return None
    out = []
    for s in steps:
        if isinstance(s, bool):
            return None
        if isinstance(s, int):
            out.append(s)
        elif isinstance(s, str) and s.strip().isdigit():
            out.append(int(s))
        elif isinstance(s, dict) and isinstance(s.get("entry"), int):
            out.append(s["entry"])
        else:
            return None
    return out
