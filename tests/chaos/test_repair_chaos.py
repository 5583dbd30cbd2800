"""Issue 9 §2, repair: two `manage.py repair --once` workers, one `kill -9`ed mid-repair.

Two pools of five Ready nodes, one faulty node in each (seed P4, T3). The killed worker stops
in the first pool while the other worker repairs the second; after the restart, each faulty
node gets exactly one repair: one agent command (a GPU reset) or one replacement (the old
machine released once, one new node ordered into its slot), one `RepairStarted` event, and
every pool is back to five Ready nodes.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from monitoring.models import AgentCommand, GpuErrorEvent
from monitoring.report_parse import Ack
from monitoring.services import commands_ack
from pools.core.repair import classify
from pools.models import GpuNodePool, Node, PoolEvent
from pools.models.cloud import SimMachine, SimStock
from tests.chaos.workers import CHAOS, Worker, chaos_round, claims_expire, claims_of
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import approved_pool, reconcile

pytestmark = CHAOS

REPAIR, RECONCILE = ["repair", "--once"], ["reconcile", "--once"]
SIMULATED = "pools.providers.simulated:SimulatedCloud"
KILLS = {  # fault -> where the worker dies
    "node-repairing-no-command-yet": ("reset", {"target": "pools.controllers.repair:agent_command_enqueue", "when": "before"}),
    "command-queued-no-event-yet": ("reset", {"target": "pools.controllers.repair:event_record", "when": "before", "match": {"reason": "RepairStarted"}}),
    "replacement-started-uncommitted": ("replace", {"target": "pools.controllers.context:event_record", "when": "after", "match": {"reason": "RepairStarted"}}),
    "machine-released-node-not-terminated": ("replace", {"target": f"{SIMULATED}.release", "when": "after"}),
}
XID = {"reset": (48, timedelta(minutes=15)), "replace": (79, timedelta(minutes=1))}  # a reset waits for a 10-minute fault


@pytest.fixture
def pools(actors, fast_cloud):
    """Two pools of five Ready T4 nodes, made by the lifecycle controller (orders, machines)."""
    now = timezone.now()
    made = []
    for i in range(2):
        pool = approved_pool(actors, make_document(f"rep-{i}", gpuModel="T4", nodeType="GPU_2_CARD", nodeCount={"min": 5, "max": 6}), now=now)
        assert reconcile(pool, now).phase == "Ready"
        made.append(pool)
    return made


def _fault(pools, kind: str) -> list[Node]:
    number, ago = XID[kind]
    faulty = [p.nodes.order_by("name").first() for p in pools]
    verdict = classify(number)
    for node in faulty:
        GpuErrorEvent.objects.create(node=node, report_seq=1, position=0, gpu_index=1, xid=number, at=timezone.now() - ago, kind=verdict.kind, action=verdict.action)
    return faulty


@pytest.mark.parametrize("fault,kill", KILLS.values(), ids=KILLS.keys())
def test_a_repair_worker_killed_mid_repair_repairs_each_node_once(pools, env, fault, kill):
    faulty = _fault(pools, fault)
    follow_up = Worker(REPAIR if fault == "reset" else RECONCILE, env=env)  # warm, for later
    chaos = chaos_round(REPAIR, kill=kill, env=env)
    held = set(claims_of(chaos.killed_pid).values_list("pool_id", flat=True))
    assert pools[0].pk in held, "the dead worker still holds the pool it was repairing"
    for pool in pools[1:]:  # the other worker went on with what the dead one did not hold
        assert PoolEvent.objects.filter(pool=pool, reason="RepairStarted").count() == (0 if pool.pk in held else 1)

    claims_expire(chaos.killed_pid)
    chaos.restarted.run()  # the killed worker restarts

    if fault == "reset":
        _agents_succeed()
        follow_up.run()  # the next repair pass sees the acknowledgements
        _assert_reset_once(pools, faulty)
    else:
        follow_up.run()  # the lifecycle controller orders the successors
        _assert_replaced_once(pools, faulty)
    for pool in GpuNodePool.objects.filter(pk__in=[p.pk for p in pools]):
        assert (pool.phase, pool.nodes.filter(phase="Ready", unschedulable=False).count()) == ("Ready", 5), pool.pending_reason


def _agents_succeed() -> None:
    """Each node's agent runs its pending command and acknowledges it (the agent API's path)."""
    for command in AgentCommand.objects.filter(status="Pending").select_related("node__pool"):
        commands_ack(node=command.node, acks=[Ack(command_id=command.pk, ok=True, message="reset done")], now=timezone.now())


def _assert_reset_once(pools, faulty) -> None:
    commands = list(AgentCommand.objects.order_by("node_id").values_list("node_id", "action", "gpu_index", "status"))
    assert commands == [(n.pk, "reset_gpu", 1, "Succeeded") for n in sorted(faulty, key=lambda n: n.pk)]
    for node in faulty:
        assert Node.objects.get(pk=node.pk).phase == "Ready"
        for reason in ("RepairStarted", "RepairSucceeded"):
            assert list(PoolEvent.objects.filter(node=node, reason=reason).values_list("count", flat=True)) == [1], (node.name, reason)


def _assert_replaced_once(pools, faulty) -> None:
    for pool, old in zip(pools, faulty, strict=True):
        old = Node.objects.get(pk=old.pk)
        assert (old.phase, old.release_reason) == ("Terminated", "Repair")
        assert SimMachine.objects.get(provider_id=old.provider_id).status == "Released"
        new = pool.nodes.exclude(pk__in=[n.pk for n in faulty]).order_by("-pk").first()
        assert new.order_id == old.order_id and new.lease_end == old.lease_end  # the same lease slot
        assert pool.nodes.count() == 6  # five original nodes and exactly one successor
        for node, reason in ((old, "RepairStarted"), (old, "NodeReleased"), (new, "NodeReady")):
            assert list(PoolEvent.objects.filter(node=node, reason=reason).values_list("count", flat=True)) == [1], (node.name, reason)
    assert SimMachine.objects.count() == 12 and SimMachine.objects.filter(status="Released").count() == 2
    assert SimStock.objects.get(zone__name="cn-east-2a", gpu_model__name="T4").available_gpus == 256 - 2 * 10
