"""django-q2 tasks: thin, idempotent, level-triggered wrappers around services (design §5)."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django_q.models import Schedule
from django_q.tasks import async_task

from pools.claims import Part
from pools.controllers import autoscaler, lifecycle, repair
from pools.controllers.scheduler import scheduler_pass
from pools.services.fragmentation import fragmentation_record_weekly

SOON = "pools.reconcile_soon"


def schedule_once(*, name: str, func: str, next_run, args: tuple = ()) -> None:
    """Book a one-off run of `func(*args)` at `next_run` under `name`, several workers or not.

    django-q2's schedule name is not unique, so two workers booking the first run at once can
    both insert one; `update_or_create` would then fail on every later run (two rows match).
    Here the rows of the name are locked and the extras deleted: at most one survives."""
    fields = {"func": func, "args": repr(args) if args else None, "schedule_type": Schedule.ONCE, "repeats": 1, "next_run": next_run}
    with transaction.atomic():
        rows = list(Schedule.objects.select_for_update().filter(name=name).order_by("pk"))
        if not rows:
            Schedule.objects.create(name=name, **fields)
            return
        Schedule.objects.filter(pk__in=[r.pk for r in rows[1:]]).delete()
        Schedule.objects.filter(pk=rows[0].pk).update(**fields)


def tick_parts_queued(task: str) -> Part:
    """Split a per-minute pass over the workers (`EBCLOUD_TICK_PARTS`, by pool): queue
    `task(index, count)` for every part but the first, which is returned for the caller to run."""
    first, *others = Part.all_of(settings.EBCLOUD_TICK_PARTS)
    for part in others:
        async_task(task, part.index, part.count)
    return first


def reconcile_all() -> dict[str, int]:
    """Make every live pool match its spec. Scheduled every minute by a data migration; when a
    provisioning step ends sooner, a one-off schedule wakes the controller then (like a
    Kubernetes controller's RequeueAfter), so nodes are not held back by the minute tick.

    With `EBCLOUD_TICK_PARTS` above 1 the other parts of the pass are queued as tasks of their
    own (`reconcile_part`) and this one reconciles the first, so the workers share the tick
    (issue 23); parts never share a pool."""
    first = tick_parts_queued("pools.tasks.reconcile_part")
    return reconcile_part(first.index, first.count)


def reconcile_part(index: int, count: int) -> dict[str, int]:
    """One part of the lifecycle controller's pass: its pools, and its own one-off wake-up for
    the earliest step of their nodes that ends within the minute."""
    now, part = timezone.now(), Part(index, count)
    results = lifecycle.reconcile_all(now=now, part=part)
    due = lifecycle.next_wakeup(after=now, part=part)
    if due is not None and due <= now + timedelta(minutes=1):
        if count == 1:
            schedule_once(name=SOON, func="pools.tasks.reconcile_all", next_run=due)
        else:
            schedule_once(name=f"{SOON}.{index}-of-{count}", func="pools.tasks.reconcile_part", args=(index, count), next_run=due)
    return {"pools": len(results), "claimed": sum(1 for r in results if r.claimed), "errors": sum(1 for r in results if r.error)}


AUTOSCALE_SOON = "pools.autoscale_soon"
AUTOSCALE_PERIOD = timedelta(seconds=30)


def autoscale_all() -> dict[str, int]:
    """Evaluate every pool's autoscaler every 30 s (issue 5 §7): a data migration schedules it
    every minute (django-q2's finest interval) and each run books a one-off run 30 s later.
    Split like `reconcile_all` with `EBCLOUD_TICK_PARTS` (the others queued as `autoscale_part`)."""
    now = timezone.now()
    first = tick_parts_queued("pools.tasks.autoscale_part")
    result = autoscale_part(first.index, first.count)
    schedule_once(name=AUTOSCALE_SOON, func="pools.tasks.autoscale_all", next_run=now + AUTOSCALE_PERIOD)
    return result


def autoscale_part(index: int, count: int) -> dict[str, int]:
    """One part of the autoscaler's pass: its pools."""
    results = autoscaler.autoscale_all(now=timezone.now(), part=Part(index, count))
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
