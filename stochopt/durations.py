"""Durations: reading and writing wall time ("30s", "10m", "48h", "1h30m"), and when this
process started (a run's budget counts from there)."""

from __future__ import annotations

import os
import re
import time

from stochopt.errors import StochoptError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


def parse_duration(text: str | int | float) -> float:
    """Seconds in a duration such as 30s, 10m, 48h or 1h30m (a bare number is seconds)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        seconds = float(text)
    else:
        s = str(text).strip().lower()
        if re.fullmatch(r"\d+(\.\d+)?", s):
            seconds = float(s)
        else:
            parts = _PART.findall(s)
            if not parts or "".join(n + u for n, u in parts) != s:
                raise StochoptError(f"bad duration {text!r}",
                                    hint="write e.g. 30s, 10m, 48h or 1h30m")
            seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not 0 < seconds <= 365 * 86400:
        raise StochoptError(f"duration {text!r} must be positive and at most a year")
    return seconds


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return (f"{h}h" if h else "") + (f"{m}m" if m else "") + (f"{s}s" if s or not (h or m)
                                                              else "")


def process_start_time() -> float:
    """When this process started (time.time() scale), so that a command-line run's budget
    includes Python's own start and imports; now where the system does not say (Linux's
    /proc does)."""
    try:
        with open(f"/proc/{os.getpid()}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        ticks = os.sysconf("SC_CLK_TCK")
        started = time.time() - (uptime - int(fields[19]) / ticks)
    except (OSError, ValueError, IndexError):
        return time.time()
    return min(started, time.time())
