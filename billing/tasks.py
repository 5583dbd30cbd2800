"""django-q2 tasks: thin, idempotent wrappers around billing services (design §5)."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.utils import timezone
from django_q.tasks import async_task

from billing import budgets, services
from billing.month_spend import months_metered
from pools.claims import Part, collector_paused
from pools.services.notifications import delivery_budget, notifications_redeliver, task_timeout_s

# Of the worker's task timeout: metering starts no hour past this share, and telling people
# (mail, webhook) starts no call that could run past the next, so the task ends in time.
METERING_SHARE, TELLING_SHARE = 0.6, 0.3


def meter_pending() -> dict[str, int | list[str]]:
    """Hourly, two minutes past the top of the hour (migration 0008): meter every complete hour
    not metered yet, then check budgets and send the alerts a dead worker left unsent.

    With `EBCLOUD_METER_PARTS` above 1 each pending part of an hour becomes a task of its own
    (`meter_part`), so the workers meter an hour together; each part checks its pools' budgets,
    and the task that completes the hour the teams'."""
    now = timezone.now()
    parts = settings.EBCLOUD_METER_PARTS
    if parts > 1:
        pending = services.parts_pending(now=now, parts=parts)
        for hour, missing in pending:
            for part in missing:
                async_task("billing.tasks.meter_part", hour.isoformat(), part.index, part.count)
        notifications_redeliver(now=now)
        return {"hours": len(pending), "parts": sum(len(missing) for _, missing in pending)}
    # Stay well inside the worker's task timeout; the next run continues a long catch-up.
    results = services.meter_pending(now=now, time_budget_s=task_timeout_s() * METERING_SHARE)
    alerts = []
    with delivery_budget(task_timeout_s() * TELLING_SHARE):  # the alerts raised now are sent inline, under it
        for moment in months_metered([r.hour for r in results if r.metered], now=now):
            alerts += budgets.budgets_evaluate(now=moment)
        alerts += budgets.budgets_evaluate(now=now)
        notifications_redeliver(now=now)
    failed = [f"{r.label}: {r.error}" for r in results if r.error]
    return {"hours": sum(1 for r in results if r.metered), "alerts": len(alerts), **({"failed": failed} if failed else {})}


def meter_part(hour: str, index: int, count: int, now: str | None = None) -> dict[str, int]:
    """One part of an hour's metering (`meter_pending`'s fan-out); idempotent. The part checks
    its pools' budgets (their hour is whole), and the part that completes the hour the teams'
    too, against the whole hour's costs: the parts share the check as they share the hour.
    `now` (ISO 8601): the clock of a replay (bench/control_plane.py runs a fleet's day on a
    fixed date); the fan-out sends none, and the task reads the wall clock."""
    part = Part(index, count)
    now = datetime.fromisoformat(now) if now else timezone.now()
    with collector_paused():
        result = services.meter_hour(hour=datetime.fromisoformat(hour), part=part, now=now)
        # An hour of an earlier month (the month's last, metered after midnight; a catch-up)
        # counts against that month's budgets, not this month's.
        at = (months_metered([result.hour], now=now) or [now])[0]
        with delivery_budget(task_timeout_s() * TELLING_SHARE):
            alerts = budgets.budgets_evaluate(now=at, part=part, teams=result.complete) if result.metered else []
    return {"metered": int(result.metered), "complete": int(result.complete), "alerts": len(alerts)}
