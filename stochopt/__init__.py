"""stochopt: a stochastic superoptimizer for accelerator kernels written in LEIR."""

from stochopt.errors import ConstraintError, ParseError, StochoptError

__version__ = "0.1.0"
__all__ = ["StochoptError", "ParseError", "ConstraintError", "__version__"]
