"""The base of every value Jupyter shows: kernels, verdicts, executions, run results,
reports.

It sits below leir so that any layer's values can inherit it. The forms themselves are
stochopt/notebook.py's (they use the report's renderers); it registers them in
``RENDERERS`` when imported, which the first value shown does.
"""

from __future__ import annotations

from collections.abc import Callable

# (class name, "html" or "markdown") -> the function that renders such a value
RENDERERS: dict[tuple[str, str], Callable] = {}


class Displayable:
    """Jupyter calls these when an object is the value of a cell."""

    __slots__ = ()

    def _repr_html_(self) -> str:
        return _renderer(self, "html")(self)

    def _repr_markdown_(self) -> str:
        return _renderer(self, "markdown")(self)


def _renderer(obj, form: str) -> Callable:
    if not RENDERERS:  # the first value shown: the forms are the notebook module's
        import importlib
        importlib.import_module("stochopt.notebook")
    for cls in type(obj).__mro__:
        found = RENDERERS.get((cls.__name__, form))
        if found is not None:
            return found
    raise TypeError(f"no {form} form for {type(obj).__name__}")
