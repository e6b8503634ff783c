"""Verification: equivalence of a kernel and its spec by property-based testing."""

from stochopt.verify.check import (
                                   Counterexample,
                                   Verdict,
                                   certificate,
                                   check,
                                   check_signature,
)
from stochopt.verify.degenerate import degenerate_warnings
from stochopt.verify.ranges import range_facts
from stochopt.verify.reference import reference_output
from stochopt.verify.screening import ScreeningSet

__all__ = ["check", "Verdict", "Counterexample", "certificate", "check_signature",
           "reference_output", "degenerate_warnings", "ScreeningSet", "range_facts"]

# stochopt.verify(...) calls stochopt.api.verify (stochopt/callable_package.py)
from stochopt.callable_package import callable_package  # noqa: E402

callable_package(__name__)
