"""The one exception family every user-facing failure belongs to."""

from __future__ import annotations


class StochoptError(Exception):
    """Base of every error stochopt raises on purpose: bad kernels, specs, flags, machines."""

    def __init__(self, message: str, *, line: int | None = None, col: int | None = None,
                 hint: str | None = None, source: str | None = None) -> None:
        self.message = message
        self.source = source
        self.line = line
        self.col = col
        self.hint = hint
        super().__init__(self._format())

    def _format(self) -> str:
        where = f"{self.source}: " if self.source else ""
        if self.line is not None:
            where += f"line {self.line}" + (f", col {self.col}" if self.col is not None else "")
            where += ": "
        text = where + self.message
        if self.hint:
            text += f"; {self.hint}"
        return text


class ParseError(StochoptError):
    """Kernel text that is not LEIR: bad syntax or a form the language does not allow."""


class ConstraintError(StochoptError):
    """A well-formed kernel that breaks a type, layout, location or memory constraint."""
