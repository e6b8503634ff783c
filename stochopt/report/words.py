"""Counts in words, the same in every report form and command."""

from __future__ import annotations


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """'1 candidate', '2 candidates' (``plural_form`` for nouns that need another)."""
    word = noun if count == 1 else (plural_form or noun + "s")
    return f"{count:,} {word}" if abs(count) >= 10_000 else f"{count} {word}"
