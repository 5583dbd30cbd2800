"""django-q2 tasks of the simulated cluster: thin, idempotent wrappers around services (design §5)."""

from __future__ import annotations

from django.utils import timezone

from pools.fragmentation_service import fragmentation_record_weekly
from pools.scheduler_service import scheduler_pass


def scheduler_pass_task() -> dict[str, int]:
    """One scheduler pass (level-triggered: binds whatever is Pending now)."""
    result = scheduler_pass(now=timezone.now())
    return {
        "scheduled": len(result.scheduled),
        "unschedulable": len(result.unschedulable),
        "preempted": len(result.preempted),
        "succeeded": len(result.succeeded),
    }


def fragmentation_record_task() -> int:
    """The weekly fragmentation trend point of every pool and of the cluster (idempotent)."""
    return len(fragmentation_record_weekly(now=timezone.now()))
