"""Settings files meet the command line: each key is checked by the flag it stands for,
becomes that flag's default (click's default_map), and run.json records for every flag
whether its value came from the command line, the settings file or the default."""

from __future__ import annotations

import click
from click.core import ParameterSource

from stochopt.errors import StochoptError
from stochopt.settings import PATH_KEYS, Settings

# flags that name one run's inputs or outputs, not a habit: never read from a file
NOT_SETTABLE = frozenset({"resume", "init", "run-dir", "name", "json", "html", "output",
                          "inputs", "counterexample", "spec", "profile", "help", "version"})


def settable_options(group: click.Group) -> dict[str, list[tuple[str, click.Option]]]:
    """key -> [(command name, its option)] for every flag a settings file may set."""
    out: dict[str, list[tuple[str, click.Option]]] = {}
    for name, command in group.commands.items():
        for param in command.params:
            if not isinstance(param, click.Option):
                continue
            for opt in param.opts:
                key = opt.removeprefix("--")
                if opt.startswith("--") and key not in NOT_SETTABLE:
                    out.setdefault(key, []).append((name, param))
    return out


def default_map(settings: Settings, group: click.Group) -> dict[str, dict]:
    """{command: {parameter: default}} from the settings, every value checked first."""
    options = settable_options(group)
    out: dict[str, dict] = {}
    for key, raw in settings.values.items():
        if key not in options:
            raise settings.error(key, f"unknown key {key!r}",
                                 hint=f"known keys are {', '.join(sorted(options))}")
        # a path is relative to the settings file; a machine preset's name is no path
        is_path = key in PATH_KEYS and isinstance(raw, str) and (
            key != "machine" or raw.endswith(".toml"))
        value = settings.resolve_path(raw) if is_path else raw
        for command, param in options[key]:
            _check(settings, key, value, param)
            out.setdefault(command, {})[param.name] = value
    return out


def _check(settings: Settings, key: str, value, param: click.Option) -> None:
    """The value as the flag would take it, or an error naming the file and line."""
    if param.is_flag:
        if not isinstance(value, bool):
            raise settings.error(key, f"{key} must be true or false, got {value!r}",
                                 hint=f"write {key} = true")
        return
    if isinstance(value, bool) or (param.type == click.STRING and not isinstance(value, str)):
        raise settings.error(key, f"{key} must be {_expected(param)}, got {value!r}",
                             hint=f'write {key} = "..."' if param.type == click.STRING
                             else None)
    try:
        if key == "budget":
            from stochopt.durations import parse_duration
            parse_duration(value)
        elif key == "machine":
            from stochopt.machine import load_machine
            load_machine(value)
        else:
            param.type.convert(value, param, None)
    except StochoptError as e:
        raise settings.error(key, f"{key} = {value!r}: {e}") from None
    except click.BadParameter as e:
        raise settings.error(key, f"{key} = {value!r}: {e.message}",
                             hint=f"the flag --{key} takes {_expected(param)}") from None


def _expected(param: click.Option) -> str:
    """What a flag takes, in words."""
    kind = param.type
    if isinstance(kind, click.Choice):
        return "one of " + ", ".join(map(str, kind.choices))
    if isinstance(kind, click.IntRange | click.FloatRange):
        number = "a whole number" if isinstance(kind, click.IntRange) else "a number"
        low = "" if kind.min is None else f" {'>' if kind.min_open else '>='} {kind.min}"
        high = "" if kind.max is None else f" {'<' if kind.max_open else '<='} {kind.max}"
        return number + low + (" and" if low and high else "") + high
    return {"integer": "a whole number", "float": "a number", "text": "a string",
            "path": "a path"}.get(kind.name, kind.name)


def sources(ctx: click.Context, settings: Settings) -> dict[str, dict]:
    """Each settable flag of this command: its value and where the value came from."""
    out = {}
    for param in ctx.command.params:
        key = (param.opts[0] if param.opts else param.name).removeprefix("--")
        if not isinstance(param, click.Option) or key in NOT_SETTABLE:
            continue
        source = ctx.get_parameter_source(param.name)
        where = ("command line" if source == ParameterSource.COMMANDLINE else
                 settings.origin if source == ParameterSource.DEFAULT_MAP else "default")
        out[key] = {"value": ctx.params.get(param.name), "from": where}
    return out


def given_on_command_line(ctx: click.Context, names: list[str]) -> list[str]:
    """Which of these parameters the user typed (not defaults, not settings)."""
    return [n for n in names if ctx.get_parameter_source(n) == ParameterSource.COMMANDLINE]
