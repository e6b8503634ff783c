"""What a person sees: terminal tables, JSON facts and HTML pages."""

# stochopt.report(...) calls stochopt.api.report: see _CallablePackage there
from stochopt.api import callable_package  # noqa: E402

callable_package(__name__)
