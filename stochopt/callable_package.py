"""Subpackages that are also API functions: ``stochopt.lower(...)``, ``stochopt.verify(...)``
and ``stochopt.report(...)``.

Python binds a subpackage to its name in the parent package whenever it is imported, so
a plain function ``stochopt.verify`` would be replaced by the module ``stochopt.verify``
as soon as anything imports ``stochopt.verify.check``. Instead the package itself is
callable and calls ``stochopt.api.<name>``. It sits at the bottom of the layers and
finds the API function only when called (or when Jupyter asks for its signature), so
importing ``stochopt.verify`` loads nothing of the API, the search or the report.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import types


class CallablePackage(types.ModuleType):
    """A subpackage that calls the API function of its name."""

    def _function(self):
        return getattr(importlib.import_module("stochopt.api"), self.__name__.rpartition(".")[2])

    def __call__(self, *args, **kwargs):
        return self._function()(*args, **kwargs)

    @property
    def __signature__(self) -> inspect.Signature:  # what Jupyter's ? and tab show
        return inspect.signature(self._function())


def callable_package(module_name: str) -> None:
    """Make the subpackage stochopt.NAME call stochopt.api.NAME (its __init__ does this)."""
    sys.modules[module_name].__class__ = CallablePackage
