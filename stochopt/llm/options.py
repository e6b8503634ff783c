"""The LLM settings: their defaults, what each may be (checked once, in the main
process, before any worker starts), and the one line that names them for people."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

from stochopt.errors import StochoptError
from stochopt.llm.client import price_of
from stochopt.llm.forms import FORMS
from stochopt.llm.prompt import load_templates
from stochopt.llm.structured import MODES

DEFAULTS = {
    "model": None, "base_url": None, "api_key": None,
    "concurrency": 2,          # requests in flight per chain
    "timeout_s": None,         # per try; unset: 60 s, or 600 s for a server on this machine
    "retries": 4,              # tries after the first, on 429, 5xx, timeouts, broken JSON
    "backoff_s": 1.0,          # first backoff; doubles per try, with jitter
    "n": 1,                    # choices per request
    "temperature": None,       # a number, or [low, high]; unset: drawn in 0.2..1.0
    "max_tokens": None,        # unset: the reply's room in the context
    "context_tokens": None,    # the model's context; unset: learned from the server
    "price_in": None, "price_out": None,       # $ per million tokens; default: PRICES
    "max_cost": None,          # this worker sends nothing more once it has spent this
    "prompts": None,           # a folder of templates replacing prompts/
    "cache": None,             # a folder replaying identical prompts
    "failures_in_prompt": 4,
    "structured": "auto",      # constrained decoding: auto, json, grammar or off
    "forms": None,             # the reply forms asked for (plan, edit, kernel); unset: all
    "pace": True,              # slow requests down while replies bring nothing faster
}
LOCAL_TIMEOUT_S = 600.0        # the default timeout for a server on this machine


def on_this_machine(base_url: str | None) -> bool:
    """Whether the endpoint is a server on this machine (localhost, 127.x)."""
    host = urlparse(base_url or os.environ.get("OPENAI_BASE_URL") or "").hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")


def llm_options(llm: dict | None, max_cost: float | None = None) -> dict | None:
    """The LLM settings with defaults filled in and every value checked (None when no
    model is configured)."""
    if not llm or not llm.get("model"):
        return None
    unknown = sorted(set(llm) - set(DEFAULTS))
    if unknown:
        raise StochoptError(f"unknown LLM setting(s) {', '.join(unknown)}",
                            hint=f"use {', '.join(DEFAULTS)}")
    o = {**DEFAULTS, **{k: v for k, v in llm.items() if v is not None}}
    if max_cost is not None:
        o["max_cost"] = max_cost
    if o["timeout_s"] is None:   # a CPU-bound local model reads a 3k-token prompt in minutes
        o["timeout_s"] = LOCAL_TIMEOUT_S if on_this_machine(o["base_url"]) else 60.0
    for key, low in (("concurrency", 1), ("retries", 0), ("n", 1), ("failures_in_prompt", 0)):
        v = o[key]
        if not isinstance(v, int) or isinstance(v, bool) or v < low or v > 64:
            raise StochoptError(f"LLM setting {key} must be an integer in {low}..64, got {v!r}")
    for key in ("timeout_s", "backoff_s", "price_in", "price_out", "max_cost"):
        v = o[key]
        if v is not None and not _number(v):
            raise StochoptError(f"LLM setting {key} must be a number >= 0, got {v!r}")
    for key, low in (("max_tokens", 1), ("context_tokens", 256)):
        v = o[key]
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < low):
            raise StochoptError(f"LLM setting {key} must be an integer >= {low}, got {v!r}")
    if o["context_tokens"] and o["max_tokens"] and o["max_tokens"] >= o["context_tokens"]:
        raise StochoptError(f"max_tokens {o['max_tokens']} leaves no room for the prompt in "
                            f"a context of {o['context_tokens']} tokens",
                            hint="lower --max-tokens or raise --context-tokens")
    o["temperature"] = _temperature(o["temperature"])
    if o["structured"] not in MODES:
        raise StochoptError(f"LLM setting structured must be one of {', '.join(MODES)}, got "
                            f"{o['structured']!r}")
    if not isinstance(o["pace"], bool):
        raise StochoptError(f"LLM setting pace must be true or false, got {o['pace']!r}")
    if o["forms"] is not None:
        forms = [o["forms"]] if isinstance(o["forms"], str) else o["forms"]
        if not isinstance(forms, list | tuple) or not forms or \
                any(f not in FORMS for f in forms):
            raise StochoptError(f"LLM setting forms must list some of {', '.join(FORMS)}, "
                                f"got {o['forms']!r}")
        o["forms"] = [f for f in FORMS if f in forms]
    if not o["timeout_s"] > 0:
        raise StochoptError("the LLM timeout must be positive")
    for key in ("prompts", "cache"):
        if o[key] is not None:
            o[key] = str(Path(o[key]).expanduser().resolve())
    load_templates(o["prompts"])  # fail now, in the main process, on a bad template
    if o["cache"]:
        try:
            Path(o["cache"]).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StochoptError(f"cannot create the LLM cache {o['cache']}: {e}") from None
    return o


def _number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v >= 0


def _temperature(v):
    """None, a number, or a [low, high] range (as a list: run.json keeps it)."""
    if v is None or (_number(v) and v <= 2):
        return v
    if isinstance(v, list | tuple) and len(v) == 2 and all(_number(x) and x <= 2 for x in v) \
            and v[0] <= v[1]:
        return [float(v[0]), float(v[1])]
    raise StochoptError(f"LLM setting temperature must be a number in 0..2 or a range "
                        f"[low, high] within it, got {v!r}")


def describe(options: dict | None) -> str:
    """One line for people: model, endpoint, price."""
    if not options:
        return "no LLM"
    p_in, p_out, source = price_of(options["model"], options.get("price_in"),
                                   options.get("price_out"))
    return (f"{options['model']} at {options.get('base_url') or 'the default endpoint'}, "
            f"${p_in:g}/${p_out:g} per million tokens in/out ({source})")
