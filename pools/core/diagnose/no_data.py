"""Why a Diagnose check has no data yet, or too little to judge, and what to do about it. A pool in its first hour has
no metered cost because its first hour has not ended, and a pool without a Ready node has no
utilisation sample because nothing reports yet: telling its lead to start the worker, which
runs, sends them after a fault that is not there (QA). Only past those does the missing data
point at the worker or the node agents. No Django here.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pools.core.diagnose.snapshot import PoolSnapshot
from pools.core.lifecycle import format_duration as age

METERED_AFTER = timedelta(hours=1, minutes=2)  # the hourly metering writes the hour just ended, at 2 past the next
REPORTS_WITHIN = timedelta(minutes=5)  # a Ready node's agent reports, and the rollup counts it, within this
# Under an hour of samples a low mean is a job's start (loading data, compiling), not a pattern:
# it warned 7 minutes into a new pool (QA).
JUDGED_AFTER = timedelta(hours=1)


def _not_reporting_yet(s: PoolSnapshot, now: datetime, *, none_ready: tuple[str, str], just_ready: str) -> tuple[str, str] | None:
    """(cause, action) while no node of the pool is Ready, or the first one became Ready too
    recently to have reported (REPORTS_WITHIN); None once its agents should have."""
    ready = min((n.ready_at for n in s.nodes if n.ready_at), default=None)
    if ready is None:
        return none_ready
    if now - ready < REPORTS_WITHIN:
        return f"The pool's first node became Ready {age(now - ready)} ago; {just_ready}", "Look again in a few minutes."
    return None


def no_utilisation(s: PoolSnapshot, now: datetime) -> tuple[str, str]:
    """(cause, action) for a pool with no GPU utilisation sample in the window."""
    return _not_reporting_yet(
        s, now, just_ready="its agent's samples are rolled up each minute.",
        none_ready=("No node of the pool has been Ready yet, so none reports GPU utilisation.",
                    "Nothing to do: the check reads the samples once a node is Ready."),
    ) or ("The per-minute rollup has not run, or no node agent reports GPU utilisation.",
          "Start the worker (the per-minute rollup) and the node agents; the check then reads the pool's samples.")  # fmt: skip


def no_agent_report(s: PoolSnapshot, now: datetime) -> tuple[str, str]:
    """(cause, action) for a pool none of whose node agents has reported."""
    return _not_reporting_yet(
        s, now, just_ready="its agent reports within minutes.",
        none_ready=("No node of the pool has been Ready yet, so no node agent reports.",
                    "Nothing to do: the check reads the agents' reports once a node is Ready."),
    ) or ("The node agents are not joined or not running.",
          "Join the node agents (join token on the node page, then `python -m monitoring.agent`) so they report Xids and driver/CUDA versions.")  # fmt: skip


def no_metered_cost(s: PoolSnapshot, now: datetime) -> tuple[str, str]:
    """(cause, action) for a pool with no metered cost in the window."""
    first = min((n.created_at for n in s.nodes), default=None)
    if first is None:
        return "The pool has had no node, so nothing is billed yet.", "Nothing to do: its costs start with its first node."
    metered_at = first.replace(minute=0, second=0, microsecond=0) + METERED_AFTER
    if now < metered_at:
        return (f"The pool's first hour is metered when it has ended, at {metered_at:%H:%M} UTC.",
                "Look again after that; the costs page shows the hours so far as accruing meanwhile.")  # fmt: skip
    return ("Hourly metering has not run for this pool yet.",
            "Start the worker (hourly metering); then the check compares the last 24 h with the week before.")  # fmt: skip


def too_early_to_judge(first_minute: datetime | None, now: datetime) -> tuple[str, str] | None:
    """(cause, action) while the samples span under JUDGED_AFTER, else None: judge them."""
    if first_minute is None or now - first_minute >= JUDGED_AFTER:
        return None
    return ("Under an hour of samples: a job's first minutes (loading data, compiling) keep its GPUs low.",
            f"Nothing to do yet: the check judges from an hour of samples, at {first_minute + JUDGED_AFTER:%H:%M} UTC.")  # fmt: skip
