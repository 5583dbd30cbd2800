"""Repairs you can follow (issue 21 item 6; seed P4, T3): a faulty node is cordoned while its
repair waits, the waits are one aggregated event, a replaced node names its successor, and a
replacement ends with `RepairSucceeded` on the replaced node."""

from __future__ import annotations

from datetime import timedelta

import pytest

from monitoring.models import AgentCommand
from pools.controllers.lifecycle import node_names_next
from pools.controllers.repair import pool_repair
from pools.models import Node, PoolEvent
from pools.models.cloud import SimClusterNode
from pools.providers import simulated
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import T0, approved_pool, reconcile, run_until
from tests.pools.pod_helpers import pool_with_nodes
from tests.pools.repair_helpers import ack, xid

PASS = timedelta(seconds=12)


@pytest.fixture
def pool(actors):
    return pool_with_nodes(actors["lead"], nodes=5)


def first(pool) -> Node:
    return pool.nodes.order_by("name").first()


def test_a_reset_class_xid_cordons_its_node_while_the_fault_must_persist(pool):
    """The issue's Xid 48: the node took pods for the ten minutes it waited. Now the first pass
    cordons it (our row and the cluster's `spec.unschedulable`), and the 47 waits are one
    `WaitingForFaultToPersist` event with a count of 47, as Kubernetes aggregates events."""
    node = first(pool)
    SimClusterNode.objects.create(name=node.name)
    xid(node, 48, at=T0, gpu=2)
    now = T0 + PASS
    for _ in range(47):
        assert pool_repair(pool_id=pool.pk, now=now) == 0
        now += PASS
    node.refresh_from_db()
    assert (node.phase, node.unschedulable) == ("Cordoned", True)
    assert SimClusterNode.objects.get(name=node.name).unschedulable
    waits = PoolEvent.objects.filter(node=node, reason="WaitingForFaultToPersist")
    assert [w.count for w in waits] == [47]
    cordoned = PoolEvent.objects.get(node=node, reason="NodeCordoned")
    assert cordoned.type == "Warning" and "no new pods" in cordoned.message and cordoned.count == 1
    # The fault persisted: the reset starts, holds, and the node takes pods again everywhere.
    assert pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=11)) == 1
    ack(AgentCommand.objects.get(node=node))
    pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=12))
    node.refresh_from_db()
    assert (node.phase, node.unschedulable) == ("Ready", False)
    assert not SimClusterNode.objects.get(name=node.name).unschedulable
    assert PoolEvent.objects.filter(node=node, reason="RepairSucceeded").exists()


def test_a_node_waiting_for_its_turn_is_cordoned_too(actors):
    big = pool_with_nodes(actors["lead"], name="big", nodes=10)  # 2 of 10 faulty: repaired one at a time
    one, two = big.nodes.order_by("name")[:2]
    xid(one, 48, at=T0)
    xid(two, 48, at=T0)
    assert pool_repair(pool_id=big.pk, now=T0 + timedelta(minutes=11)) == 1
    one.refresh_from_db()
    two.refresh_from_db()
    assert (one.phase, two.phase) == ("Repairing", "Cordoned")
    assert "one node at a time" in PoolEvent.objects.get(node=two, reason="NodeCordoned").message


def test_an_application_xid_leaves_the_node_schedulable(pool):
    node = first(pool)
    xid(node, 13, at=T0)
    pool_repair(pool_id=pool.pk, now=T0 + PASS)
    node.refresh_from_db()
    assert (node.phase, node.unschedulable) == ("Ready", False)


def test_a_paused_pool_does_not_cordon_its_faulty_nodes(pool):
    """More than a fifth failing together is more likely a driver or image: no cordon."""
    for node in pool.nodes.order_by("name")[:3]:
        xid(node, 48, at=T0)
    pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=11))
    assert not pool.nodes.filter(phase="Cordoned").exists()


def test_a_fault_that_ages_out_unrepaired_uncordons_the_node(actors):
    """A gated pool whose admin never answered: after the ladder's window no fault is open,
    the request is cancelled and the node takes pods again."""
    gated = pool_with_nodes(actors["lead"], name="gated", nodes=5, autoRepairPolicy={"requireApproval": True})
    node = first(gated)
    xid(node, 48, at=T0)
    pool_repair(pool_id=gated.pk, now=T0 + timedelta(minutes=11))
    node.refresh_from_db()
    assert node.phase == "Cordoned"
    pool_repair(pool_id=gated.pk, now=T0 + timedelta(hours=25))
    node.refresh_from_db()
    assert (node.phase, node.unschedulable) == ("Ready", False)
    assert "takes new pods again" in PoolEvent.objects.get(node=node, reason="NodeUncordoned").message


