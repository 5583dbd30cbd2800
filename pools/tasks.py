"""django-q2 tasks: thin, idempotent, level-triggered wrappers around services (design §5)."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone
from django_q.models import Schedule

from pools.controllers import autoscaler, lifecycle, repair
from pools.controllers.scheduler import scheduler_pass
from pools.services.fragmentation import fragmentation_record_weekly

SOON = "pools.reconcile_soon"


def schedule_once(*, name: str, func: str, next_run) -> None:
    """Book a one-off run of `func` at `next_run` under `name`, several workers or not.

    django-q2's schedule name is not unique, so two workers booking the first run at once can
    both insert one; `update_or_create` would then fail on every later run (two rows match).
    Here the rows of the name are locked and the extras deleted: at most one survives."""
    with transaction.atomic():
        rows = list(Schedule.objects.select_for_update().filter(name=name).order_by("pk"))
        if not rows:
            Schedule.objects.create(name=name, func=func, schedule_type=Schedule.ONCE, repeats=1, next_run=next_run)
            return
        Schedule.objects.filter(pk__in=[r.pk for r in rows[1:]]).delete()
        Schedule.objects.filter(pk=rows[0].pk).update(func=func, schedule_type=Schedule.ONCE, repeats=1, next_run=next_run)


def reconcile_all() -> dict[str, int]:
    """Make every live pool match its spec. Scheduled every minute by a data migration; when a
    provisioning step ends sooner, a one-off schedule wakes the controller then (like a
    Kubernetes controller's RequeueAfter), so nodes are not held back by the minute tick."""
    now = timezone.now()
    results = lifecycle.reconcile_all(now=now)
    due = lifecycle.next_wakeup(after=now)
    if due is not None and due <= now + timedelta(minutes=1):
        schedule_once(name=SOON, func="pools.tasks.reconcile_all", next_run=due)
    return {"pools": len(results), "claimed": sum(1 for r in results if r.claimed), "errors": sum(1 for r in results if r.error)}


AUTOSCALE_SOON = "pools.autoscale_soon"
AUTOSCALE_PERIOD = timedelta(seconds=30)


def autoscale_all() -> dict[str, int]:
    """Evaluate every pool's autoscaler every 30 s (issue 5 §7): a data migration schedules it
    every minute (django-q2's finest interval) and each run books a one-off run 30 s later."""
    now = timezone.now()
    results = autoscaler.autoscale_all(now=now)
    schedule_once(name=AUTOSCALE_SOON, func="pools.tasks.autoscale_all", next_run=now + AUTOSCALE_PERIOD)
    return {"pools": len(results), "scaled": sum(1 for r in results if r.reason in ("ScaledUp", "ScaledDown"))}


def repair_all() -> dict[str, int]:
    """Auto-repair every pool (issue 6 §5), scheduled every minute by a data migration."""
    return {"started": repair.repair_all(now=timezone.now())}


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
