"""Constrained decoding: what the endpoint takes, and how a constraint goes in a request.

Servers spell constraints differently. A JSON schema goes in ``response_format``, as
OpenAI, vLLM, llama.cpp's server and Ollama take it (``{"type": "json_schema",
"json_schema": {...}}``) or as llama-cpp-python's server takes it (``{"type":
"json_object", "schema": ...}``); a GBNF grammar goes in ``grammar`` (llama.cpp,
llama-cpp-python) or in ``structured_outputs`` (vLLM). Each is a *dialect*.

``--structured`` (the ``structured`` setting):
- ``auto``: one small probe per dialect at the start, each asking for a text the model
  would never write unconstrained; a dialect counts only where the reply obeys it
  (a server that ignores the field is found out, not only one that refuses it). Plans
  go as a JSON schema (else as a grammar), kernels and edits as a grammar.
- ``json``: plans as a JSON schema; kernels and edits as free text.
- ``grammar``: every form as a grammar (plans too: plan_grammar).
- ``off``: free text.

Where the server refuses a dialect (an error that names the field), the next dialect of
the family is tried, then free text, with one line saying so; what was learned holds for
the rest of the run. Every reply, constrained or not, is read by the same parsers.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from stochopt.llm.client import RequestFailed
from stochopt.llm.forms import MAX_PLAN_STEPS
from stochopt.llm.gbnf import to_gbnf
from stochopt.llm.grammar import edit_grammar, kernel_grammar, plan_grammar, plan_schema

MODES = ("auto", "json", "grammar", "off")
JSON, GRAMMAR = "json", "grammar"
DIALECTS = {JSON: ("json_schema", "json_object"), GRAMMAR: ("grammar", "structured_outputs")}
WHAT = {"json_schema": "response_format json_schema", "json_object":
        "response_format json_object with a schema", "grammar": "a GBNF grammar",
        "structured_outputs": "structured_outputs.grammar"}

PROBE_WORD = "stochopt-7f3a"
PROBE_SCHEMA = {"type": "object", "properties": {"probe": {"type": "string",
                                                           "enum": [PROBE_WORD]}},
                "required": ["probe"], "additionalProperties": False}
PROBE_GRAMMAR = f'root ::= "{PROBE_WORD}-" [0-9] [0-9]\n'
PROBE_MESSAGES = [{"role": "user", "content": "Say hello in one word."}]


def fields(dialect: str, payload, name: str = "reply") -> dict:
    """The request body fields that carry a schema (dict) or a GBNF grammar (str)."""
    if dialect == "json_schema":
        return {"response_format": {"type": "json_schema", "json_schema": {
            "name": name, "schema": payload, "strict": True}}}
    if dialect == "json_object":
        return {"response_format": {"type": "json_object", "schema": payload}}
    if dialect == "grammar":
        return {"grammar": payload}
    if dialect == "structured_outputs":
        return {"structured_outputs": {"grammar": payload}}
    raise ValueError(f"unknown dialect {dialect!r}")


def obeyed(dialect: str, reply: str) -> bool:
    """Whether a probe's reply is the text only its constraint produces."""
    text = reply.strip()
    if dialect in DIALECTS[GRAMMAR]:
        return text.startswith(PROBE_WORD + "-") and text[len(PROBE_WORD) + 1:].isdigit()
    try:
        return json.loads(text) == {"probe": PROBE_WORD}
    except ValueError:
        return False


