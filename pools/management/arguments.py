"""Argument types the management commands share, so that a bad value is argparse's usage error
(one line, exit 2) before the command does anything.

`--interval` of the loop commands (reconcile, schedule, autoscale, repair, rollup) and the demo's
`--tick` were plain floats: `-1`, `nan` and `inf` ran one complete pass (writing state) and only
then crashed in `time.sleep` with a traceback. The other numbers were plain floats and ints too:
`demo_fleet --seconds nan` ran for ever and `-1` ran a pass; `--fault-after nan` meant no fault;
`--max-run -5` crashed on the first pod; `demo --port 99999` crashed in `bind()`, and
`--grace nan` / `--ready-timeout nan` passed their checks. `--now` of year 1 or 9999 ran a pass
that wrote state and logged OverflowError tracebacks; `--now ""` silently meant the clock.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from billing.selectors import FIRST_DAY, LAST_DAY

MAX_SECONDS = 24 * 3600  # a day: a loop that waits longer between passes is not running
_WHOLE = re.compile("[+-]?[0-9]+")  # `int()` also takes `1_0` and other scripts' digits (`١`)


def _number(text: str) -> float:
    """The float `text` says, or nan (refused by every range below) when it is none."""
    try:
        return float(text)
    except ValueError:
        return math.nan


def positive_seconds(text: str) -> float:
    """A number of seconds above 0 and at most a day (`MAX_SECONDS`); nan and inf are refused."""
    seconds = _number(text)
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_SECONDS):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0 and at most {MAX_SECONDS} (a day), got {text!r}")
    return seconds


def seconds_or_zero(text: str) -> float:
    """A number of seconds from 0 to a day, for the options where 0 says "none" or "at once"
    (`--seconds 0`: until interrupted; `--fault-after 0`: no fault; `--grace 0`: SIGKILL at
    once). Longer than a day is what 0 is for; nan, inf and negatives are refused."""
    seconds = _number(text)
    if not (math.isfinite(seconds) and 0 <= seconds <= MAX_SECONDS):
        raise argparse.ArgumentTypeError(f"must be a number of seconds from 0 to {MAX_SECONDS} (a day), got {text!r}")
    return seconds


def demo_speed(text: str) -> float:
    """Trace seconds per wall second, from 1 (real time, settings' own minimum) to a trace day in
    a wall second: `1e308` planned no pod and `1e-300` a replay of 10**303 minutes."""
    speed = _number(text)
    if not (math.isfinite(speed) and 1 <= speed <= MAX_SECONDS):
        raise argparse.ArgumentTypeError(f"must be a number from 1 (real time) to {MAX_SECONDS} (a trace day a second), got {text!r}")
    return speed


def whole_number(low: int, high: int, what: str = "a whole number") -> Callable[[str], int]:
    """An integer from `low` to `high`, in the digits 0-9 (as the `ebcloud` CLI reads them)."""

    def parse(text: str) -> int:
        if not (_WHOLE.fullmatch(text.strip()) and low <= int(text) <= high):
            raise argparse.ArgumentTypeError(f"must be {what} from {low} to {high}, got {text!r}")
        return int(text)

    parse.__name__ = "whole_number"
    return parse


port = whole_number(1, 65535, "a port number")


def _moment(text: str, *, naive_is_utc: bool) -> datetime:
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an ISO 8601 moment such as 2026-12-01T08:00:00Z, got {text!r}") from None
    if moment.tzinfo is None:
        if not naive_is_utc:
            raise argparse.ArgumentTypeError(f"needs a time zone, e.g. 2026-12-01T08:00:00Z, got {text!r}")
        moment = moment.replace(tzinfo=UTC)
    try:
        day = moment.astimezone(UTC).date()
    except OverflowError:  # year 1 east of UTC, year 9999 west of it
        day = None
    if day is None or not FIRST_DAY <= day <= LAST_DAY:
        # The costs API's years (billing/selectors.py): outside them a pass's leases and
        # windows overflow the calendar mid-pass, after it has written.
        raise argparse.ArgumentTypeError(f"must be between {FIRST_DAY} and {LAST_DAY} (UTC), got {text!r}")
    return moment


def moment(text: str) -> datetime:
    """An ISO 8601 moment with a time zone, in the years the costs are kept."""
    return _moment(text, naive_is_utc=False)


def moment_utc(text: str) -> datetime:
    """`moment`, where one without a time zone is UTC."""
    return _moment(text, naive_is_utc=True)


def directory(text: str) -> Path:
    """A directory to write into, or a path where one can be made: an empty value (which meant
    the default) and an existing file (a FileExistsError traceback) are refused."""
    path = Path(text)
    if not text.strip():
        raise argparse.ArgumentTypeError("must be a directory, got ''")
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"must be a directory, got {text!r}, which is a file")
    return path
