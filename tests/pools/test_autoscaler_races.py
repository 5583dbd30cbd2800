"""Two workers autoscale two pools of one team at once: one Pending pod buys one node, as in one
pass (CA expands one node group per pod). The decision and the purchase of a team's pools are
serialised by the team's row, so the second worker sees the first one's Ordering node as
upcoming. The pools are in two regions: their quota rows, which a scale-up locks too, do not
serialise them. A scheduler pass that waits on a scale-down's lock sees the nodes it chose
cordoned. PostgreSQL only (SQLite has one writer)."""

from __future__ import annotations

import threading
from functools import partial
from unittest import mock

import pytest
from django.db import connection

from pools.controllers import autoscaler
from pools.controllers.autoscaler import pool_autoscale
from pools.controllers.scheduler import scheduler_pass
from pools.models import Node
from pools.models.pods import Pod
from pools.services import pods as pod_services
from tests.pools.autoscaler_helpers import memory_used
from tests.pools.pod_helpers import T0, submit
from tests.pools.test_autoscaler_ca_rules import fill, train_pool
from tests.pools.test_autoscaler_scale_down_cordon import LATER, pinned_document, scaling_down_pool
from tests.race import concurrently

postgresql_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent workers need PostgreSQL (SQLite has one writer)")


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_two_workers_autoscaling_two_pools_of_a_team_buy_one_node_for_one_pod(actors, monkeypatch):
    pools = train_pool(actors, name="pool-a", nodes=1), train_pool(actors, name="pool-b", nodes=1, region="cn-north-1a")
    fill(actors)
    submit(actors["member"], "queued-0", gpus=8)
    for pool in pools:
        memory_used(pool, 95)
    barrier, real_lock = threading.Barrier(2, timeout=30), autoscaler.quota_limits_lock

    def meet_then_lock(**kwargs):
        barrier.wait()  # both workers decided from what they read; neither has bought yet
        return real_lock(**kwargs)

    monkeypatch.setattr(autoscaler, "quota_limits_lock", meet_then_lock)
    outcomes = concurrently(*[partial(pool_autoscale, pool_id=pool.pk, now=T0) for pool in pools])  # raises what either met
    results = {pool.name: outcome for pool, outcome in zip(pools, outcomes, strict=True)}
    assert sorted(r.reason for r in results.values()) == ["PodsFitUpcomingOrFreeCapacity", "ScaledUp"], results
    assert Node.objects.filter(billing=Node.Billing.ON_DEMAND).count() == 1


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_scheduler_pass_queued_on_the_scale_down_lock_places_nothing_on_the_node_removed(actors):
    """Worker A scales the burst node down; once it holds the scheduler's lock, worker B submits a
    pod annotated safe-to-evict "false" that only the burst node has room for and runs a
    scheduler pass, which waits for A's transaction. A drains only after B's pass: B saw the
    node cordoned with the plan, so the pod waits Pending, neither bound there nor evicted."""
    pool, burst = scaling_down_pool(actors)
    locked, passed = threading.Event(), threading.Event()
    real_lock, real_drain = autoscaler.scheduler_lock, autoscaler.drain_start

    def lock_then_signal():
        real_lock()
        locked.set()

    def drain_after_the_pass(p, node, **kwargs):
        assert passed.wait(30), "the other worker's scheduler pass did not finish"
        return real_drain(p, node, **kwargs)

    def other_worker():
        assert locked.wait(30), "the scale-down never took the scheduler's lock"
        pod_services.pod_create(user=actors["member"], document=pinned_document(), now=LATER)
        try:
            return scheduler_pass(now=LATER)  # queues on the advisory lock until A commits
        finally:
            passed.set()

    with mock.patch.object(autoscaler, "scheduler_lock", lock_then_signal), mock.patch.object(autoscaler, "drain_start", drain_after_the_pass):
        result, _ = concurrently(partial(pool_autoscale, pool_id=pool.pk, now=LATER), other_worker)
    assert result.reason == "ScaledDown", result
    pinned = Pod.objects.get(name="pinned")
    assert pinned.node_id is None and pinned.reason != "Evicted", (pinned.phase, pinned.reason)
    burst.refresh_from_db()
    assert burst.release_reason and burst.unschedulable
