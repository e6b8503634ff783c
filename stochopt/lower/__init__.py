"""Lowering: trace a numpy spec and emit its plain baseline kernel."""

from stochopt.lower.lowering import LoweringError, lower
from stochopt.lower.trace import TraceError, trace

__all__ = ["lower", "trace", "LoweringError", "TraceError"]

# stochopt.lower(...) calls stochopt.api.lower (stochopt/callable_package.py)
from stochopt.callable_package import callable_package  # noqa: E402

callable_package(__name__)
