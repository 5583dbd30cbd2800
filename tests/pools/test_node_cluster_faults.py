"""What the lifecycle pass records of a node the cluster runs no pod on (`Node.cluster_fault`,
pools/core/node_labels.py `cluster_fault`), on the simulated cluster: only what one read of the
cluster says is judged, so an API server out of reach, or a node registered after the read, is
no fault; and a node whose device plugin withdrew one GPU still takes pods, as Cluster
Autoscaler reads it. The real API server's cases: tests/k8s/test_node_faults_on_kubernetes.py."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from pools.controllers import lifecycle, repair
from pools.models import GpuNodePool, Node, PoolEvent
from pools.providers.base import ProviderError
from pools.providers.simulated_cluster import SimulatedCluster
from pools.selectors import pools as selectors
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import T0, TICK, approved_pool, reasons

pytestmark = pytest.mark.django_db


class Down(SimulatedCluster):
    def nodes_state(self, *, names):
        raise ProviderError("list nodes: connection refused")


class Reporting(SimulatedCluster):
    """A kubelet's report for every node: Ready, offering `gpus` GPUs."""

    def __init__(self, gpus: int):
        self.gpus = gpus

    def nodes_state(self, *, names):
        return {name: replace(state, ready="True", gpus_allocatable=self.gpus) for name, state in super().nodes_state(names=names).items()}


@pytest.fixture
def ready_pool(actors):
    pool = approved_pool(actors, make_document("faults", nodeCount={"min": 2, "max": 2}))
    now = T0
    while GpuNodePool.objects.get(pk=pool.pk).phase != "Ready":
        now += TICK
        lifecycle.reconcile_all(now=now)
    return pool, now


def test_an_api_server_out_of_reach_makes_no_fault_and_costs_quiet_pools_nothing(ready_pool, monkeypatch):
    """Found by review: a failed read judged every node "not in the cluster", so every pool was
    visited and stalled each pass while the API server was away."""
    pool, now = ready_pool
    visited = []
    reconcile = lifecycle._reconcile
    monkeypatch.setattr(lifecycle, "_reconcile", lambda *args, **kwargs: (visited.append(args[0]), reconcile(*args, **kwargs))[1])
    for tick in range(1, 4):
        lifecycle.reconcile_all(now=now + tick * TICK, cluster=Down())
    assert visited == [] and not Node.objects.exclude(cluster_fault="").exists()
    assert GpuNodePool.objects.get(pk=pool.pk).pending_reason == ""


def test_a_node_offering_some_of_its_gpus_takes_pods_and_one_offering_none_does_not(ready_pool):
    pool, now = ready_pool
    lifecycle.reconcile_all(now=now + TICK, cluster=Reporting(gpus=7))
    assert not Node.objects.exclude(cluster_fault="").exists()
    lifecycle.reconcile_all(now=now + 2 * TICK, cluster=Reporting(gpus=0))
    assert set(Node.objects.filter(pool=pool).values_list("cluster_fault", flat=True)) == {
        "its Node offers none of its 8 GPUs (nvidia.com/gpu allocatable 0): its GPU device plugin serves none"
    }
    lifecycle.reconcile_all(now=now + 3 * TICK, cluster=Reporting(gpus=8))
    assert not Node.objects.exclude(cluster_fault="").exists()
    assert PoolEvent.objects.filter(pool=pool, reason="NodeUnavailable").count() == PoolEvent.objects.filter(pool=pool, reason="NodeAvailable").count() == 2


class OneNotReady(SimulatedCluster):
    """A kubelet that stopped reporting for the nodes named `down`; the others are Ready."""

    def __init__(self, *down: str):
        self.down = set(down)

    def nodes_state(self, *, names):
        states = super().nodes_state(names=names)
        return {name: replace(state, ready="Unknown" if name in self.down else "True") for name, state in states.items()}


