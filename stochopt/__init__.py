"""stochopt: a stochastic superoptimizer for accelerator kernels written in LEIR."""

import os

# The emulator runs many small matmuls, and the search already keeps every core busy
# with one chain per process: a multithreaded BLAS only spins against the other chains
# (an 8x2048 @ 2048x128 product took 110 ms instead of 0.07 ms). Users may still choose.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from stochopt.errors import ConstraintError, ParseError, StochoptError  # noqa: E402
from stochopt.spec import Spec, TensorSpec, load_spec, spec, tensor  # noqa: E402

__version__ = "0.1.0"
__all__ = ["StochoptError", "ParseError", "ConstraintError", "Spec", "TensorSpec", "spec",
           "tensor", "load_spec", "__version__"]
