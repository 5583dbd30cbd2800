"""What the lifecycle pass records of a node the cluster runs no pod on (`Node.cluster_fault`,
pools/core/node_labels.py `cluster_fault`), on the simulated cluster: only what one read of the
cluster says is judged, so an API server out of reach, or a node registered after the read, is
no fault; and a node whose device plugin withdrew one GPU still takes pods, as Cluster
Autoscaler reads it. The real API server's cases: tests/k8s/test_node_faults_on_kubernetes.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pools.controllers import lifecycle
from pools.models import GpuNodePool, Node, PoolEvent
from pools.providers.base import ProviderError
from pools.providers.simulated_cluster import SimulatedCluster
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import T0, TICK, approved_pool

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
