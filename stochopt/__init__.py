"""stochopt: a stochastic superoptimizer for accelerator kernels written in LEIR."""

import os

# The emulator runs many small matmuls, and the search already keeps every core busy
# with one chain per process: a multithreaded BLAS only spins against the other chains
# (an 8x2048 @ 2048x128 product took 110 ms instead of 0.07 ms). Users may still choose.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

# how kernels, verdicts and results show in Jupyter (stochopt/displayable.py's forms)
import stochopt.notebook  # noqa: E402, F401
from stochopt.api import load_kernel, optimize, run  # noqa: E402
from stochopt.errors import ConstraintError, ParseError, StochoptError  # noqa: E402
from stochopt.spec import Spec, TensorSpec, load_spec, spec, tensor  # noqa: E402
from stochopt.version import __version__  # noqa: E402

__all__ = ["lower", "run", "verify", "optimize", "report", "load_kernel", "spec", "tensor",
           "load_spec", "Spec", "TensorSpec", "StochoptError", "ParseError", "ConstraintError",
           "__version__"]

# lower, verify and report are subpackages that call the API function of their name
# (stochopt.api._CallablePackage); they are imported when first used, not here, so
# that `import stochopt` and the CLI stay quick
_CALLABLE_SUBPACKAGES = ("lower", "verify", "report")


def __getattr__(name: str):
    if name in _CALLABLE_SUBPACKAGES:
        import importlib
        return importlib.import_module(f"stochopt.{name}")
    raise AttributeError(f"module 'stochopt' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
