"""Issue 9 §2, reconcile: two `manage.py reconcile --once` workers, one `kill -9`ed mid-pass.

Wherever the kill lands (after a payment or a machine order the cloud has committed but the
controller has not recorded yet, after a node row is written, after a provisioning step finished
at the cloud, inside the transaction that marks a node Ready), the pools the dead worker held
stay claimed until the claim lapses, while the other worker goes on with the rest; then the
restarted worker finishes them: no order paid twice, no machine ordered twice, no node created
twice, one event per step, and every pool Ready with the nodes it paid for.
(tests/pools/test_lifecycle_concurrency.py kills a single worker inside each step's transaction.)
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from billing.models import Account
from pools.models import GpuNodePool, Node, PoolEvent, PoolOrder
from pools.models.cloud import SimClusterNode, SimMachine, SimPayment, SimStock
from tests.chaos.workers import CHAOS, chaos_round, claims_expire, claims_of
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import approved_pool

pytestmark = CHAOS

RECONCILE = ["reconcile", "--once"]
SIMULATED = "pools.providers.simulated:SimulatedCloud"
KILLS = {
    "paid-at-the-cloud-order-not-yet-paid": {"target": f"{SIMULATED}.pay", "when": "after"},
    "node-row-written-no-machine-yet": {"target": "pools.controllers.lifecycle:_node_create", "when": "after", "nth": 2},
    "machine-ordered-node-not-updated": {"target": f"{SIMULATED}.place_order", "when": "after", "nth": 2},
    "step-done-at-the-cloud-node-not-advanced": {"target": f"{SIMULATED}.provision_step", "when": "after", "nth": 3},
    "node-ready-uncommitted": {"target": "pools.controllers.context:event_record", "when": "after", "match": {"reason": "NodeReady"}},
}


@pytest.fixture
def pools(actors):
    """Three approved pools of two T4 nodes each, nothing paid or ordered yet."""
    return [
        approved_pool(actors, make_document(f"chaos-{i}", gpuModel="T4", nodeType="GPU_2_CARD", nodeCount={"min": 2, "max": 3}))
        for i in range(3)
    ]


@pytest.mark.parametrize("kill", KILLS.values(), ids=KILLS.keys())
def test_a_reconcile_worker_killed_mid_pass_leaves_no_duplicate_and_every_pool_converges(pools, env, kill):
    balance = Account.objects.get(name="default").balance
    chaos = chaos_round(RECONCILE, kill=kill, env=env)
    held = set(claims_of(chaos.killed_pid).values_list("pool_id", flat=True))
    assert pools[0].pk in held, "the dead worker still holds the pool it was reconciling"
    for pool in GpuNodePool.objects.filter(pk__in=[p.pk for p in pools]).order_by("pk"):
        if pool.pk in held:  # untouched by the other worker until the claim lapses
            assert f"{pool.pk}\tskipped: claimed by another worker" in chaos.normal.stdout
            assert pool.phase != "Ready"
        else:  # the other worker went on with the rest
            assert pool.phase == "Ready", pool.pending_reason

    claims_expire(chaos.killed_pid)
    chaos.restarted.run()  # the killed worker restarts

    _assert_converged_once(pools, balance)


def _assert_converged_once(pools, balance: Decimal) -> None:
    orders = list(PoolOrder.objects.order_by("pk"))
    assert [o.status for o in orders] == ["Paid"] * len(pools)
    assert sorted(SimPayment.objects.values_list("order_id", flat=True)) == [o.pk for o in orders]
    assert Account.objects.get(name="default").balance == balance - sum((o.amount for o in orders), Decimal(0))

    desired = sum(o.node_count for o in orders)
    nodes = list(Node.objects.order_by("name"))
    assert len(nodes) == desired and all(n.phase == "Ready" for n in nodes), [(n.name, n.phase) for n in nodes]
    machines = dict(SimMachine.objects.values_list("client_token", "provider_id"))
    assert machines == {n.name: n.provider_id for n in nodes}  # one machine per node, the one it records
    assert SimClusterNode.objects.count() == desired
    assert SimStock.objects.get(zone__name="cn-east-2a", gpu_model__name="T4").available_gpus == 256 - 2 * desired
    for pool in GpuNodePool.objects.filter(pk__in=[p.pk for p in pools]):
        ready = pool.nodes.filter(phase="Ready").count()
        assert (pool.phase, ready) == ("Ready", pool.orders.get().node_count), pool.pending_reason

    def once(reason, per):
        rows = list(PoolEvent.objects.filter(reason=reason).values_list(per, "count"))
        return sorted(rows)

    assert once("OrderPaid", "pool_id") == [(p.pk, 1) for p in sorted(pools, key=lambda p: p.pk)]
    assert once("PoolReady", "pool_id") == [(p.pk, 1) for p in sorted(pools, key=lambda p: p.pk)]
    for reason in ("OrderPlaced", "NodeInitializing", "ImagePulled", "DriverInstalled", "KubeletInstalled", "NodeRegistered", "NodeReady"):
        assert once(reason, "node_id") == [(n.pk, 1) for n in sorted(nodes, key=lambda n: n.pk)], reason
    assert not PoolEvent.objects.filter(type="Warning").exists(), list(PoolEvent.objects.filter(type="Warning").values_list("reason", "message"))
