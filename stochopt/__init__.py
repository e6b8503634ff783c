"""stochopt: a stochastic superoptimizer for accelerator kernels written in LEIR."""

from stochopt.errors import ConstraintError, ParseError, StochoptError
from stochopt.spec import Spec, TensorSpec, load_spec, spec, tensor

__version__ = "0.1.0"
__all__ = ["StochoptError", "ParseError", "ConstraintError", "Spec", "TensorSpec", "spec",
           "tensor", "load_spec", "__version__"]
