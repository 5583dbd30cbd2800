"""A paused repair (seed P4, T3; the admin guide's drill on a fresh demo): when more of a pool is
unhealthy than it tolerates, auto repair starts nothing, and says so once; a node whose GPU fell
off the bus is cordoned all the same; the node's condition and `/repairs/` say the repair is
paused and why, never "replacing". Through the real repair pass and the simulated cloud, with
the clock injected (`now`), never today's date."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from pools.controllers.repair import pool_repair
from pools.core.repair import (
    NodeHealth,
    XidEvent,
    cordon_while_paused,
    next_action,
    unhealthy_limit,
)
from pools.demo.fleet import DRILL_POOLS, fault_candidates
from pools.models import Node, PoolEvent
from pools.models.cloud import SimClusterNode
from pools.models.pods import Pod
from pools.providers.simulated import pod_run
from pools.selectors.nodes import node_page
from pools.selectors.repairs import repairs_in_progress
from tests.conftest import make_document
from tests.monitoring.test_sim_faults import with_machine
from tests.pools.lifecycle_helpers import T0, approved_pool, live_nodes, run_until
from tests.pools.pod_helpers import pool_with_nodes
from tests.pools.repair_helpers import xid

PASS = timedelta(seconds=12)  # about what the demo's tick gives the repair pass


def hardware(user, node, now) -> dict:
    [condition] = [c for c in node_page(user=user, node=node, now=now)["conditions"] if c["type"] == "AcceleratedHardwareReady"]
    return condition


def row(user, node, now):
    return next((r for r in repairs_in_progress(user=user, now=now) if r.node == node.name), None)


# --- the threshold and what a pause cordons: pure --------------------------------------------------


def test_a_pool_tolerates_a_fifth_of_its_nodes_rounded_down_and_always_one():
    """docs/lifecycle.md: none while more than 20% of the pool is unhealthy; one unhealthy node
    is always tolerated (MachineHealthCheck's rounding alone would give a pool under five nodes
    none, and it could never heal)."""
    assert {n: unhealthy_limit(n) for n in (1, 2, 4, 5, 6, 9, 10, 14, 15, 20)} == {
        1: 1, 2: 1, 4: 1, 5: 1, 6: 1, 9: 1, 10: 2, 14: 2, 15: 3, 20: 4
    }  # fmt: skip


def test_only_a_fatal_fault_is_cordoned_while_the_pool_is_paused():
    assert cordon_while_paused(NodeHealth("a", healthy=False, fatal=True))  # Xid 79: the GPU is gone
    assert not cordon_while_paused(NodeHealth("b", healthy=False))  # Xid 48: a shared cause is as likely
    assert not cordon_while_paused(NodeHealth("c", healthy=True))
    assert not cordon_while_paused(NodeHealth("d", healthy=False, fatal=True, repairing=True))


def test_the_ladder_no_longer_says_it_is_replacing_the_node():
    """The ladder says what the node needs; whether it happens is the gate's (the issue's
    "…replacing the node" on a node left Ready by a pause)."""
    decision = next_action([XidEvent(xid=79, at=T0, gpu_index=0)], T0)
    assert decision.action == "replace" and "replacing" not in decision.message
    assert decision.message.endswith("the node must be replaced")


# --- the drill, through the repair pass and the simulated cloud ----------------------------


@pytest.fixture
def drill(actors):
    """The demo's training pool, two Ready nodes from the simulated cloud; bert-train-0 on the
    first. The demo's periodic Xid 48 hits the second; a minute later the guide's Xid 79 hits
    the first: 2 of 2 nodes unhealthy."""
    pool = approved_pool(actors, make_document("train-pool-demo", nodeCount={"min": 2, "max": 2}))
    ready = run_until(pool, T0)
    first, second = live_nodes(pool)
    pod_run(node_name=first.name, name="bert-train-0", namespace="algorithm")
    xid(second, 48, at=ready, gpu=6)
    assert pool_repair(pool_id=pool.pk, now=ready + PASS) == 0  # cordoned: the fault must persist
    xid(first, 79, at=ready + timedelta(minutes=1), gpu=0)
    return pool, first, second, ready + timedelta(minutes=1)


def test_a_paused_pool_cordons_the_node_whose_gpu_fell_off_the_bus_and_says_so_once(drill):
    pool, first, second, start = drill
    now = start
    while now < start + timedelta(minutes=17):  # the 17 minutes, a pass every 12 s
        assert pool_repair(pool_id=pool.pk, now=now) == 0
        now += PASS
    first.refresh_from_db()
    second.refresh_from_db()
    # (a) the node with the dead GPU takes no new pods, here and in the cluster; nothing evicted.
    assert (first.phase, first.unschedulable) == ("Cordoned", True)
    assert SimClusterNode.objects.get(name=first.name).unschedulable
    assert Pod.objects.get(name="bert-train-0").phase == Pod.Phase.RUNNING
    assert second.phase == "Cordoned"  # cordoned while its fault waited: the pause lifts nothing
    assert not PoolEvent.objects.filter(pool=pool, reason="RepairStarted").exists()
    # (d) one RepairPaused per node while nothing changes, not ×370.
    paused = PoolEvent.objects.filter(pool=pool, reason="RepairPaused")
    assert sorted((e.node.name, e.count) for e in paused) == [(first.name, 1), (second.name, 1)]
    said = paused.get(node=first).message
    assert "2 of 2 nodes (100%) are unhealthy" in said and "auto repair is paused" in said and "not started" in said
    assert "it stays cordoned meanwhile" in said and "replacing" not in said
    cordoned = PoolEvent.objects.get(node=first, reason="NodeCordoned").message
    assert "auto repair is paused" in cordoned and "cannot be reached" in cordoned


def test_the_node_condition_and_the_repairs_page_say_the_repair_is_paused_and_why(drill, actors):
    pool, first, second, now = drill
    pool_repair(pool_id=pool.pk, now=now)
    admin = actors["admin"]
    first.refresh_from_db()
    # (b) the condition names the fault and the pause, not a replacement under way.
    condition = hardware(admin, first, now)
    assert (condition["status"], condition["reason"]) == ("False", "FatalXid")
    assert "replacing" not in condition["message"]
    assert "replace not started" in condition["message"] and "2 of 2 nodes (100%) are unhealthy" in condition["message"]
    # (c) /repairs/ lists both nodes as paused, with the reason, and does not poll for them.
    for node in (first, second):
        shown = row(admin, node, now)
        assert shown is not None and shown.stage.startswith("repair paused") and "cordoned" in shown.stage
        assert "2 of 2 nodes (100%) are unhealthy" in shown.detail and not shown.moving
    assert row(actors["other_lead"], first, now) is None  # another team's pool stays unseen


def test_the_pause_is_written_again_only_when_it_changes(actors):
    pool = pool_with_nodes(actors["lead"], name="five", nodes=5)
    a, b, c = pool.nodes.order_by("name")[:3]
    xid(a, 48, at=T0)
    xid(b, 48, at=T0)
    for minutes in range(11, 20):
        pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=minutes))
    assert [e.count for e in PoolEvent.objects.filter(node=a, reason="RepairPaused")] == [1]
    xid(c, 48, at=T0 + timedelta(minutes=20))  # a third node: the pause is news again
    pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=21))
    messages = list(PoolEvent.objects.filter(node=a, reason="RepairPaused").order_by("pk").values_list("message", flat=True))
    assert len(messages) == 2 and "2 of 5" in messages[0] and "3 of 5" in messages[1]


def test_reset_class_faults_of_a_paused_pool_keep_taking_pods_and_are_listed_as_paused(actors):
    """Three Xid 48s at once in a pool of five: a cause that wide is more likely a driver or an
    image, so no node is cordoned for it; `/repairs/` still lists each, with the reason."""
    pool = pool_with_nodes(actors["lead"], name="five", nodes=5)
    faulty = list(pool.nodes.order_by("name")[:3])
    for node in faulty:
        xid(node, 48, at=T0)
    now = T0 + timedelta(minutes=11)
    assert pool_repair(pool_id=pool.pk, now=now) == 0
    assert not pool.nodes.filter(phase="Cordoned").exists()
    shown = row(actors["admin"], faulty[0], now)
    assert shown is not None and shown.phase == "Ready" and "still takes new pods" in shown.stage
    assert "3 of 5 nodes (60%) are unhealthy" in shown.detail
    said = PoolEvent.objects.get(node=faulty[0], reason="RepairPaused").message
    assert "it still takes new pods meanwhile" in said
    assert "not started" in hardware(actors["lead"], faulty[0], now)["message"]


def test_once_the_pause_lifts_the_cordoned_node_is_replaced(drill):
    """The Xid 48 leaves the ladder's 24-hour window: 1 of 2 unhealthy, the pause lifts, and
    the node whose GPU fell off the bus is replaced (still Xid 79's "at once")."""
    pool, first, second, start = drill
    pool_repair(pool_id=pool.pk, now=start)
    later = start + timedelta(hours=24) - timedelta(seconds=30)  # the 48 aged out, the 79 (a minute younger) has not
    assert pool_repair(pool_id=pool.pk, now=later) == 1
    assert PoolEvent.objects.get(node=first, reason="RepairStarted").type == "Warning"
    assert Node.objects.get(pk=second.pk).phase == "Ready"  # no fault left open: uncordoned


# --- the demo and the guide together -----------------------------------------------------------------


def test_the_demo_s_faults_leave_the_drill_pool_alone_and_never_pause_a_pool(actors):
    """docs/guide-admin.md's drill (`inject_fault train-pool-demo-1-001 --xid 79`) must find
    its pool healthy on a fresh `make run`, and the demo's own faults must show repairs, not
    pauses."""
    drill_pool = pool_with_nodes(actors["lead"], name=next(iter(DRILL_POOLS)), nodes=2)
    two = pool_with_nodes(actors["lead"], name="infer-pool-l40s", nodes=2)
    ten = pool_with_nodes(actors["lead"], name="big", nodes=10)
    nodes = list(Node.objects.select_related("pool"))
    agents = {n.name for n in nodes}
    names = {n.name for n in fault_candidates(nodes, agents=agents, now=T0)}
    assert names == {n.name for n in nodes if n.pool_id != drill_pool.pk}
    sick = two.nodes.order_by("name").first()
    xid(sick, 79, at=T0)  # reported, not repaired yet: the pool's one tolerated node
    xid(ten.nodes.order_by("name").first(), 48, at=T0)
    names = {n.name for n in fault_candidates(nodes, agents=agents, now=T0 + PASS)}
    assert not names & {n.name for n in two.nodes.all()}  # one more would pause it (2 of 2)
    assert len(names & {n.name for n in ten.nodes.all()}) == 9  # 2 of 10 is within its limit
    assert not names & {n.name for n in nodes if n.name not in agents}


def test_inject_fault_says_when_the_fault_will_pause_the_pool(actors):
    pool = pool_with_nodes(actors["lead"], name="train-pool-demo", nodes=2)
    first, second = pool.nodes.order_by("name")
    for node in (first, second):
        with_machine(node)
    err = StringIO()
    call_command("inject_fault", first.name, "--gpu", "0", "--xid", "79", stdout=StringIO(), stderr=err)
    assert err.getvalue() == ""  # 1 of 2: replaced at once
    xid(first, 79, at=timezone.now() - timedelta(minutes=1))  # its agent reported it
    call_command("inject_fault", second.name, "--gpu", "6", "--xid", "48", stdout=StringIO(), stderr=err)
    note = err.getvalue()
    assert "2 of 2 nodes of pool train-pool-demo are unhealthy" in note and "RepairPaused" in note
