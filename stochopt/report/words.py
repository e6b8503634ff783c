"""Counts in words and numbers as every report form and command prints them (tests
compare the forms through these)."""

from __future__ import annotations

from stochopt.durations import format_duration


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """'1 candidate', '2 candidates' (``plural_form`` for nouns that need another)."""
    word = noun if count == 1 else (plural_form or noun + "s")
    return f"{count:,} {word}" if abs(count) >= 10_000 else f"{count} {word}"


def format_speedup(x: float) -> str:
    return f"{x:.2f}x"


def format_share(x: float) -> str:
    return f"{100 * x:.1f}%"


def format_usd(x: float) -> str:
    return f"${x:.4f}"


def format_seconds(x: float) -> str:
    return format_duration(x)
