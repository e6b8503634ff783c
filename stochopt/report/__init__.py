"""What a person sees: terminal tables, JSON facts and HTML pages."""

# stochopt.report(...) calls stochopt.api.report (stochopt/callable_package.py)
from stochopt.callable_package import callable_package  # noqa: E402

callable_package(__name__)
