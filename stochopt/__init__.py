"""stochopt: a stochastic superoptimizer for accelerator kernels written in LEIR."""

import os

# The emulator runs many small matmuls, and the search already keeps every core busy
# with one chain per process: a multithreaded BLAS only spins against the other chains
# (an 8x2048 @ 2048x128 product took 110 ms instead of 0.07 ms). Users may still choose.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from stochopt import callable_package as _callable_package  # noqa: E402
from stochopt import displayable as _displayable  # noqa: E402
from stochopt.errors import ConstraintError, ParseError, StochoptError  # noqa: E402

# stochopt.spec is a module and a function: importing the module binds the module to
# the name, so the function is bound after it, here (the module is light)
from stochopt.spec import Spec, TensorSpec, load_spec, spec, tensor  # noqa: E402
from stochopt.version import __version__  # noqa: E402

__all__ = ["lower", "run", "verify", "optimize", "report", "db", "load_kernel", "spec",
           "tensor", "load_spec", "Spec", "TensorSpec", "StochoptError", "ParseError",
           "ConstraintError", "__version__"]

# The API's functions are imported when first used, so that `import stochopt`, the CLI and
# the worker processes load only what they need. lower, verify and report are
# subpackages that call the API function of their name (stochopt/callable_package.py).
_WHERE = {"run": "stochopt.api", "optimize": "stochopt.api", "load_kernel": "stochopt.api",
          "db": "stochopt.api"}
_CALLABLE_SUBPACKAGES = ("lower", "verify", "report")


def _api_function(name: str):
    from stochopt import api

    return getattr(api, name)


def _load_notebook_forms() -> None:
    from stochopt import notebook  # noqa: F401  (importing it registers the forms)


# the bottom layer's two hooks into the top one, set here because Python runs this file
# before any module of the package: stochopt.lower/verify/report(...) call the API
# function of their name, and the first value Jupyter shows loads the notebook's forms
_callable_package.find_api_functions_with(_api_function)
_displayable.load_forms_with(_load_notebook_forms)


def __getattr__(name: str):
    import importlib

    if name in _CALLABLE_SUBPACKAGES:
        return importlib.import_module(f"stochopt.{name}")
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value  # found once
        return value
    raise AttributeError(f"module 'stochopt' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
