"""The LLM's prompts: plain-text templates in prompts/ filled with named fields.

    system.txt      the reference part of every request: the LEIR reference and the
                    machine's cost rules (docs/leir.md and docs/machine.md, compacted,
                    shortened or replaced by the cheat sheet when the context is small)
    user.txt        what changes: the spec, the best kernel with its profile and roofline,
                    the request's focus, the recent failures, what to answer with
    failure.txt     one recent failure, repeated into user.txt's $failures
    cheatsheet.txt  the one-page reference for small contexts
    plan_system.txt, plan.txt   the request for a transform plan (plan_prompt.py)

and the reading of the answers they ask for: fenced code blocks holding a whole kernel,
or SEARCH/REPLACE edits of the kernel shown.

Templates use string.Template syntax ($name or ${name}; $$ is a dollar sign). A
``--prompts DIR`` may replace any of them; a field a template names that does not exist
is an error at startup, with the fields that do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from string import Template

from stochopt.backend.cost import Profile, cost, roofline_of_kernel
from stochopt.errors import ParseError, StochoptError
from stochopt.leir.render import render
from stochopt.llm.forms import answer_text
from stochopt.llm.variants import FOCI
from stochopt.tuning.memory import examples_text

ROOT = Path(__file__).resolve().parents[2]   # the repository (prompts/ and docs/ live here)
DEFAULT_PROMPTS = ROOT / "prompts"

FIELDS = {
    "system.txt": {
        "leir_reference": "docs/leir.md, compacted",
        "machine_reference": "docs/machine.md, compacted",
        "machine_name": "the machine preset's name",
        "machine_summary": "the machine's constants, one line",
    },
    "user.txt": {
        "spec_name": "the spec's name",
        "spec_source": "the spec file's source",
        "kernel": "the best kernel's text",
        "kernel_name": "its def name",
        "kernel_cycles": "its cycles",
        "baseline_cycles": "the baseline kernel's cycles",
        "roofline_cycles": "the spec's roofline in cycles",
        "roofline_share": "roofline / cycles, as a percentage",
        "speedup": "baseline / cycles, e.g. 3.44x",
        "bottleneck": "the busiest resource and its busy share",
        "critical_path_cycles": "the longest chain of dependent work",
        "peak_local_bytes": "the most PE memory live at once",
        "profile": "one line per op that works: resource, start, end, cycles",
        "resources": "busy cycles of each resource",
        "failures": "the recent failed candidates, each through failure.txt",
        "machine_name": "the machine preset's name",
        "focus": "what this request asks for (its variant's focus)",
        "earlier_best": "an earlier, slower best kernel for contrast, or empty",
        "examples": "slow -> fast pairs from earlier runs (the tuning database), or empty",
        "answer": "what the reply must hold: the whole kernel, or edits (the form)",
    },
    "failure.txt": {
        "number": "1, 2, ...", "outcome": "parse_error, invalid, wrong, rejected or accepted",
        "cycles": "' (N cycles)' when it was costed, else empty",
        "error": "the error, the counterexample or why it was rejected",
        "code": "the kernel text it came from (cut when long)",
    },
    "cheatsheet.txt": {
        "ops": "one line per LEIR op: its signature and meaning",
    },
    "plan_system.txt": {
        "machine_name": "the machine preset's name",
        "max_steps": "the most steps a plan may have",
    },
    "plan.txt": {
        "spec_name": "the spec's name",
        "spec_section": "the spec's source in a python block, or empty",
        "kernel_cycles": "the kernel's cycles", "baseline_cycles": "the baseline's cycles",
        "roofline_cycles": "the spec's roofline in cycles",
        "bottleneck": "the busiest resource and its busy share",
        "kernel_section": "the kernel in a leir block and its profile, or empty",
        "rules": "one line per transform on the menu, or empty",
        "menu": "the numbered transforms that apply now, with cycles after each",
        "failures": "plans tried before that did not beat the best",
        "examples": "earlier runs' plans for kernels like this one (the tuning database), "
                    "a line each, or empty",
        "focus": "what this request asks for (its variant's focus)",
        "max_steps": "the most steps a plan may have",
    },
}

MAX_KERNEL_CHARS = 48_000     # longer kernels are cut in the prompt (they rarely are)
MAX_PROFILE_ROWS = 40         # the costliest ops when there are more
MAX_ERROR_CHARS = 800
MAX_CODE_CHARS = 2500
REFERENCE_LIMIT = 20_000      # characters per compacted document
# for scripts and for developers, not for writing kernels
DROP_SECTIONS = {"machine.md": ("The profile",), "leir.md": ("Adding an op",)}


def load_templates(directory: str | Path | None = None) -> dict[str, str]:
    """The three templates: from ``directory`` where it has them, else the defaults.
    Checks every field they name."""
    if directory is not None and not Path(directory).is_dir():
        raise StochoptError(f"--prompts {directory} is not a directory",
                            hint="give a folder holding system.txt, user.txt or failure.txt")
    out = {}
    for name, fields in FIELDS.items():
        path = Path(directory) / name if directory else None
        if path is None or not path.is_file():
            path = DEFAULT_PROMPTS / name
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise StochoptError(f"cannot read prompt template {path}: {e}",
                                hint="pass --prompts DIR with system.txt, user.txt and "
                                     "failure.txt") from None
        template = Template(text)
        if not template.is_valid():
            raise StochoptError(f"prompt template {path} has a bad $-placeholder",
                                hint="write $name or ${name}, and $$ for a dollar sign")
        unknown = sorted(set(template.get_identifiers()) - set(fields))
        if unknown:
            raise StochoptError(f"prompt template {path} names unknown field(s) "
                                f"{', '.join('$' + u for u in unknown)}",
                                hint=f"{name} may use {', '.join('$' + f for f in fields)}")
        out[name] = text
    return out


def fill(template: str, fields: dict) -> str:
    return Template(template).substitute({k: str(v) for k, v in fields.items()})


# -- reference documents ---------------------------------------------------------------
@cache
def reference_text(name: str, limit: int = REFERENCE_LIMIT) -> str:
    """docs/<name>, compacted for a prompt (or a line saying it is missing)."""
    path = ROOT / "docs" / name
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return f"(docs/{name} is not available in this installation)"
    return compact_markdown(text, DROP_SECTIONS.get(name, ()), limit)


def compact_markdown(text: str, drop_sections=(), limit: int = REFERENCE_LIMIT) -> str:
    """Markdown with less to read and the same facts: no shell or TOML examples, no
    table rules, no listed sections, single blank lines; cut at ``limit`` characters
    on a section boundary."""
    text = re.sub(r"\A# [^\n]*\n", "", text)     # the page title: the template has its own
    text = re.sub(r"^```(?:toml|sh|bash|console|shell)\n.*?^```\n?", "", text,
                  flags=re.M | re.S)
    sections = re.split(r"(?m)^(?=#{1,3} )", text)
    kept = [s for s in sections
            if not any(re.match(rf"#+ (\d+\. )?{re.escape(d)}\b", s) for d in drop_sections)]
    lines = []
    for line in "".join(kept).splitlines():
        if re.fullmatch(r"\s*\|?(\s*:?-{3,}:?\s*\|)+\s*:?-*:?\s*", line):
            continue                            # | --- | --- |
        if re.match(r"\s{4}stochopt ", line):
            continue                            # command lines for people
        line = line.rstrip()
        if line.startswith("|") and line.endswith("|"):
            line = line[1:-1].strip()
        if not line and lines and not lines[-1]:
            continue
        lines.append(line)
    out = "\n".join(lines).strip()
    if len(out) > limit:
        cut = out.rfind("\n#", 0, limit)
        out = out[:cut if cut > limit // 2 else limit].rstrip() + "\n(cut here for length)"
    return out


# -- the messages of one request, in layers that fit a token budget --------------------
@dataclass(frozen=True)
class Level:
    """How much one prompt carries. LEVELS go from everything to the least that still
    lets a model write a kernel; a prompt takes the first level that fits its budget."""
    name: str
    reference: str        # full: the two documents; focused: the sections and ops that
                          # matter here; cheatsheet: one page; brief: it with those ops only
    profile: str          # full: the costliest ops; critical: the critical path only
    failures: int         # the most recent failures shown (the variant picks which)
    code_chars: int       # of each failed candidate's text
    error_chars: int
    earlier_best: bool    # room for an earlier best kernel
    example_chars: int    # of the slow -> fast examples from earlier runs


LEVELS = (
    Level("full", "full", "full", 4, MAX_CODE_CHARS, MAX_ERROR_CHARS, True, 8000),
    Level("fewer failures", "full", "full", 2, 1200, MAX_ERROR_CHARS, True, 6000),
    Level("critical path", "full", "critical", 2, 1200, MAX_ERROR_CHARS, False, 4000),
    Level("focused reference", "focused", "critical", 2, 1200, 600, False, 3000),
    Level("cheat sheet", "cheatsheet", "critical", 2, 1200, 600, False, 2500),
    Level("minimal", "brief", "critical", 1, 600, 300, False, 0),
)


@dataclass
class Prompt:
    messages: list[dict]
    level: int                  # index into LEVELS
    estimate_tokens: int        # the safe estimate it was sized with
    fits: bool                  # False: even the last level is over the budget

    @property
    def level_name(self) -> str:
        return LEVELS[self.level].name


class PromptBuilder:
    """Makes the messages for a spec on a machine at any level of LEVELS."""

    def __init__(self, templates: dict[str, str], spec, machine, baseline,
                 roofline_cycles: int | None = None, examples: list[dict] | None = None
                 ) -> None:
        self.templates, self.spec, self.machine = templates, spec, machine
        self.examples = examples or []   # stochopt/tuning/memory.py's pairs
        self.baseline_cycles = cost(baseline, machine).cycles
        self.roofline_cycles = roofline_cycles or _roofline(spec, machine, baseline)
        self.summary = ", ".join(f"{k} {v}" for k, v in machine.summary().items()
                                 if k != "name")
        self._systems: dict[tuple, str] = {}

    def build(self, kernel, failures: list[dict], budget_tokens: int, estimate,
              focus: str = "open", earlier: tuple[int, str] | None = None,
              min_level: int = 0, answer: str = "") -> Prompt:
        """The richest prompt from ``min_level`` on whose estimate (``estimate(messages)``)
        fits ``budget_tokens``; the last level, marked as not fitting, when none does."""
        profile = cost(kernel, self.machine)
        prompt = None
        for index in range(min(min_level, len(LEVELS) - 1), len(LEVELS)):
            prompt = self.at_level(index, kernel, failures, budget_tokens, estimate, focus,
                                   earlier, profile, answer)
            if prompt.fits:
                break
        return prompt

    def at_level(self, index: int, kernel, failures: list[dict], budget_tokens: int,
                 estimate, focus: str = "open", earlier: tuple[int, str] | None = None,
                 profile=None, answer: str = "") -> Prompt:
        """The prompt at LEVELS[index], and whether it fits the budget."""
        level = LEVELS[index]
        profile = profile or cost(kernel, self.machine)
        used = {n.op for n in kernel.nodes}
        messages = [
            {"role": "system", "content": self.system(level.reference, used, focus)},
            {"role": "user", "content": self.user(kernel, profile, failures, level, focus,
                                                  earlier, answer)}]
        tokens = estimate(messages)
        return Prompt(messages, index, tokens, tokens <= budget_tokens)

    def messages(self, kernel, failures: list[dict]) -> list[dict]:
        """The fullest prompt, whatever its size."""
        return self.build(kernel, failures, 1 << 60, lambda m: 0).messages

    def system(self, reference: str = "full", used_ops=(), focus: str = "open") -> str:
        key = (reference,) if reference == "full" else (
            reference, frozenset(used_ops), focus)
        if key not in self._systems:
            ops = frozenset(used_ops) | FOCUS_OPS.get(focus, frozenset()) | {"load", "store"}
            if reference == "full":
                leir, machine = reference_text("leir.md"), reference_text("machine.md")
            elif reference == "focused":
                leir = focused_reference("leir.md", LEIR_SECTIONS, ops)
                machine = focused_reference("machine.md", MACHINE_SECTIONS, None)
            else:
                leir = cheatsheet(self.templates["cheatsheet.txt"],
                                  ops if reference == "brief" else None)
                machine = ""
            self._systems[key] = fill(self.templates["system.txt"], {
                "leir_reference": leir, "machine_reference": machine,
                "machine_name": self.machine.name, "machine_summary": self.summary})
        return self._systems[key]

    def user(self, kernel, profile, failures: list[dict], level: Level = LEVELS[0],
             focus: str = "open", earlier: tuple[int, str] | None = None,
             answer: str = "") -> str:
        text = render(kernel)
        if len(text) > MAX_KERNEL_CHARS:
            text = text[:MAX_KERNEL_CHARS] + "\n# (kernel cut here for length)"
        busiest = profile.bottleneck()
        bottleneck = f"{busiest} ({100 * profile.busy_fraction()[busiest]:.0f}% busy)"
        fields = {
            "spec_name": self.spec.name, "spec_source": self.spec.source.strip(),
            "kernel": text.rstrip(), "kernel_name": kernel.name,
            "kernel_cycles": profile.cycles, "baseline_cycles": self.baseline_cycles,
            "roofline_cycles": self.roofline_cycles,
            "roofline_share": f"{100 * self.roofline_cycles / max(1, profile.cycles):.1f}%",
            "speedup": f"{self.baseline_cycles / max(1, profile.cycles):.2f}x",
            "bottleneck": bottleneck,
            "critical_path_cycles": profile.critical_path_cycles,
            "peak_local_bytes": profile.peak_local_bytes,
            "profile": profile_text(kernel, profile, critical_only=level.profile != "full"),
            "resources": resources_text(profile),
            "failures": self.failures(failures[-level.failures:] if level.failures else [],
                                      level),
            "machine_name": self.machine.name,
            "focus": FOCI.get(focus, FOCI["open"]).replace("$bottleneck", bottleneck),
            "earlier_best": self.earlier_best(earlier) if level.earlier_best else "",
            "examples": examples_text(self.examples, kernel, level.example_chars),
            "answer": answer or answer_text("kernel", constrained=False),
        }
        return fill(self.templates["user.txt"], fields)

    def earlier_best(self, earlier: tuple[int, str] | None) -> str:
        if earlier is None:
            return ""
        cycles, text = earlier
        return (f"\n# An earlier best kernel: {cycles} cycles\n\nFor contrast, what the "
                f"search kept before the kernel above:\n\n```leir\n"
                f"{text[:MAX_CODE_CHARS].rstrip()}\n```\n")

    def failures(self, failures: list[dict], level: Level = LEVELS[0]) -> str:
        if not failures:
            return "None yet."
        parts = []
        for i, f in enumerate(failures, 1):
            error = str(f.get("error") or "")
            code = f.get("code") or "(no code)"
            if len(code) > level.code_chars:
                code = code[:level.code_chars] + "\n# (cut here for length)"
            parts.append(fill(self.templates["failure.txt"], {
                "number": i, "outcome": f["outcome"],
                "cycles": f" ({f['cycles']} cycles)" if f.get("cycles") else "",
                "error": error[:level.error_chars], "code": code.rstrip()}).rstrip())
        return "\n\n".join(parts)


# -- the shorter references --------------------------------------------------------------
# values, levels, layouts, layout rules, syntax, errors, ops
LEIR_SECTIONS = frozenset({1, 2, 3, 4, 5, 6, 8})
MACHINE_SECTIONS = frozenset({0, 1, 2, 3})   # the intro, the machine, op costs, scheduler
# ops worth describing for a focus even when the kernel does not use them yet
FOCUS_OPS = {"precision": frozenset({"cast", "matmul"}),
             "tiling": frozenset({"slice", "concat"}),
             "relayout": frozenset({"relayout", "broadcast_to"}),
             "layout": frozenset({"relayout"}), "fusion": frozenset({"where", "maximum"})}


@cache
def focused_reference(name: str, sections: frozenset, ops: frozenset | None) -> str:
    """docs/<name> compacted, with only the numbered sections listed (0: the text before
    the first) and, in the op list, only ``ops`` (all when None)."""
    text = reference_text(name, limit=1 << 20)
    kept, number = [], 0
    for part in re.split(r"(?m)^(?=#{1,3} )", text):
        m = re.match(r"#{1,3} (\d+)\. ", part)
        if m:
            number = int(m.group(1))
        if number not in sections:
            continue
        if ops is not None and part.startswith("### "):
            part = _only_ops(part, ops)
        kept.append(part)
    return "".join(kept).strip()


def _only_ops(section: str, ops) -> str:
    """An op-list section with the bullets of other ops removed ('' when none is left)."""
    lines = section.splitlines()
    out, keep, any_kept = [lines[0]], True, False
    for line in lines[1:]:
        m = re.match(r"- `(\w+)\(", line)
        if m:
            keep = m.group(1) in ops
            any_kept |= keep
        elif line and not line.startswith(" "):
            keep = any_kept   # a note after the bullets: kept with them
        if keep:
            out.append(line)
    return "\n".join(out) + "\n" if any_kept else ""


def cheatsheet(template: str, ops=None) -> str:
    """The one-page reference: cheatsheet.txt with the one-line doc of every op (of
    ``ops`` only, when given)."""
    from stochopt.leir.ops import OPS
    shown = [op for op in OPS.values() if op.name != "input" and (ops is None or
                                                                  op.name in ops)]
    others = "" if ops is None else (
        "\n(other ops: " + ", ".join(o.name for o in OPS.values()
                                     if o.name != "input" and o not in shown) + ")")
    return fill(template, {"ops": "\n".join(f"- {op.doc}" for op in shown) + others})


def profile_text(kernel, profile: Profile, critical_only: bool = False) -> str:
    """The kernel's statements with what each costs, in program order; the costliest
    MAX_PROFILE_ROWS when there are more (only the critical path when asked)."""
    critical = set(profile.critical_path)
    statements = _statements(kernel)
    ops = [o for o in profile.ops if o.op != "input"]
    shown = ops
    if critical_only:
        shown = [o for o in ops if o.index in critical]
    if len(shown) > MAX_PROFILE_ROWS:
        keep = {o.index for o in sorted(ops, key=lambda o: -o.cycles)[:MAX_PROFILE_ROWS]}
        shown = [o for o in ops if o.index in keep]
    lines = ["    start      end   cycles  resource     statement"]
    for o in shown:
        mark = "*" if o.index in critical else " "
        what = statements.get(o.index) or f"{o.op} (node {o.index})"
        lines.append(f"{mark}{o.start:>7} {o.end:>8} {o.cycles:>8}  "
                     f"{o.resource or 'free':<11}  {what}")
    if len(shown) < len(ops):
        kind = "ops off the critical path" if critical_only else "cheaper ops"
        lines.append(f"  ({len(ops) - len(shown)} {kind} not shown)")
    return "\n".join(lines)


def _statements(kernel) -> dict[int, str]:
    """Node index -> its line in render(kernel) (render writes one line per node, in
    order, the returned store inline when it is last)."""
    body = render(kernel).splitlines()
    body = body[next(i for i, line in enumerate(body) if line.startswith("def ")) + 1:]
    last = len(kernel.nodes) - 1
    order = [i for i, n in enumerate(kernel.nodes)
             if n.op != "input" and not i == kernel.output == last]
    if kernel.output == last:
        order.append(last)
    if len(body) < len(order):
        return {}
    return {i: line.strip() for i, line in zip(order, body, strict=False)}


def resources_text(profile: Profile) -> str:
    frac = profile.busy_fraction()
    return ", ".join(f"{r} {b} cycles ({100 * frac[r]:.0f}%)" for r, b in profile.busy.items())


def _roofline(spec, machine, baseline) -> int:
    try:
        from stochopt.lower.roofline import spec_roofline
        return spec_roofline(spec, machine).cycles
    except StochoptError:
        return roofline_of_kernel(baseline, machine)


# -- reading replies: the answer format the prompt asks for -------------------------------
LANGUAGES = {"", "leir", "python", "py", "python3"}
_OPEN = re.compile(r"[ \t]*(`{3,}|~{3,})[ \t]*([\w.+-]*)")
MAX_EDITS = 32
EDIT_START = re.compile(r"^<{5,}[ \t]*SEARCH", re.M)
EDIT = re.compile(r"^<{5,}[ \t]*SEARCH[^\n]*\n(.*?)^={5,}[^\n]*\n(.*?)^>{5,}[ \t]*REPLACE[^\n]*$",
                  re.M | re.S)


def code_blocks(text: str) -> list[str]:
    """The LEIR/python/plain fenced blocks of a reply (an unclosed last one included);
    a reply with no fence but a def or edits is taken whole. Reasoning in <think> tags
    is skipped."""
    text = re.sub(r"<think>.*?(?:</think>|\Z)", "", text, flags=re.S)
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = _OPEN.fullmatch(lines[i])
        if m is None:
            i += 1
            continue
        fence, lang = m.group(1), m.group(2).lower()
        j = i + 1
        while j < len(lines) and not _closes(lines[j], fence):
            j += 1
        if lang in LANGUAGES and "\n".join(lines[i + 1:j]).strip():
            blocks.append("\n".join(lines[i + 1:j]) + "\n")
        i = j + 1
    if not blocks:
        start = re.search(r"^(# spec:.*\n)?def |^<{5,}[ \t]*SEARCH", text, re.M)
        if start:
            blocks.append(text[start.start():])
    return blocks


def _closes(line: str, fence: str) -> bool:
    s = line.strip()
    return len(s) >= len(fence) and set(s) == {fence[0]}


def apply_edits(base: str, block: str) -> str:
    """Apply SEARCH/REPLACE edits to the kernel text in order; ParseError when a SEARCH
    part is not in the kernel."""
    if len(EDIT_START.findall(block)) > MAX_EDITS:  # also keeps the regex below linear-ish
        raise ParseError(f"more than {MAX_EDITS} edits in one block",
                         hint="answer with the whole kernel instead")
    text = base
    for k, m in enumerate(EDIT.finditer(block), 1):
        search, replace = m.group(1), m.group(2)
        if search and search in text:
            text = text.replace(search, replace, 1)
            continue
        lines = text.splitlines(keepends=True)
        want = [s.strip() for s in search.splitlines()]
        at = next((i for i in range(len(lines) - len(want) + 1)
                   if want and [x.strip() for x in lines[i:i + len(want)]] == want), None)
        if at is None:
            first = next((w for w in want if w), "")
            raise ParseError(f"edit {k}: its SEARCH lines are not in the kernel "
                             f"(first: {first[:120]!r})",
                             hint="copy them exactly from the kernel shown, or answer with "
                                  "the whole kernel")
        text = "".join(lines[:at]) + replace + "".join(lines[at + len(want):])
    return text
