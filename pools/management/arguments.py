"""Argument types the management commands share, so that a bad value is argparse's usage error
(one line, exit 2) before the command does anything.

`--interval` of the loop commands (reconcile, schedule, autoscale, repair, rollup) and the demo's
`--tick` were plain floats: `-1`, `nan` and `inf` ran one complete pass (writing state) and only
then crashed in `time.sleep` with a traceback.
"""

from __future__ import annotations

import argparse
import math

MAX_SECONDS = 24 * 3600  # a day: a loop that waits longer between passes is not running


def positive_seconds(text: str) -> float:
    """A number of seconds above 0 and at most a day (`MAX_SECONDS`); nan and inf are refused."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_SECONDS):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0 and at most {MAX_SECONDS} (a day), got {text!r}")
    return seconds
