"""Auto-repair from Xid reports (seed P4, T3; issue 6 §5): ladder, gates, agent commands, replacement."""

from __future__ import annotations

from datetime import timedelta

import pytest

from monitoring.models import AgentCommand
from pools.controllers.repair import pool_repair
from tests.pools.pod_helpers import T0, pool_with_nodes
from tests.pools.repair_helpers import ack, xid


@pytest.fixture
def pool(actors):
    return pool_with_nodes(actors["lead"], nodes=5)


def test_an_application_xid_changes_nothing(pool):
    node = pool.nodes.first()
    xid(node, 13, at=T0)
    assert pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=20)) == 0
    node.refresh_from_db()
    assert node.phase == "Ready" and not AgentCommand.objects.exists()


def test_a_reset_class_xid_resets_the_gpu_through_the_agent_after_ten_minutes(pool):
    node = pool.nodes.order_by("name").first()
    xid(node, 48, at=T0, gpu=3)
    assert pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=5)) == 0  # faults must persist
    assert pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=11)) == 1
    node.refresh_from_db()
    command = AgentCommand.objects.get(node=node)
    assert (node.phase, node.unschedulable, command.action, command.gpu_index) == ("Repairing", True, "reset_gpu", 3)
    assert pool.events.get(reason="RepairStarted").type == "Warning"
    ack(command)
    pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=12))
    node.refresh_from_db()
    assert (node.phase, node.unschedulable) == ("Ready", False)
    assert pool.events.filter(reason="RepairSucceeded").exists()


def test_a_failed_reset_climbs_to_a_reboot(pool):
    node = pool.nodes.order_by("name").first()
    xid(node, 48, at=T0)
    pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=11))
    ack(AgentCommand.objects.get(node=node), ok=False)
    pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=12))
    assert pool.events.filter(reason="RepairFailed").exists()
    pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=13))
    assert list(AgentCommand.objects.filter(node=node).order_by("pk").values_list("action", flat=True)) == ["reset_gpu", "reboot"]


def test_xid_79_replaces_the_node_at_once(pool):
    node = pool.nodes.order_by("name").first()
    xid(node, 79, at=T0)
    assert pool_repair(pool_id=pool.pk, now=T0 + timedelta(seconds=30)) == 1
    node.refresh_from_db()
    assert node.release_reason == "Repair" and node.phase == "Terminated"  # no pods: released at once
    assert "released and replaced" in pool.events.get(reason="RepairStarted").message


def test_repairs_are_serial_per_pool(actors):
    pool = pool_with_nodes(actors["lead"], name="big", nodes=10)  # 2 of 10 unhealthy: under 20%
    first, second = pool.nodes.order_by("name")[:2]
    xid(first, 48, at=T0)
    xid(second, 48, at=T0)
    assert pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=11)) == 1
    assert AgentCommand.objects.count() == 1


def test_repair_pauses_when_more_than_a_fifth_of_the_pool_is_unhealthy(pool):
    for node in pool.nodes.order_by("name")[:3]:
        xid(node, 48, at=T0)
    assert pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=11)) == 0
    assert pool.events.filter(reason="RepairPaused", type="Warning").exists()


def test_without_auto_repair_it_only_alerts(actors):
    pool = pool_with_nodes(actors["lead"], name="manual", nodes=5, autoRepair=False)
    node = pool.nodes.first()
    xid(node, 48, at=T0)
    assert pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=11)) == 0
    assert pool.events.get(reason="RepairNeeded").type == "Warning"
    assert not AgentCommand.objects.exists()
    node.refresh_from_db()
    assert node.phase == "Ready"


def test_auto_repair_runs_from_the_command_and_a_schedule(pool, capsys):
    from django.core.management import call_command
    from django_q.models import Schedule

    call_command("repair", "--once")
    assert "repairs started: 0" in capsys.readouterr().out
    assert Schedule.objects.get(name="pools.repair_all").func == "pools.tasks.repair_all"


def test_a_replaced_on_demand_node_is_said_to_be_released_not_replaced(pool):
    """An on-demand (burst) node holds no lease slot, so no successor is ordered: its repair's
    start promised "released and replaced" (found by a QA sweep on the demo). Its release ends
    the repair (the repairs page says why nothing replaces it: test_repairs_not_replaced)."""
    node = pool.nodes.order_by("name").first()
    pool.nodes.filter(pk=node.pk).update(billing="on_demand")
    xid(node, 79, at=T0)
    assert pool_repair(pool_id=pool.pk, now=T0 + timedelta(seconds=30)) == 1
    node.refresh_from_db()
    assert node.phase == "Terminated" and node.successor is None
    assert "the autoscaler adds a node if its pods need one" in pool.events.get(reason="RepairStarted").message
