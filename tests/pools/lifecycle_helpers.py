"""Shared helpers of the lifecycle tests: an approved pool and a virtual clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pools.controllers import context, lifecycle
from pools.models import GpuNodePool, Node, PoolEvent, PoolOrder
from pools.models.cloud import SimMachine, SimPayment
from pools.services import pools as services

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
TICK = timedelta(seconds=15)


def approved_pool(actors, document, *, now=T0) -> GpuNodePool:
    pool = services.pool_create(user=actors["lead"], document=document, now=now)
    services.order_approve(user=actors["admin"], order=pool.orders.get(), now=now)
    return pool


def reconcile(pool, now):
    return lifecycle.pool_reconcile(pool_id=pool.pk, now=now)


def run_until(pool, start, *, phase="Ready", limit=timedelta(hours=2), tick=TICK):
    """Reconcile every `tick` of virtual time until the pool reaches `phase`; returns the moment."""
    now = start
    while now <= start + limit:
        if reconcile(pool, now).phase == phase:
            return now
        now += tick
    raise AssertionError(f"pool {pool.name} not {phase} within {limit}: {GpuNodePool.objects.get(pk=pool.pk).pending_reason}")


def passes_are_idempotent(pool, start, *, ticks, tick=TICK):
    """Reconcile twice at each of `ticks` moments from `start`: the second pass of a moment
    must change nothing (design §5: level-triggered, idempotent passes)."""
    now = start
    for _ in range(ticks):
        reconcile(pool, now)
        once = snapshot()
        reconcile(pool, now)
        assert snapshot() == once, f"second pass at {now} changed state"
        now += tick


def live_nodes(pool):
    return list(Node.objects.filter(pool=pool).exclude(phase="Terminated").order_by("name"))


def reasons(pool, node=None):
    events = PoolEvent.objects.filter(pool=pool).order_by("first_timestamp", "id")
    if node is not None:
        events = events.filter(node=node)
    return list(events.values_list("reason", flat=True))


def snapshot():
    """Everything a pass may change, to compare two runs."""
    return (
        list(Node.objects.order_by("name").values_list("name", "phase", "step", "step_due_at", "attempts", "last_error", "provider_id", "release_reason", "lease_end")),
        list(PoolEvent.objects.order_by("id").values_list("pool_id", "node_id", "reason", "message", "count")),
        list(PoolOrder.objects.order_by("pk").values_list("pk", "status")),
        list(SimPayment.objects.order_by("order_id").values_list("order_id", "amount")),
        list(SimMachine.objects.order_by("client_token").values_list("client_token", "status", "step", "step_done", "step_due_at")),
        list(GpuNodePool.objects.order_by("pk").values_list("pk", "phase", "pending_reason", "observed_generation")),
    )


def crash_before_events(monkeypatch, **crashes: int) -> None:
    """Kill the pass (a RuntimeError) before it records each named event, that many times: a
    worker dying between a step's work and its record (`crash_before_events(mp, OrderPaid=1)`)."""
    real = context.event_record

    def flaky(**kwargs):
        if crashes.get(kwargs["reason"]):
            crashes[kwargs["reason"]] -= 1
            raise RuntimeError(f"worker killed before recording {kwargs['reason']}")
        return real(**kwargs)

    monkeypatch.setattr(context, "event_record", flaky)
