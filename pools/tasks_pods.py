"""django-q2 tasks of the simulated cluster: thin, idempotent wrappers around services (design §5)."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from pools.fragmentation_service import fragmentation_record
from pools.models_pods import FragmentationSample
from pools.scheduler_service import scheduler_lock, scheduler_pass


def scheduler_pass_task() -> dict[str, int]:
    """One scheduler pass (level-triggered: binds whatever is Pending now)."""
    result = scheduler_pass(now=timezone.now())
    return {
        "scheduled": len(result.scheduled),
        "unschedulable": len(result.unschedulable),
        "preempted": len(result.preempted),
        "succeeded": len(result.succeeded),
    }


WEEKLY_SLACK = timedelta(days=6)


def fragmentation_record_task() -> int:
    """The weekly fragmentation trend point of every pool and of the cluster. Idempotent: a
    second delivery of the same week's task (a retry, another worker) finds this week's
    cluster point and records nothing; the check and the write hold the scheduler's lock."""
    now = timezone.now()
    with transaction.atomic():
        scheduler_lock()
        if FragmentationSample.objects.filter(pool__isnull=True, taken_at__gt=now - WEEKLY_SLACK).exists():
            return 0
        return len(fragmentation_record(now=now))
