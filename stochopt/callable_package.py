"""Subpackages that are also API functions: ``stochopt.lower(...)``, ``stochopt.verify(...)``
and ``stochopt.report(...)``.

Python binds a subpackage to its name in the parent package whenever it is imported, so
a plain function ``stochopt.verify`` would be replaced by the module ``stochopt.verify``
as soon as anything imports ``stochopt.verify.check``. Instead the package itself is
callable and calls ``stochopt.api.<name>``. It sits at the bottom of the layers and
knows nothing above it: the package stochopt (whose __init__ Python runs before any of
its subpackages) tells it how to find the API function by name, and it asks only when
called (or when Jupyter asks for a signature), so importing ``stochopt.verify`` loads
nothing of the API, the search or the report.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable

# name -> the API function of that name; set once by stochopt/__init__.py
_api_function: Callable[[str], Callable] | None = None


def find_api_functions_with(find: Callable[[str], Callable]) -> None:
    """How a callable subpackage finds its API function (stochopt/__init__.py says)."""
    global _api_function
    _api_function = find


class CallablePackage(types.ModuleType):
    """A subpackage that calls the API function of its name."""

    def _function(self):
        return _api_function(self.__name__.rpartition(".")[2])

    def __call__(self, *args, **kwargs):
        return self._function()(*args, **kwargs)

    @property
    def __signature__(self):  # what Jupyter's ? and tab show
        import inspect

        return inspect.signature(self._function())


def callable_package(module_name: str) -> None:
    """Make the subpackage stochopt.NAME call stochopt.api.NAME (its __init__ does this)."""
    sys.modules[module_name].__class__ = CallablePackage
