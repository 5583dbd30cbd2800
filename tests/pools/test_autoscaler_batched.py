"""The batched autoscaler pass (issue 9) decides and acts exactly like autoscaling each pool on
its own: `autoscale_all` decides every pool from one fleet view and sends only pools that act
(scale, or record a blocked or limited decision) through the per-pool pass. The same pools go
through a scale-up, a rate limit, a stabilised dip and a scale-down, once with `autoscale_all`
and once with `pool_autoscale` per pool, and every tick's state is compared. A pool that acts
decides its scale-up on its team's Pending pods read again with the capacity, after the claim:
a pod bound meanwhile is counted once, where it runs."""

from __future__ import annotations

import re
from datetime import timedelta
from unittest import mock

import pytest
from django.db import transaction

from pools.controllers import autoscaler
from pools.controllers.autoscaler import autoscale_all, pool_autoscale
from pools.controllers.scheduler import scheduler_pass
from pools.models import GpuNodePool, Node, PoolEvent, ScalingActivity
from pools.models.pods import Pod
from pools.services import pods as pod_services
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
            Node.objects.filter(billing=Node.Billing.ON_DEMAND).update(phase=Node.Phase.READY, ready_at=T0 + timedelta(minutes=minutes))  # the burst nodes come up: a node not Ready yet is never scaled down
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


@pytest.mark.django_db
def test_a_pod_bound_after_the_pass_read_the_queue_buys_no_node(actors):
    """The pass reads the queue (new-0 Pending, both nodes full) and decides to scale up; before
    the pool is claimed, busy-1 ends and another worker's scheduler pass binds new-0 in its
    place. The acting pass reads the queue again with the capacity: new-0 runs, nothing is bought."""
    pool = pool_with_nodes(actors["lead"], node_labels={"gpu-class": "a100", "pool": "train"}, scaling=SCALING, burst={"enabled": True, "maxNodes": 4})
    for index in range(2):
        submit(actors["member"], f"busy-{index}", gpus=8, cpu="1", duration="10h")
    scheduler_pass(now=T0)
    submit(actors["member"], "new-0", gpus=8, cpu="1", duration="10h")
    memory_used(pool, 95)
    now = T0 + timedelta(seconds=20)
    real = autoscaler.histories_write

    def then_bind(stores, **kwargs):  # after every pool's dry run, before the claims
        real(stores, **kwargs)
        pod_services.pod_delete(user=actors["member"], pod=Pod.objects.get(name="busy-1"), now=now)
        scheduler_pass(now=now)

    with mock.patch.object(autoscaler, "histories_write", then_bind):
        [result] = autoscale_all(now=now)
    assert Pod.objects.get(name="new-0").phase == Pod.Phase.RUNNING
    assert result.reason != "ScaledUp" and not Node.objects.filter(billing=Node.Billing.ON_DEMAND).exists(), result
