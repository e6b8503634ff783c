"""The base of every value Jupyter shows: kernels, verdicts, executions, run results,
reports.

It sits below leir so that any layer's values can inherit it. The forms themselves are
stochopt/notebook.py's (they use the report's renderers); it registers them in
``RENDERERS`` when imported, which the first value shown does: the package stochopt
(its __init__ runs before any of its modules) tells this module how to load them.
"""

from __future__ import annotations

from collections.abc import Callable

# (class name, "html" or "markdown") -> the function that renders such a value
RENDERERS: dict[tuple[str, str], Callable] = {}
# fills RENDERERS; set once by stochopt/__init__.py
_load_forms: Callable[[], None] | None = None


def load_forms_with(load: Callable[[], None]) -> None:
    """How the first value shown loads the forms (stochopt/__init__.py says)."""
    global _load_forms
    _load_forms = load


class Displayable:
    """Jupyter calls these when an object is the value of a cell."""

    __slots__ = ()

    def _repr_html_(self) -> str:
        return _renderer(self, "html")(self)

    def _repr_markdown_(self) -> str:
        return _renderer(self, "markdown")(self)


def _renderer(obj, form: str) -> Callable:
    if not RENDERERS and _load_forms is not None:  # the first value shown
        _load_forms()
    for cls in type(obj).__mro__:
        found = RENDERERS.get((cls.__name__, form))
        if found is not None:
            return found
    raise TypeError(f"no {form} form for {type(obj).__name__}")
