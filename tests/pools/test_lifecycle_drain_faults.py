"""The simulated cluster answers a drain as a real API server does (tests/k8s/test_drain_faults.py):
a node gone from the cluster has nothing to cordon and its pool's deletion completes; a pod
under two disruption budgets is not evicted, waits, and is left at the drain's deadline."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pools.models import Node, PoolEvent
from pools.models.cloud import SimClusterNode
from pools.models.pods import Pod
from pools.providers import simulated
from pools.services import pools as services
from pools.services.disruption_budgets import budget_create
from tests.pools.lifecycle_helpers import T0, approved_pool, live_nodes, reconcile, run_until


@pytest.fixture
def ready_pool(actors, train_document):
    pool = approved_pool(actors, train_document)
    run_until(pool, T0)
    return pool


def test_deleting_a_pool_whose_node_left_the_cluster_releases_every_node(actors, ready_pool):
    gone, other = live_nodes(ready_pool)
    SimClusterNode.objects.filter(name=gone.name).delete()  # kubectl delete node
    later = T0 + timedelta(days=1)
    services.pool_delete(user=actors["lead"], pool=ready_pool, now=later)
    assert reconcile(ready_pool, later).phase == "Deleted"
    assert list(Node.objects.filter(pool=ready_pool).values_list("phase", flat=True)) == ["Terminated", "Terminated"]
    said = PoolEvent.objects.get(node=gone, reason="NodeCordoned")
    assert "no longer in the cluster" in said.message and said.type == "Normal"
    assert PoolEvent.objects.get(node=other, reason="NodeCordoned").message == f"Node {other.name} cordoned: no new pods are scheduled on it"


def test_a_pod_under_two_disruption_budgets_waits_then_the_deadline_releases_its_node(actors, ready_pool):
    node = live_nodes(ready_pool)[0]
    simulated.pod_run(node_name=node.name, name="guarded", namespace="algorithm")
    Pod.objects.filter(name="guarded").update(labels={"app": "t", "tier": "x"})
    for name, selector in (("by-app", {"app": "t"}), ("by-tier", {"tier": "x"})):
        budget_create(user=actors["member"], document={"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
                                                        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector}}})  # fmt: skip
    later = T0 + timedelta(days=1)
    services.pool_delete(user=actors["lead"], pool=ready_pool, now=later)
    assert reconcile(ready_pool, later).phase == "Deleting"
    assert "algorithm/guarded (refuses eviction)" in PoolEvent.objects.get(node=node, reason="DrainWaiting").message
    assert Pod.objects.get(name="guarded").phase == "Running"
    assert reconcile(ready_pool, later + timedelta(minutes=10)).phase == "Deleted"
    assert "algorithm/guarded" in PoolEvent.objects.get(node=node, reason="DrainTimeout").message
