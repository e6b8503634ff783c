"""Search: Metropolis–Hastings chains over kernels with built-in and LLM proposers."""

from stochopt.search.driver import RunResult
from stochopt.search.optimize import optimize

__all__ = ["optimize", "RunResult"]
