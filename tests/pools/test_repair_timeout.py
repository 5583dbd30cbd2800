"""Auto-repair always ends (seed P4, T3): a GPU reset or reboot its agent never acknowledges
fails after `EBCLOUD_REPAIR_COMMAND_TIMEOUT_SECONDS` and the ladder climbs, up to a replacement,
so it no longer holds the pool's other repairs back; and a pool being deleted is not repaired."""

from __future__ import annotations

from datetime import timedelta

import pytest

from monitoring.models import AgentCommand, NodeAgentState
from monitoring.services import commands_deliver
from pools.controllers.repair import pool_repair
from pools.models import Node, PoolEvent
from pools.models.repair import RepairApproval
from pools.services import pools as services
from tests.pools.lifecycle_helpers import approved_pool, live_nodes, reconcile, run_until
from tests.pools.pod_helpers import T0, pool_with_nodes
from tests.pools.repair_helpers import xid

TIMEOUT = timedelta(minutes=15)  # EBCLOUD_REPAIR_COMMAND_TIMEOUT_SECONDS default


def at(minutes):
    return T0 + timedelta(minutes=minutes)


@pytest.fixture
def pool(actors):
    return pool_with_nodes(actors["lead"], nodes=5)


def commands(node):
    return list(AgentCommand.objects.filter(node=node).order_by("pk").values_list("action", "status"))


def test_a_reset_its_agent_never_acknowledges_fails_after_the_timeout_and_the_ladder_climbs_to_a_replacement(pool):
    """The agent died with its machine after an Xid 48: the reset stays Pending. It used to leave
    the node Repairing for ever; now it fails at the timeout (`RepairFailed` says so), the same
    pass starts the reboot, and a reboot never acknowledged either ends in a replacement."""
    node = pool.nodes.order_by("name").first()
    xid(node, 48, at=T0)
    assert pool_repair(pool_id=pool.pk, now=at(11)) == 1
    assert pool_repair(pool_id=pool.pk, now=at(11) + TIMEOUT - timedelta(seconds=1)) == 0  # within the timeout: it waits
    node.refresh_from_db()
    assert node.phase == "Repairing" and commands(node) == [("reset_gpu", "Pending")]
    assert not PoolEvent.objects.filter(node=node, reason="RepairFailed").exists()

    assert pool_repair(pool_id=pool.pk, now=at(11) + TIMEOUT) == 1  # the reset failed; the reboot starts
    node.refresh_from_db()
    assert node.phase == "Repairing" and commands(node) == [("reset_gpu", "Failed"), ("reboot", "Pending")]
    reset = AgentCommand.objects.get(node=node, action="reset_gpu")
    assert reset.message == "timed out: the node's agent did not acknowledge it within 15m0s" and reset.finished_at == at(26)
    failed = PoolEvent.objects.get(node=node, reason="RepairFailed")
    assert failed.type == "Warning" and "did not acknowledge it within 15m0s" in failed.message
    assert [c["action"] for c in commands_deliver(node=node, now=at(27))] == ["reboot"]  # the failed reset is no longer sent

    assert pool_repair(pool_id=pool.pk, now=at(26) + TIMEOUT) == 1  # the reboot failed too: replace
    node.refresh_from_db()
    assert commands(node) == [("reset_gpu", "Failed"), ("reboot", "Failed")]
    assert (node.phase, node.release_reason) == ("Terminated", "Repair")
    assert PoolEvent.objects.filter(node=node, reason="RepairFailed").count() == 2
    assert "is drained, released and replaced" in PoolEvent.objects.filter(node=node, reason="RepairStarted").latest("id").message
    assert NodeAgentState.objects.get(node=node).commands_pending == 0


def test_an_unanswered_reset_no_longer_holds_the_pools_other_repairs_back(actors):
    """The second fault (Xid 79, a GPU off the bus) waited cordoned behind the first node's
    reset for as long as that stayed Pending: for ever. Now it waits for the ladder of the
    first node only, which ends in bounded time."""
    big = pool_with_nodes(actors["lead"], name="big", nodes=10, nodeCount={"min": 0, "max": 10})  # 2 of 10 faulty: no pause
    first, second = big.nodes.order_by("name")[:2]
    xid(first, 48, at=T0)
    assert pool_repair(pool_id=big.pk, now=at(11)) == 1
    xid(second, 79, at=at(20))
    assert pool_repair(pool_id=big.pk, now=at(20)) == 0
    second.refresh_from_db()
    assert second.phase == "Cordoned"  # its turn waits for the reset in progress
    # 26: the reset timed out, the reboot starts; 41: the reboot timed out, the node is replaced;
    # 50: the second fault waits while the first node's successor may still be ordered; 51: its turn.
    assert [pool_repair(pool_id=big.pk, now=at(minute)) for minute in (26, 41, 50, 51)] == [1, 1, 0, 1]
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.phase, first.release_reason) == ("Terminated", "Repair")
    assert (second.phase, second.release_reason) == ("Terminated", "Repair")


def test_a_pool_being_deleted_is_not_repaired(actors, train_document):
    """Auto-repair replaced a node of a pool being deleted ("drained, released and replaced"),
    and `NodeReleased` promised a replacement that never came."""
    pool = approved_pool(actors, train_document)
    run_until(pool, T0)
    node = live_nodes(pool)[0]
    later = T0 + timedelta(hours=1)
    services.pool_delete(user=actors["lead"], pool=pool, now=later)
    xid(node, 79, at=later)
    assert pool_repair(pool_id=pool.pk, now=later + timedelta(seconds=30)) == 0
    reconcile(pool, later + timedelta(minutes=1))
    node.refresh_from_db()
    assert (node.phase, node.release_reason, node.successor_id) == ("Terminated", "PoolDeleted", None)
    assert not PoolEvent.objects.filter(node=node, reason="RepairStarted").exists()
    assert "replacement" not in PoolEvent.objects.get(node=node, reason="NodeReleased").message


def test_deleting_a_pool_closes_its_open_repair_request(actors):
    gated = pool_with_nodes(actors["lead"], nodes=5, autoRepairPolicy={"requireApproval": True})
    node = gated.nodes.order_by("name").first()
    xid(node, 48, at=T0)
    assert pool_repair(pool_id=gated.pk, now=at(11)) == 0
    assert RepairApproval.objects.get(node=node).status == "Pending"
    services.pool_delete(user=actors["lead"], pool=gated, now=at(12))
    assert pool_repair(pool_id=gated.pk, now=at(13)) == 0
    request = RepairApproval.objects.get(node=node)
    assert request.status == "Cancelled" and "being deleted" in request.note
    assert not AgentCommand.objects.exists()
    assert Node.objects.get(pk=node.pk).phase == "Cordoned"  # the deletion drains it, not the repair pass
