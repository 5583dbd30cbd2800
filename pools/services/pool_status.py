"""The pool's status written from its rows at once, when a request changed what it derives from.

The controller writes a pool's status (phase, pendingReason, conditions) each pass. A request
that withdraws an order (a lowered `nodeCount.min`) changes the orders the stored status names
at once; left to the next pass, the answer to that request, the pool page and `describe` would
still say the withdrawn order awaits approval. This writes what the controller's pass writes for
a pool with nothing to do (`pools.controllers.lifecycle.reconcile_all`); its next pass adds any
stall it meets.
"""

from __future__ import annotations

from datetime import datetime

from pools.controllers.state import snapshots_load
from pools.core import lifecycle as rules
from pools.models import GpuNodePool
from pools.services.events import event_record


def pool_status_refresh(*, pool: GpuNodePool, user, now: datetime) -> None:
    """Write `pool`'s status from its rows now. The caller holds the pool's lock
    (`pool_orders_lock`); `pool` is the row it returned, updated here too."""
    status = rules.status_of(snapshots_load([pool])[pool.pk], now=now)
    news = status.ready_news(pool.name, pool.phase)
    GpuNodePool.objects.filter(pk=pool.pk, deleted_at__isnull=True).exclude(phase=GpuNodePool.Phase.DELETING).update(**status.columns())
    for name, value in status.columns().items():
        setattr(pool, name, value)
    if news:  # the controller's next pass finds it Ready already and says nothing
        event_record(pool=pool, reason="PoolReady", message=news, actor=user, now=now)