def test_a_replaced_node_names_its_successor_and_the_repair_completes_when_it_is_ready(actors):
    """Xid 79 replaces the node; the lifecycle orders the successor into the same lease slot;
    the old node links to it and gets `RepairSucceeded` once the successor is Ready."""
    pool = approved_pool(actors, make_document(nodeCount={"min": 2, "max": 2}))
    ready = run_until(pool, T0)
    old = first(pool)
    xid(old, 79, at=ready)
    assert pool_repair(pool_id=pool.pk, now=ready + PASS) == 1
    run_until(pool, ready + 2 * PASS, limit=timedelta(hours=3))
    old.refresh_from_db()
    assert old.successor is not None and old.successor.phase == "Ready"
    assert list(old.successor.predecessors.all()) == [old]
    assert old.successor.order_id == old.order_id and old.successor.lease_end == old.lease_end
    done = PoolEvent.objects.get(node=old, reason="RepairSucceeded")
    assert old.successor.name in done.message and done.type == "Normal"


def test_a_replacement_that_cannot_be_provisioned_is_a_failed_repair_and_the_next_one_is_linked(actors, settings):
    settings.EBCLOUD_PROVISION_MAX_ATTEMPTS = 2
    pool = approved_pool(actors, make_document(nodeCount={"min": 2, "max": 2}))
    ready = run_until(pool, T0)
    old = first(pool)
    doomed = node_names_next(pool, 1)[0]  # the first replacement's name
    simulated.failure_inject(step="driver_install", times=None, token_prefix=doomed)
    xid(old, 79, at=ready)
    assert pool_repair(pool_id=pool.pk, now=ready + PASS) == 1
    now = ready + 2 * PASS
    while not Node.objects.filter(name=doomed, phase="Terminated").exists():
        reconcile(pool, now)
        now += timedelta(seconds=15)
        assert now < ready + timedelta(hours=2)
    failed = PoolEvent.objects.get(node=old, reason="RepairFailed")
    assert failed.type == "Warning" and doomed in failed.message and "another node is ordered" in failed.message
    run_until(pool, now, limit=timedelta(hours=3))
    old.refresh_from_db()
    assert old.successor.name != doomed and old.successor.phase == "Ready"
    assert Node.objects.get(name=doomed).successor == old.successor  # the chain ends at the node that serves
    assert old.successor.name in PoolEvent.objects.get(node=old, reason="RepairSucceeded").message



UNREACHABLE_KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: gone, cluster: {server: "http://127.0.0.1:9"}}]
users: [{name: nobody, user: {token: none}}]
contexts: [{name: gone, context: {cluster: gone, user: nobody}}]
current-context: gone
"""


def test_an_unreachable_api_server_is_told_in_the_event_and_the_node_is_cordoned_here(pool, settings, tmp_path):
    """The real Kubernetes client against an API server that does not answer: the control
    plane's own cordon holds (its scheduler and autoscaler read it) and the event says what to
    do in the cluster; the repair pass goes on."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(UNREACHABLE_KUBECONFIG)
    settings.EBCLOUD_CLUSTER_BACKEND, settings.EBCLOUD_KUBECONFIG = "kubernetes", str(kubeconfig)
    node = first(pool)
    xid(node, 48, at=T0)
    assert pool_repair(pool_id=pool.pk, now=T0 + PASS) == 0
    node.refresh_from_db()
    assert (node.phase, node.unschedulable) == ("Cordoned", True)
    message = PoolEvent.objects.get(node=node, reason="NodeCordoned").message
    assert "could not be updated" in message and f"run kubectl cordon {node.name} to match" in message


def test_a_second_replacement_waits_until_the_first_successor_is_ready(actors):
    """One repair per pool at a time counts a replacement until its successor is Ready: the
    replaced node left the watched nodes at once, so a second node of five (40%) was taken
    down while the first successor was still being provisioned."""
    pool = approved_pool(actors, make_document(nodeCount={"min": 5, "max": 5}))
    ready = run_until(pool, T0)
    a, b = Node.objects.filter(pool=pool).order_by("name")[:2]
    xid(a, 79, at=ready)
    assert pool_repair(pool_id=pool.pk, now=ready + timedelta(seconds=30)) == 1
    reconcile(pool, ready + timedelta(seconds=45))
    successor = Node.objects.get(pk=a.pk).successor
    assert successor is not None and successor.ready_at is None
    xid(b, 79, at=ready + timedelta(seconds=60))
    assert pool_repair(pool_id=pool.pk, now=ready + timedelta(seconds=90)) == 0
    gate = PoolEvent.objects.filter(node=b, reason="RepairInProgress").first()
    assert gate is None or a.name in gate.message  # the wait is said on the node, if at all
    later = ready + timedelta(seconds=90)
    while Node.objects.get(pk=successor.pk).ready_at is None and later < ready + timedelta(hours=1):
        later += PASS
        reconcile(pool, later)
    assert pool_repair(pool_id=pool.pk, now=later + PASS) == 1  # then b's turn


def test_a_replaced_node_with_no_successor_holds_repairs_back_only_briefly(actors):
    pool = pool_with_nodes(actors["lead"], name="big", nodes=10)  # two faults of ten: under the pause
    a, b = pool.nodes.order_by("name")[:2]
    xid(a, 79, at=T0)
    xid(b, 79, at=T0)
    assert pool_repair(pool_id=pool.pk, now=T0 + timedelta(seconds=30)) == 1
    assert pool_repair(pool_id=pool.pk, now=T0 + timedelta(seconds=90)) == 0  # the lifecycle would order the successor now
    assert pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=15)) == 1  # none came (no lifecycle here): not for ever
