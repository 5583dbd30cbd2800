"""Kubernetes/Go duration strings (`30m`, `120s`, `1h30m`) <-> whole seconds.

Specs accept the forms Kubernetes users already write (design §6, seed O4); we keep seconds
internally and print the shortest Go form back, so `30m` stays `30m`.
"""

from __future__ import annotations

import re

_PART = re.compile(r"([0-9]+)(h|m|s)")  # ASCII digits: `\d` took "٣٠s" for 30s (pools/core/numbers.py)
_UNIT_SECONDS = {"h": 3600, "m": 60, "s": 1}


def parse_duration(text: str) -> int:
    """Seconds in a Go-style duration of hours, minutes and seconds; ValueError if malformed."""
    if not isinstance(text, str) or not text:
        raise ValueError("must be a duration such as 30m, 120s or 1h30m")
    position = 0
    seconds = 0
    units_seen: list[str] = []
    for match in _PART.finditer(text):
        if match.start() != position:
            break
        unit = match.group(2)
        if unit in units_seen or (units_seen and "hms".index(unit) <= "hms".index(units_seen[-1])):
            raise ValueError(f"{text!r} is not a duration: units must appear once, as h, m, s")
        units_seen.append(unit)
        seconds += int(match.group(1)) * _UNIT_SECONDS[unit]
        position = match.end()
    if position != len(text) or not units_seen:
        raise ValueError(f"{text!r} is not a duration such as 30m, 120s or 1h30m")
    return seconds


def format_duration(seconds: int) -> str:
    """The shortest Go-style form: 1800 -> '30m', 90 -> '1m30s', 0 -> '0s'."""
    if seconds < 0:
        raise ValueError("durations are never negative")
    if seconds == 0:
        return "0s"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else "", f"{secs}s" if secs else ""]
    return "".join(parts)