def test_a_node_out_of_the_clusters_use_for_half_an_hour_is_replaced_and_a_shorter_outage_costs_nothing(ready_pool, monkeypatch):
    """EKS and Karpenter replace a node whose Ready condition is not True for 30 minutes: before,
    a node whose kubelet died stayed in its paid slot for ever (the repair ladder read Xids only).
    A kubelet restart heals well within that, and writes no repair event or cordon."""
    pool, now = ready_pool
    down, up = Node.objects.filter(pool=pool).order_by("name")
    lifecycle.reconcile_all(now=now + TICK, cluster=OneNotReady(down.name))
    start = Node.objects.get(pk=down.pk).cluster_fault_since
    assert start == now + TICK and Node.objects.get(pk=up.pk).cluster_fault_since is None
    lifecycle.reconcile_all(now=now + 2 * TICK, cluster=OneNotReady(down.name))
    assert Node.objects.get(pk=down.pk).cluster_fault_since == start  # it goes on from when it started
    pool.refresh_from_db()  # not "2/2 Ready": its status, list and describe count the node out
    assert (pool.phase, pool.pending_reason) == ("Degraded", "NodeUnavailable: 1 node(s) the cluster runs no pod on (each node's NodeUnavailable event says why)")
    assert selectors.pool_get(user=pool.team.memberships.first().user, name=pool.name).node_ready == 1

    assert repair.repair_all(now=start + timedelta(minutes=29)) == 0
    assert Node.objects.get(pk=down.pk).phase == "Ready" and reasons(pool, down)[-1] == "NodeUnavailable"
    assert repair.repair_all(now=start + timedelta(minutes=30)) == 0  # the Node reads Ready now: a fault the last read left standing
    monkeypatch.setattr(repair, "get_cluster_backend", lambda: OneNotReady(down.name))  # the repair pass reads the Node before it acts
    assert repair.repair_all(now=start + timedelta(minutes=30)) == 1
    node = Node.objects.get(pk=down.pk)
    assert (node.phase, node.release_reason) == ("Terminated", "Repair")  # no pod to move: released at once
    lifecycle.reconcile_all(now=start + timedelta(minutes=30) + TICK)
    assert Node.objects.get(pk=down.pk).successor is not None  # its paid slot is filled again
    started = PoolEvent.objects.get(node=down, reason="RepairStarted").message
    assert "the cluster has run no pod on the node since 2026-12-01 08:" in started and "not Ready (Ready=Unknown)" in started
    assert Node.objects.get(pk=up.pk).phase == "Ready"


def test_a_node_back_before_half_an_hour_is_left_alone_and_its_next_outage_counts_afresh(ready_pool):
    pool, now = ready_pool
    down = Node.objects.filter(pool=pool).order_by("name").first()
    lifecycle.reconcile_all(now=now + TICK, cluster=OneNotReady(down.name))
    lifecycle.reconcile_all(now=now + timedelta(minutes=20), cluster=OneNotReady())
    assert Node.objects.get(pk=down.pk).cluster_fault_since is None
    assert GpuNodePool.objects.get(pk=pool.pk).phase == "Ready"
    lifecycle.reconcile_all(now=now + timedelta(minutes=25), cluster=OneNotReady(down.name))
    assert repair.repair_all(now=now + timedelta(minutes=40)) == 0
    assert Node.objects.get(pk=down.pk).cluster_fault_since == now + timedelta(minutes=25)


def ready_pools(actors, *documents) -> tuple[list[GpuNodePool], datetime]:
    pools = [approved_pool(actors, document) for document in documents]
    now = T0
    while set(GpuNodePool.objects.filter(pk__in=[p.pk for p in pools]).values_list("phase", flat=True)) != {"Ready"}:
        now += TICK
        lifecycle.reconcile_all(now=now)
    return pools, now


def test_a_pool_whose_every_node_is_out_of_use_pauses_its_repair_with_one_warning_and_auto_repair_off_only_says_so(actors):
    """Both nodes of a two-node pool dropping out together is a partition or a control plane
    problem, not two machines breaking: the pool's pause holds (one event while nothing changes),
    while the rest of the zone is in use."""
    (pool, manual, _), now = ready_pools(actors, make_document("partition", nodeCount={"min": 2, "max": 2}),
                                         make_document("manual", nodeCount={"min": 1, "max": 1}, autoRepair=False),
                                         make_document("fine", nodeCount={"min": 3, "max": 3}))  # fmt: skip
    names = list(Node.objects.filter(pool__in=[pool, manual]).values_list("name", flat=True))
    lifecycle.reconcile_all(now=now + TICK, cluster=OneNotReady(*names))
    for minutes in (31, 32):
        assert repair.repair_all(now=now + timedelta(minutes=minutes)) == 0
    paused = list(PoolEvent.objects.filter(pool=pool, reason="RepairPaused").values_list("message", flat=True))
    assert len(paused) == 2 and all("2 of 2 nodes (100%) are unhealthy" in m and "the cluster places no pod on it meanwhile" in m for m in paused)
    needed = PoolEvent.objects.get(pool=manual, reason="RepairNeeded")
    assert needed.count == 2 and needed.message.endswith("autoRepair is off: repair " + needed.node.name + " by hand (replace)")
    assert set(Node.objects.filter(pool__in=[pool, manual]).values_list("phase", flat=True)) == {"Ready"}


