"""The batched autoscaler pass (issue 9) decides and acts exactly like autoscaling each pool on
its own: `autoscale_all` decides every pool from one fleet view and sends only pools that act
(scale, or record a blocked or limited decision) through the per-pool pass. The same pools go
through a scale-up, a rate limit, a stabilised dip and a scale-down, once with `autoscale_all`
and once with `pool_autoscale` per pool, and every tick's state is compared."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import transaction

from pools.controllers.autoscaler import autoscale_all, pool_autoscale
from pools.controllers.scheduler import scheduler_pass
from pools.models import GpuNodePool, Node, PoolEvent, ScalingActivity
from pools.models.pods import Pod
from tests.pools.autoscaler_helpers import SCALING, memory_used
from tests.pools.pod_helpers import T0, pool_with_nodes, submit

NODE_POOL_ID = re.compile(r"(?<=-)\d+(?=-\d{3}\b)")  # node names hold the pool's id, which differs per run on PostgreSQL


def state() -> tuple:
    return (
        [(NODE_POOL_ID.sub("#", name), *rest) for name, *rest in Node.objects.order_by("name").values_list("name", "billing", "phase", "release_reason")],
        list(ScalingActivity.objects.order_by("at", "id").values_list("pool__name", "at", "from_nodes", "to_nodes", "reason", "blocked", "metrics")),
        sorted((pool, kind, reason, NODE_POOL_ID.sub("#", message), count) for pool, kind, reason, message, count in PoolEvent.objects.values_list("pool__name", "type", "reason", "message", "count")),
        list(GpuNodePool.objects.order_by("pk").values_list("name", "scaling_history")),
    )


def drive(actors, step) -> list[tuple]:
    pool = pool_with_nodes(actors["lead"], node_labels={"gpu-class": "a100", "pool": "train"}, scaling=SCALING, burst={"enabled": True, "maxNodes": 4})
    pool_with_nodes(actors["lead"], name="plain", node_labels={"pool": "other"})  # no scaling spec: left alone
    for index in range(2):
        submit(actors["member"], f"busy-{index}", gpus=8)
    scheduler_pass(now=T0)
    for index in range(4):
        submit(actors["member"], f"queued-{index}", gpus=8)
    states = []
    for minutes, memory in ((0, 99), (0.5, 99), (1, 99), (10, 5), (20, 5), (45, 5), (50, 5)):
        if minutes == 10:
            Pod.objects.filter(name__startswith="queued").delete()  # the queue drains
        memory_used(pool, memory)
        step(T0 + timedelta(minutes=minutes))
        states.append(state())
    return states


def run(actors, step) -> list[tuple]:
    with transaction.atomic():
        states = drive(actors, step)
        transaction.set_rollback(True)
    return states


def per_pool(now):
    for pool_id in GpuNodePool.objects.active().order_by("pk").values_list("pk", flat=True):
        assert pool_autoscale(pool_id=pool_id, now=now).claimed


def batched(now):
    assert all(r.claimed for r in autoscale_all(now=now))


@pytest.mark.django_db
def test_the_batched_autoscaler_does_what_autoscaling_each_pool_does(actors):
    one_by_one = run(actors, per_pool)
    together = run(actors, batched)
    for tick, (a, b) in enumerate(zip(one_by_one, together, strict=True)):
        assert a == b, f"tick {tick}: the batched pass differs"
    reasons = [reason for _, _, _, _, reason, _, _ in together[-1][1]]
    assert {"ScaledUp", "ScaledDown"} <= set(reasons), reasons
    assert len(reasons) > 2  # limited or stabilised decisions were recorded along the way
