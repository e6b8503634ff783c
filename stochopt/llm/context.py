"""How much a model can read: its context window, a safe token estimate, and the room
the reply needs.

The context comes, first found: from ``--context-tokens``; from the server (vLLM's
``max_model_len`` and llama.cpp's ``n_ctx`` on /v1/models, or the number in a
context-length 400); from the table of hosted models below; else DEFAULT_CONTEXT_TOKENS.
Tokens are estimated from characters at a ratio that starts on the safe side and is
corrected by what the server reports in ``usage``.
"""

from __future__ import annotations

import math
import re

DEFAULT_CONTEXT_TOKENS = 8192      # what we assume of an unknown model: common, and small
SAFE_CHARS_PER_TOKEN = 2.5         # fewer than any tokenizer we measured gives for prompts
MESSAGE_OVERHEAD_TOKENS = 16       # role markers and the chat template, per message
MIN_REPLY_TOKENS, MAX_REPLY_TOKENS = 1024, 8192

# Context windows of hosted models, by name prefix (longest prefix wins), as published.
CONTEXTS: dict[str, int] = {
    "gpt-4o": 128_000, "gpt-4.1": 1_000_000, "gpt-4-turbo": 128_000, "gpt-4": 8192,
    "gpt-3.5-turbo": 16_385, "gpt-5": 400_000, "o1": 200_000, "o1-mini": 128_000,
    "o3": 200_000, "o3-mini": 200_000, "o4-mini": 200_000,
    "claude": 200_000, "deepseek-chat": 64_000, "deepseek-reasoner": 64_000,
}
# Reasoning models refuse a temperature other than the default and the old max_tokens key.
REASONING_PREFIXES = ("o1", "o3", "o4", "gpt-5")


def _base_name(model: str) -> str:
    return model.lower().rsplit("/", 1)[-1]


def table_context(model: str) -> int | None:
    """The context of a hosted model from CONTEXTS, or None."""
    name = _base_name(model)
    match = max((k for k in CONTEXTS if name.startswith(k)), key=len, default=None)
    return CONTEXTS[match] if match else None


def is_reasoning_model(model: str) -> bool:
    return _base_name(model).startswith(REASONING_PREFIXES)


_CONTEXT_KEYS = ("max_model_len", "context_length", "context_window", "n_ctx",
                 "max_context_length", "n_ctx_train")


def context_from_models(entries: list[dict], model: str) -> int | None:
    """The context a /v1/models listing gives for ``model`` (or for its only model: local
    servers answer under any name)."""
    chosen = [e for e in entries if e.get("id") == model] or (entries if len(entries) == 1
                                                               else [])
    for entry in chosen:
        for where in (entry, entry.get("meta") or {}):
            for key in _CONTEXT_KEYS:   # n_ctx (what the server runs) before n_ctx_train
                value = where.get(key)
                if isinstance(value, int) and not isinstance(value, bool) and value >= 256:
                    return value
    return None


_CONTEXT_ERROR = re.compile(
    r"context[ _-]?(length|window|size)|maximum context|exceeds? (the )?(available )?context"
    r"|too many tokens|prompt is too long|input is too long|reduce the length", re.I)
_CONTEXT_NUMBER = (
    re.compile(r"maximum context length is (\d+)", re.I),
    re.compile(r"context (?:window|size|length)(?: of| is)? (\d+)", re.I),
    re.compile(r"\bn_ctx\W{1,4}(\d+)", re.I),
    re.compile(r"(\d+)[- ]token context", re.I),
)
_PROMPT_NUMBER = (
    re.compile(r"(\d+) in the messages", re.I),
    re.compile(r"your request has (\d+) input tokens", re.I),
    re.compile(r"n_prompt_tokens\W{1,4}(\d+)", re.I),
    re.compile(r"requested (\d+) tokens", re.I),
)


def is_context_error(status: int | None, message: str) -> bool:
    return status in (400, 413, 422, None) and bool(_CONTEXT_ERROR.search(message))


def _first_number(patterns, message: str) -> int | None:
    for pattern in patterns:
        m = pattern.search(message)
        if m:
            return int(m.group(1))
    return None


def context_from_error(message: str) -> int | None:
    """The model's context as a context-length error states it, or None."""
    value = _first_number(_CONTEXT_NUMBER, message)
    return value if value and value >= 256 else None


def prompt_tokens_from_error(message: str) -> int | None:
    """The prompt's size in tokens as the error counted it, or None."""
    return _first_number(_PROMPT_NUMBER, message)


def reply_room(context_tokens: int, max_tokens: int | None) -> int:
    """Tokens kept free for the reply: --max-tokens, else a quarter of the context within
    1,024..8,192 (never more than half the context)."""
    if max_tokens:
        return max_tokens
    return min(context_tokens // 2, max(MIN_REPLY_TOKENS,
                                        min(MAX_REPLY_TOKENS, context_tokens // 4)))


class TokenCounter:
    """Estimates prompt tokens from characters, on the safe side: the ratio starts at
    SAFE_CHARS_PER_TOKEN and follows what the server reports, with a 10% margin."""

    MARGIN = 0.9

    def __init__(self) -> None:
        self.chars_per_token = SAFE_CHARS_PER_TOKEN
        self.measured = False

    def estimate(self, messages: list[dict]) -> int:
        chars = sum(len(m["content"]) for m in messages)
        return math.ceil(chars / self.chars_per_token) + MESSAGE_OVERHEAD_TOKENS * len(
            messages)

    def observe(self, messages: list[dict], prompt_tokens: int) -> None:
        """The server counted ``prompt_tokens`` for these messages."""
        chars = sum(len(m["content"]) for m in messages)
        body = prompt_tokens - MESSAGE_OVERHEAD_TOKENS * len(messages)
        if body <= 0 or chars < 1000:   # too little text to learn a ratio from
            return
        ratio = self.MARGIN * chars / body
        # the first measurement replaces the guess; later ones only make it safer
        self.chars_per_token = ratio if not self.measured else min(self.chars_per_token,
                                                                    ratio)
        self.measured = True
