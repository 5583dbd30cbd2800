"""A repair's cordon follows the node's row (seed P4, T3; issue 21): a Cordoned or Repairing node
stays cordoned in the cluster whoever lifts it, a repair pass killed between the cluster call and
the row is finished by the next pass with one `RepairSucceeded`, and a Ready node left cordoned
by a pass that died before lifting it (the order an older release wrote in) is uncordoned, while
an administrator's own `kubectl cordon` of a Ready node is left alone."""

from __future__ import annotations

from datetime import timedelta

import pytest

from monitoring.models import AgentCommand
from pools.controllers import lifecycle
from pools.controllers.repair import pool_repair
from pools.models import Node, PoolEvent
from pools.models.cloud import PoolClaim, SimClusterNode
from pools.providers import simulated_cluster
from pools.providers.simulated_cluster import SimulatedCluster
from tests.pools.pod_helpers import T0, pool_with_nodes
from tests.pools.repair_helpers import ack, xid

pytestmark = pytest.mark.django_db

STARTED = T0 + timedelta(minutes=11)  # the Xid 48 of T0 persisted ten minutes: the reset starts


class Killed(BaseException):
    """The worker dies here (as `kill -9` would): nothing after it runs, no handler catches it."""


def registered_pool(actors, nodes: int):
    pool = pool_with_nodes(actors["lead"], nodes=nodes, autoRepair=True, nodeCount={"min": 0, "max": nodes})
    for node in pool.nodes.all():
        SimulatedCluster().register_node(name=node.name, now=T0)
    return pool


@pytest.fixture
def pool(actors):
    return registered_pool(actors, 5)


def first(pool) -> Node:
    return pool.nodes.order_by("name").first()


def cordoned(node) -> bool:
    return SimClusterNode.objects.get(name=node.name).unschedulable


def reasons(node, *names) -> list[str]:
    return list(PoolEvent.objects.filter(node=node, reason__in=names).order_by("id").values_list("reason", flat=True))


def reset_acknowledged(pool) -> Node:
    """The first node's GPU reset started (Repairing, cordoned) and its agent says it held."""
    node = first(pool)
    xid(node, 48, at=T0, gpu=3)
    assert pool_repair(pool_id=pool.pk, now=STARTED) == 1
    assert cordoned(node) and Node.objects.get(pk=node.pk).phase == "Repairing"
    ack(AgentCommand.objects.get(node=node))
    return node


def restart(pool) -> None:
    """The dead worker's claim lapses (EBCLOUD_RECONCILE_CLAIM_SECONDS)."""
    PoolClaim.objects.filter(pk=pool.pk).update(claimed_until=None, owner="")


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_repair_pass_killed_at_the_uncordon_is_finished_by_the_next_with_one_repair_succeeded(pool, monkeypatch, when):
    """The row was made Ready before the uncordon and the event, so a worker
    killed there left the node Ready here and cordoned in the cluster for good (kube-scheduler
    never placed a pod there again), with no `RepairSucceeded`."""
    node = reset_acknowledged(pool)
    uncordon = SimulatedCluster.uncordon

    def dies(self, *, name, mark=False):
        if when == "after":
            uncordon(self, name=name, mark=mark)
        raise Killed

    monkeypatch.setattr(simulated_cluster.SimulatedCluster, "uncordon", dies)
    with pytest.raises(Killed):
        pool_repair(pool_id=pool.pk, now=STARTED + timedelta(minutes=1))
    monkeypatch.setattr(simulated_cluster.SimulatedCluster, "uncordon", uncordon)
    restart(pool)
    for minute in (1, 2, 3):  # a lifecycle pass between: its drift check must not undo the finish
        lifecycle.reconcile_all(now=STARTED + timedelta(minutes=minute, seconds=30))
        pool_repair(pool_id=pool.pk, now=STARTED + timedelta(minutes=minute + 1))
    node.refresh_from_db()
    assert (node.phase, node.unschedulable, cordoned(node)) == ("Ready", False, False)
    assert reasons(node, "RepairSucceeded") == ["RepairSucceeded"]


def test_a_node_under_repair_uncordoned_by_someone_else_is_cordoned_again(actors):
    """`kubectl uncordon` of a node whose GPU fault waits for its repair, or whose reset runs,
    would let kube-scheduler place pods on a GPU in a bad state: the drift check puts it back.
    (Ten nodes: two faulty of five would pause the pool's repairs, and a pause cordons nothing.)"""
    pool = registered_pool(actors, 10)
    waiting, repairing = pool.nodes.order_by("name")[:2]
    xid(waiting, 48, at=T0 + timedelta(minutes=5))
    xid(repairing, 48, at=T0)
    assert pool_repair(pool_id=pool.pk, now=STARTED) == 1  # repairing's reset starts; waiting waits, cordoned
    assert Node.objects.get(pk=waiting.pk).phase == "Cordoned" and Node.objects.get(pk=repairing.pk).phase == "Repairing"
    SimClusterNode.objects.filter(name__in=[waiting.name, repairing.name]).update(unschedulable=False)  # kubectl uncordon
    lifecycle.reconcile_all(now=STARTED + timedelta(seconds=15))
    assert cordoned(waiting) and cordoned(repairing)
    said = {n.name: PoolEvent.objects.filter(node=n, reason="NodeCordoned").order_by("id").last().message for n in (waiting, repairing)}
    assert said == {
        waiting.name: f"Node {waiting.name} was made schedulable by someone else while its GPU fault waits for repair: cordoned again",
        repairing.name: f"Node {repairing.name} was made schedulable by someone else while it is repaired: cordoned again",
    }


