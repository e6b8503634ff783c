"""Project settings: defaults for the command-line flags, read from the nearest
stochopt.toml or pyproject.toml ``[tool.stochopt]``; a flag given on the command line
always wins.

    [tool.stochopt]          # or the same keys at the top of stochopt.toml
    machine = "small"
    budget = "2m"
    chains = 4
    model = "qwen2.5-coder"
    base-url = "http://localhost:8000/v1"

Keys are the flags' names without the leading dashes. This module finds and reads the
file; each value is checked by the flag it stands for (see cli.py), so a setting is
held to exactly the rules of its flag.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from stochopt.errors import StochoptError

SETTINGS_FILE = "stochopt.toml"
PYPROJECT = "pyproject.toml"
# flags that name files: relative paths in a settings file are relative to that file
PATH_KEYS = ("machine", "prompts", "llm-cache", "db")


@dataclass(frozen=True)
class Settings:
    """The settings file found (None: none) and its values by key."""

    path: Path | None = None
    values: dict[str, object] = field(default_factory=dict)
    text: str = ""

    @property
    def origin(self) -> str:
        """Where the values came from, as run.json and error messages name it."""
        if self.path is None:
            return "no settings file"
        return f"{self.path} [tool.stochopt]" if self.path.name == PYPROJECT else str(self.path)

    def line_of(self, key: str) -> int | None:
        """The line that sets ``key`` (for error messages), if it can be found."""
        pattern = re.compile(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=")
        for number, line in enumerate(self.text.splitlines(), start=1):
            if pattern.match(line):
                return number
        return None

    def error(self, key: str, message: str, hint: str | None = None) -> StochoptError:
        return StochoptError(message, source=self.origin, line=self.line_of(key), hint=hint)

    def resolve_path(self, value: str) -> str:
        """A path from the settings file, made relative to the file's folder."""
        if self.path is None or Path(value).is_absolute():
            return value
        return str(self.path.parent / value)


def find_settings_file(start: Path | None = None) -> Path | None:
    """The nearest stochopt.toml, or pyproject.toml with a [tool.stochopt] table, in
    ``start`` (default: the current folder) or a folder above it."""
    folder = (start or Path.cwd()).resolve()
    for candidate in (folder, *folder.parents):
        own = candidate / SETTINGS_FILE
        if own.is_file():
            return own
        pyproject = candidate / PYPROJECT
        if pyproject.is_file() and _has_tool_table(pyproject):
            return pyproject
    return None


def load_settings(start: Path | None = None) -> Settings:
    """The settings that apply in ``start``: empty when there is no settings file."""
    path = find_settings_file(start)
    if path is None:
        return Settings()
    text, data = _read(path)
    if path.name == PYPROJECT:
        data = data.get("tool", {}).get("stochopt", {})
    settings = Settings(path, {}, text)
    if not isinstance(data, dict):
        raise settings.error("stochopt", "[tool.stochopt] must be a table of key = value")
    values = {}
    for key, value in data.items():
        if isinstance(value, dict | list):
            raise settings.error(key, f"{key} must be a single value, got a "
                                 f"{'table' if isinstance(value, dict) else 'list'}",
                                 hint=f'write e.g. {key} = "..."')
        values[key.replace("_", "-")] = value
    return Settings(path, values, text)


def _has_tool_table(path: Path) -> bool:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return False
    # another project's broken pyproject.toml is none of ours; one meant for us is read
    # (and its error shown) by load_settings
    return re.search(r"^\s*\[\s*tool\.stochopt\s*\]", text, re.M) is not None


def _read(path: Path) -> tuple[str, dict]:
    try:
        text = path.read_text()
        return text, tomllib.loads(text)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise StochoptError(f"cannot read settings file {path}: {e}") from None