@dataclass
class Structured:
    """One proposer's knowledge of its endpoint: the dialect in use for each family (None:
    free text), and the lines saying what was given up."""
    mode: str
    usable: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    probed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"structured mode {self.mode!r}: use one of {MODES}")
        wanted = {"auto": (JSON, GRAMMAR), "json": (JSON,), "grammar": (GRAMMAR,),
                  "off": ()}[self.mode]
        self.usable = {family: list(DIALECTS[family]) if family in wanted else []
                       for family in DIALECTS}

    def dialect(self, family: str) -> str | None:
        with self._lock:
            options = self.usable[family]
            return options[0] if options else None

    def family_for(self, form: str) -> str | None:
        """Which family constrains a form now: plans by schema where one is taken (else
        by grammar), kernels and edits by grammar; None: free text."""
        if form == "plan" and self.dialect(JSON):
            return JSON
        return GRAMMAR if self.dialect(GRAMMAR) else None

    def refused(self, dialect: str, error: RequestFailed) -> str | None:
        """The server refused ``dialect``: drop it (for the run) and return the line that
        says what happens now, the first time the family is left with none."""
        with self._lock:
            for family, options in self.usable.items():
                if dialect in options:
                    options.remove(dialect)
                    if options:
                        return None   # the next dialect of the family is tried at once
                    note = (f"the endpoint refused {WHAT[dialect]} ({str(error)[:160]}): "
                            f"{self._consequence(family)}")
                    self.notes.append(note)
                    return note
        return None

    def probe(self, client, overrides: dict, shared: Path | None = None) -> list[str]:
        """Auto mode, once: try the dialects of each family with a small request until one
        is obeyed; keep it. Returns the lines to show (a family the endpoint does not
        constrain by). With ``shared`` (a file in the run directory), the chains of a run
        probe once between them: the first writes what it found, the others read it."""
        with self._lock:
            if self.probed or self.mode != "auto":
                return []
            self.probed = True
        if shared is None:
            found = self._probe_all(client, overrides)
        else:
            found = _once_per_run(shared, lambda: self._probe_all(client, overrides))
        with self._lock:
            self.usable = {family: list(found.get(family) or [])[:1] for family in DIALECTS}
        lines = []
        for family in DIALECTS:
            if not self.usable[family]:
                lines.append(f"the endpoint does not constrain replies by "
                             f"{'JSON schema' if family == JSON else 'grammar'}: "
                             f"{self._consequence(family)}")
        self.notes.extend(lines)
        return lines

    def _probe_all(self, client, overrides: dict) -> dict[str, list[str]]:
        return {family: next(([d] for d in options if self._works(client, overrides, d)), [])
                for family, options in DIALECTS.items()}

    @staticmethod
    def _works(client, overrides: dict, dialect: str) -> bool:
        payload = PROBE_SCHEMA if dialect in DIALECTS[JSON] else PROBE_GRAMMAR
        try:
            reply = client.probe(PROBE_MESSAGES, overrides, fields(dialect, payload, "probe"))
        except RequestFailed:
            return False
        return obeyed(dialect, reply)

    def describe(self) -> dict:
        """For the transcript: the mode and the dialects in use."""
        return {"mode": self.mode, "json": self.dialect(JSON), "grammar": self.dialect(GRAMMAR)}

    def _consequence(self, family: str) -> str:
        """What a family's loss means for the forms (the state already without it)."""
        grammar = bool(self.usable[GRAMMAR])
        if family == JSON:
            return "plans are constrained by a grammar instead" if grammar else \
                "plans are read from free text with the same parser"
        plans = "" if self.usable[JSON] else " and plans"
        return f"kernels, edits{plans} are read from free text with the same parsers"


def _once_per_run(path: Path, probe) -> dict:
    """What ``probe()`` found, computed by the first process to get here and read from
    ``path`` by the others (they wait on a lock beside it meanwhile)."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            found = probe()
            path.write_text(json.dumps(found))
            return found


def reply_constraint(form: str, family: str, numbers: list[int], kernel_text: str):
    """The shape of the reply a form asks for, as a JSON schema (family JSON) or a GBNF
    grammar: a plan over the menu's entry numbers, edits of the kernel shown, or a
    kernel with the shown kernel's signature."""
    if form == "plan":
        numbers = numbers or [1]
        if family == JSON:
            return plan_schema(numbers, MAX_PLAN_STEPS)
        return to_gbnf(plan_grammar(numbers, MAX_PLAN_STEPS))
    if form == "edit":
        return _edit_gbnf(kernel_text)
    return _kernel_gbnf(next(line for line in kernel_text.splitlines()
                             if line.startswith("def ")))


@lru_cache(maxsize=8)
def _kernel_gbnf(def_line: str) -> str:
    return to_gbnf(kernel_grammar(def_line, comments=False))


@lru_cache(maxsize=8)
def _edit_gbnf(kernel_text: str) -> str:
    return to_gbnf(edit_grammar(kernel_text))