def test_a_fleet_out_of_use_whole_replaces_and_says_nothing_and_a_kubelet_lagging_its_return_gets_a_fresh_grace(actors, monkeypatch):
    """Every node out of the cluster's use at once, even two, is the API server or its network
    (Kubernetes' node lifecycle controller stops evicting when every zone is in full
    disruption): no pause Warning, no RepairNeeded, no replacement. A kubelet that posts a minute
    after the others once the outage heals was replaced at once, its outage counted from when
    the partition began (found by review): the controller resets every node's clock when a full
    disruption ends, and so does the repair pass."""
    (pool, manual), now = ready_pools(actors, make_document("pair", nodeCount={"min": 1, "max": 1}),
                                      make_document("manual", nodeCount={"min": 1, "max": 1}, autoRepair=False))  # fmt: skip
    lagging, other = names = [Node.objects.get(pool=pool).name, Node.objects.get(pool=manual).name]
    monkeypatch.setattr(repair, "get_cluster_backend", lambda: OneNotReady(lagging))
    lifecycle.reconcile_all(now=now, cluster=OneNotReady(*names))
    for minutes in (31, 120):
        assert repair.repair_all(now=now + timedelta(minutes=minutes)) == 0
    assert not PoolEvent.objects.filter(reason__in=("RepairPaused", "RepairNeeded", "RepairStarted")).exists()
    assert Node.objects.get(name=lagging).cluster_fault_since == now  # when it began: the hold is kept beside it
    healed = now + timedelta(minutes=121)
    lifecycle.reconcile_all(now=healed, cluster=OneNotReady(lagging))  # the other kubelet is back; this one is a minute late
    assert repair.repair_all(now=healed + timedelta(minutes=1)) == 0
    assert repair.repair_all(now=now + timedelta(minutes=120 + 30)) == 1  # its own outage, counted from the last held pass
    assert Node.objects.get(name=lagging).release_reason == "Repair"


def test_a_fault_written_without_its_start_counts_from_the_next_pass(ready_pool, monkeypatch):
    """A release without `cluster_fault_since` (a rolling upgrade) left faults with no start,
    and a node with no start was never replaced (found by review)."""
    pool, now = ready_pool
    down = Node.objects.filter(pool=pool).order_by("name").first()
    lifecycle.reconcile_all(now=now + TICK, cluster=OneNotReady(down.name))
    Node.objects.filter(pk=down.pk).update(cluster_fault_since=None)
    lifecycle.reconcile_all(now=now + 2 * TICK, cluster=OneNotReady(down.name))
    assert Node.objects.get(pk=down.pk).cluster_fault_since == now + 2 * TICK
    monkeypatch.setattr(repair, "get_cluster_backend", lambda: OneNotReady(down.name))
    assert repair.repair_all(now=now + 2 * TICK + timedelta(minutes=30)) == 1


def test_a_rejected_replacement_does_not_hold_back_the_next_outages(actors, monkeypatch):
    """Under `requireApproval`, a rejection held until a newer Xid: a later, separate outage of
    the node raised no request for a day (found by review)."""
    from pools.models import RepairApproval
    from pools.services.repair import repair_reject

    (pool, _), now = ready_pools(actors, make_document("gated", nodeCount={"min": 1, "max": 1}, autoRepairPolicy={"requireApproval": True}),
                                 make_document("fine", nodeCount={"min": 1, "max": 1}))  # fmt: skip
    down = Node.objects.get(pool=pool)
    monkeypatch.setattr(repair, "get_cluster_backend", lambda: OneNotReady(down.name))
    lifecycle.reconcile_all(now=now, cluster=OneNotReady(down.name))
    repair.repair_all(now=now + timedelta(minutes=30))
    repair_reject(user=actors["admin"], approval=RepairApproval.objects.get(status="Pending"), note="the kubelet is being fixed by hand", now=now + timedelta(minutes=35))
    lifecycle.reconcile_all(now=now + timedelta(minutes=40), cluster=OneNotReady())  # back
    lifecycle.reconcile_all(now=now + timedelta(minutes=50), cluster=OneNotReady(down.name))  # and out again
    repair.repair_all(now=now + timedelta(minutes=80))
    assert RepairApproval.objects.filter(node=down, status="Pending").count() == 1


def test_most_of_a_zone_out_of_use_at_once_replaces_no_one_node_pool(actors, monkeypatch):
    """Each one-node pool tolerates its one unhealthy node, so a kubelet-to-API-server partition
    would have replaced every such pool's node after 30 minutes (found by review): more than 2
    and at least 55% of a zone's nodes out at once is a partial disruption, in which Kubernetes'
    node lifecycle controller stops evicting in a zone of at most 50 nodes."""
    pools, now = ready_pools(actors, *(make_document(f"solo-{i}", nodeCount={"min": 1, "max": 1}) for i in range(4)))
    names = list(Node.objects.filter(pool__in=pools).order_by("name").values_list("name", flat=True))
    monkeypatch.setattr(repair, "get_cluster_backend", lambda: OneNotReady(*names))
    lifecycle.reconcile_all(now=now, cluster=OneNotReady(*names[:3]))
    assert repair.repair_all(now=now + timedelta(minutes=31)) == 0
    lifecycle.reconcile_all(now=now + timedelta(minutes=32), cluster=OneNotReady(names[0]))  # the others are back: one node's own fault
    assert repair.repair_all(now=now + timedelta(minutes=33)) == 0  # its clock restarted at the last held pass
    assert repair.repair_all(now=now + timedelta(minutes=61)) == 1
