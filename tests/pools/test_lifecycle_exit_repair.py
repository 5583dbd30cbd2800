"""Exits and repairs meet (D1, D2; seed P4): a node under repair whose agent falls silent is
reported and keeps its phase, and a reclaim notice for a node already draining shortens its
drain to the reclaim, with a replacement only where its drain had one."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pools.controllers import lifecycle
from pools.controllers.repair import pool_repair
from pools.models import Node, PoolEvent
from pools.providers import simulated
from pools.services import pools as services
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import T0, approved_pool, live_nodes, reconcile, run_until
from tests.pools.repair_helpers import xid

GRACE = timedelta(minutes=5)  # EBCLOUD_HEARTBEAT_GRACE_SECONDS default


@pytest.fixture
def ready_pool(actors, train_document):
    pool = approved_pool(actors, train_document)
    run_until(pool, T0)
    return pool


@pytest.mark.parametrize(("after", "phase"), [(timedelta(minutes=1), "Cordoned"), (timedelta(minutes=11), "Repairing")])
def test_a_silent_node_under_repair_is_reported_once_and_keeps_its_phase(ready_pool, after, phase):
    """The heartbeat check watched Ready and Unknown nodes only: a node whose agent died during
    its repair was never reported. Now its silence is one `NodeSilent` Warning; it stays in its
    repair phase (never Unknown, then Ready at the next heartbeat: only the repair pass returns
    it to service), through the per-pool pass and the batched pass alike."""
    node, other = live_nodes(ready_pool)
    beat = T0 + timedelta(hours=1)
    Node.objects.filter(pk__in=[node.pk, other.pk]).update(last_heartbeat=beat)
    xid(node, 48, at=beat)
    pool_repair(pool_id=ready_pool.pk, now=beat + after)  # 1 min: cordoned, waiting; 11 min: reset sent
    assert Node.objects.get(pk=node.pk).phase == phase
    Node.objects.filter(pk=other.pk).update(last_heartbeat=beat + after + GRACE)
    silent = beat + GRACE + timedelta(seconds=1)
    lifecycle.reconcile_all(now=max(silent, beat + after))
    reconcile(ready_pool, max(silent, beat + after) + timedelta(minutes=1))
    assert Node.objects.get(pk=node.pk).phase == phase
    report = PoolEvent.objects.get(node=node, reason="NodeSilent")
    assert report.type == "Warning" and report.count == 1
    assert f"while {phase}: it stays {phase}" in report.message and "not acknowledged within 15m0s" in report.message
    assert not PoolEvent.objects.filter(node=node, reason__in=["NodeStatusUnknown", "NodeReady"], first_timestamp__gt=beat).exists()
    back = beat + after + timedelta(minutes=3)
    Node.objects.filter(pk=node.pk).update(last_heartbeat=back)  # the agent reports again: nothing to undo
    reconcile(ready_pool, back)
    assert Node.objects.get(pk=node.pk).phase == phase
    assert not PoolEvent.objects.filter(node=node, reason="NodeReady", first_timestamp__gt=beat).exists()


def spot_pool(actors):
    pool = approved_pool(actors, make_document("spot", preemptible=True, nodeCount={"min": 1, "max": 2}))
    run_until(pool, T0)
    return pool


def test_a_reclaim_notice_shortens_the_drain_of_a_node_leaving_a_pool_being_deleted(actors):
    """The notice was ignored for a node already draining: its drain ran past the reclaim and no
    `ReclaimNotice` was written. Now the drain ends by the reclaim, said once; the node was
    leaving for good (`PoolDeleted`, a retiring reason), so nothing replaces it."""
    pool = spot_pool(actors)
    node = live_nodes(pool)[0]
    simulated.pod_run(node_name=node.name, name="guarded", eviction_blocked=True)
    later = T0 + timedelta(hours=1)
    services.pool_delete(user=actors["lead"], pool=pool, now=later)
    reconcile(pool, later)
    node.refresh_from_db()
    assert (node.phase, node.drain_deadline) == ("Draining", later + timedelta(minutes=10))
    reclaim_at = simulated.reclaim_inject(provider_id=node.provider_id, now=later + timedelta(seconds=30))
    reconcile(pool, later + timedelta(seconds=30))
    lifecycle.reconcile_all(now=later + timedelta(seconds=60))
    node.refresh_from_db()
    assert (node.phase, node.drain_deadline) == ("Draining", reclaim_at)
    notice = PoolEvent.objects.get(node=node, reason="ReclaimNotice")
    assert notice.type == "Warning" and notice.count == 1
    assert "while it drains (PoolDeleted)" in notice.message and "no replacement is ordered" in notice.message
    assert reconcile(pool, reclaim_at).phase == "Deleted"
    node.refresh_from_db()
    assert (node.phase, node.terminated_at) == ("Terminated", reclaim_at)
    assert PoolEvent.objects.filter(node=node, reason="DrainTimeout").exists()


def test_a_reclaim_notice_shortens_the_drain_of_a_node_being_replaced_by_a_repair(actors):
    """A repair's replacement is a drain whose slot is refilled: the reclaim brings its end
    forward and says its replacement is ordered (the lifecycle orders it as for the repair)."""
    pool = spot_pool(actors)
    node = live_nodes(pool)[0]
    simulated.pod_run(node_name=node.name, name="guarded", eviction_blocked=True)
    later = T0 + timedelta(hours=1)
    xid(node, 79, at=later)
    assert pool_repair(pool_id=pool.pk, now=later) == 1
    node.refresh_from_db()
    assert (node.phase, node.release_reason, node.drain_deadline) == ("Draining", "Repair", later + timedelta(minutes=10))
    reclaim_at = simulated.reclaim_inject(provider_id=node.provider_id, now=later + timedelta(seconds=30))
    lifecycle.reconcile_all(now=later + timedelta(seconds=30))
    reconcile(pool, later + timedelta(seconds=60))
    node.refresh_from_db()
    assert (node.phase, node.release_reason, node.drain_deadline) == ("Draining", "Repair", reclaim_at)
    notice = PoolEvent.objects.get(node=node, reason="ReclaimNotice")
    assert notice.count == 1 and "while it drains (Repair)" in notice.message and "its replacement is ordered" in notice.message
    reconcile(pool, reclaim_at)
    node.refresh_from_db()
    assert node.phase == "Terminated"
    run_until(pool, reclaim_at)
    successor = live_nodes(pool)
    assert [n.phase for n in successor] == ["Ready"] and Node.objects.get(pk=node.pk).successor_id == successor[0].pk
