"""The background work of a journey, run in-process between browser steps (no worker): the
lifecycle controller and the per-minute rollup on a virtual clock, with the simulated cloud's
realistic step durations (a node takes about four minutes to become Ready), failure rates 0.

The clock runs ahead of the wall clock, so the pool pages show a real bring-up: the samples of
each virtual minute draw the watermark chart from an empty pool to its full capacity.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from monitoring.services import pool_samples_rollup
from pools.controllers.lifecycle import pool_reconcile
from pools.models import GpuNodePool

TICK = timedelta(seconds=15)
MINUTE = timedelta(minutes=1)


def bring_up(
    pools: list[GpuNodePool], *, start: datetime, limit: timedelta = timedelta(minutes=30)
) -> datetime:
    """Reconcile every pool each TICK until all are Ready, rolling up a sample each minute
    (the first one before any node exists); returns the virtual moment they were all Ready."""
    now, next_sample = start, start
    while now <= start + limit:
        if now >= next_sample:
            pool_samples_rollup(now=now)
            next_sample += MINUTE
        phases = [pool_reconcile(pool_id=pool.pk, now=now).phase for pool in pools]
        if all(phase == GpuNodePool.Phase.READY for phase in phases):
            return now
        now += TICK
    states = {p.name: GpuNodePool.objects.get(pk=p.pk).pending_reason for p in pools}
    raise AssertionError(f"pools not Ready within {limit}: {states}")


def sample_minutes(*, start: datetime, minutes: int) -> datetime:
    """The rollup of `minutes` further minutes after `start`; returns the last one."""
    now = start
    for _ in range(minutes):
        now += MINUTE
        pool_samples_rollup(now=now)
    return now