def test_a_ready_node_an_interrupted_pass_left_cordoned_is_uncordoned_and_an_admins_cordon_stays(pool):
    """What a worker of the older release left behind: the row made Ready (as it wrote first)
    and the worker killed before the uncordon and the event. The row says the repair ended, and
    the last cordon event of the node is the repair's own, so the node must take pods: the drift
    check lifts the cordon and writes the `RepairSucceeded` the dead pass did not. A Ready node
    an administrator cordoned (no repair's cordon open on it) keeps its cordon, as before."""
    node = reset_acknowledged(pool)
    Node.objects.filter(pk=node.pk).update(phase="Ready", unschedulable=False)  # the dead pass's only write
    admins = pool.nodes.order_by("name")[3]
    SimulatedCluster().cordon(name=admins.name)  # kubectl cordon
    for minute in (1, 2):
        lifecycle.pool_reconcile(pool_id=pool.pk, now=STARTED + timedelta(minutes=minute))
        pool_repair(pool_id=pool.pk, now=STARTED + timedelta(minutes=minute, seconds=30))
    node.refresh_from_db()
    assert (node.phase, cordoned(node)) == ("Ready", False)
    assert reasons(node, "RepairSucceeded", "NodeUncordoned") == ["RepairSucceeded"]
    assert cordoned(admins) and reasons(admins, "RepairSucceeded", "NodeUncordoned") == []
    # After the repair's last event, a cordon is an administrator's again: it stays.
    SimulatedCluster().cordon(name=node.name)
    lifecycle.pool_reconcile(pool_id=pool.pk, now=STARTED + timedelta(minutes=3))
    assert cordoned(node) and reasons(node, "RepairSucceeded", "NodeUncordoned") == ["RepairSucceeded"]


def test_a_wait_cordon_left_on_a_ready_node_by_an_interrupted_uncordon_is_lifted(pool):
    """The same for a node cordoned while its fault waited, whose fault aged out: the older
    release made the row Ready before it lifted the cordon and wrote `NodeUncordoned`."""
    node = first(pool)
    xid(node, 48, at=T0)
    assert pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=1)) == 0
    assert Node.objects.get(pk=node.pk).phase == "Cordoned" and cordoned(node)
    Node.objects.filter(pk=node.pk).update(phase="Ready", unschedulable=False)  # the dead pass's only write
    lifecycle.pool_reconcile(pool_id=pool.pk, now=T0 + timedelta(minutes=2))
    assert not cordoned(node)
    assert reasons(node, "NodeCordoned", "NodeUncordoned") == ["NodeCordoned", "NodeUncordoned"]
    assert "its repair is over" in PoolEvent.objects.get(node=node, reason="NodeUncordoned").message


def test_an_administrators_cordon_from_before_the_fault_outlives_the_repair(actors):
    """The repair's cordon is marked as the control plane's, as a drain's is: a node someone
    cordoned first (`kubectl cordon`, to keep it free) keeps that cordon when its repair ends or
    an admin rejects it; the repair lifted it (its uncordon took every cordon for its own)."""
    pool = registered_pool(actors, 5)
    node = first(pool)
    SimClusterNode.objects.filter(name=node.name).update(unschedulable=True)  # kubectl cordon
    reset = reset_acknowledged(pool)
    pool_repair(pool_id=pool.pk, now=STARTED + timedelta(minutes=2))
    assert Node.objects.get(pk=reset.pk).phase == "Ready" and cordoned(reset)  # theirs stays
    assert "stays theirs: kubectl uncordon" in PoolEvent.objects.get(node=reset, reason="RepairSucceeded").message
    other = pool.nodes.order_by("name")[1]
    xid(other, 48, at=T0, gpu=1, seq=5)
    assert pool_repair(pool_id=pool.pk, now=STARTED + timedelta(minutes=3)) == 1
    assert cordoned(other)  # the repair's own cordon: lifted when it holds
    ack(AgentCommand.objects.get(node=other))
    pool_repair(pool_id=pool.pk, now=STARTED + timedelta(minutes=4))
    assert not cordoned(other)
    lifecycle.reconcile_all(now=STARTED + timedelta(minutes=5))
    assert cordoned(reset) and not cordoned(other)  # the drift check leaves the administrator's


def test_a_repair_cordon_of_the_release_before_the_mark_is_still_lifted(pool):
    """A repair cordon set before cordons were marked (the row says nothing of whose it was) is
    the repair's: lifted when the repair ends, not left as someone else's for good (review)."""
    node = reset_acknowledged(pool)
    SimClusterNode.objects.filter(name=node.name).update(unschedulable=True, cordoned_for_drain=False)  # as that release left it
    pool_repair(pool_id=pool.pk, now=STARTED + timedelta(minutes=2))
    lifecycle.reconcile_all(now=STARTED + timedelta(minutes=3))
    assert Node.objects.get(pk=node.pk).phase == "Ready" and not cordoned(node)
    assert "stays theirs" not in PoolEvent.objects.get(node=node, reason="RepairSucceeded").message
