"""Lowering: trace a numpy spec and emit its plain baseline kernel."""

from stochopt.lower.lowering import LoweringError, lower
from stochopt.lower.trace import TraceError, trace

__all__ = ["lower", "trace", "LoweringError", "TraceError"]
