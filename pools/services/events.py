"""Recording Kubernetes-style events: the pool's timeline is how users debug (design §3).

Like the Kubernetes event recorder, a repeat of the same (object, type, reason, message) within
a short window bumps `count` and `last_timestamp` instead of adding a row, so a controller that
retries every pass does not bury the timeline.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import F
from django.utils import timezone

from pools.models import GpuNodePool, Node, PoolEvent

NORMAL = PoolEvent.Type.NORMAL
WARNING = PoolEvent.Type.WARNING
AGGREGATION_WINDOW = timedelta(minutes=10)


def event_record(
    *,
    pool: GpuNodePool,
    reason: str,
    message: str,
    type: str = NORMAL,
    node: Node | None = None,
    actor=None,
    now: datetime | None = None,
) -> PoolEvent:
    now = now or timezone.now()
    actor = actor if actor is not None and getattr(actor, "is_authenticated", False) else None
    recent = PoolEvent.objects.filter(
        pool=pool,
        node=node,
        type=type,
        reason=reason,
        message=message,
        last_timestamp__gte=now - AGGREGATION_WINDOW,
    ).order_by("-last_timestamp")[:1]
    existing = next(iter(recent), None)
    if existing is not None:
        # The database adds 1 to what it holds (another worker may have bumped it meanwhile);
        # the instance returned says what this call saw, without reading the row again.
        PoolEvent.objects.filter(pk=existing.pk).update(count=F("count") + 1, last_timestamp=now)
        existing.count += 1
        existing.last_timestamp = now
        return existing
    return PoolEvent.objects.create(
        pool=pool,
        node=node,
        type=type,
        reason=reason,
        message=message,
        first_timestamp=now,
        last_timestamp=now,
        actor=actor,
    )
