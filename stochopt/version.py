"""The package's version (pyproject.toml states the same), importable from any layer."""

__version__ = "0.1.0"
