"""Node labels, taints and cordons are level-triggered on the simulated cluster (the embedded
default): a spec edit reaches the pool's existing Ready nodes within one pass over every pool,
what someone else removes is put back, what others set stays, and a drained node stays
cordoned. The scheduler sees the new labels at once (the article's fix: `nodeLabels` gains
`pool: train` and the Pending training pod binds on a node the pool already has)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pools.controllers import lifecycle
from pools.controllers.scheduler import scheduler_pass
from pools.core.node_labels import ClusterNodeState, node_fix
from pools.models import GpuNodePool, Node, Pod, PoolEvent, PoolOrder
from pools.models.cloud import SimClusterNode
from pools.providers import simulated, simulated_cluster
from pools.providers.base import ProviderError
from pools.services import pods as pod_services
from tests.pools.lifecycle_helpers import T0, TICK, approved_pool, live_nodes, run_until
from tests.pools.pod_helpers import train_pod_document
from tests.pools.pool_helpers import edit_spec

pytestmark = pytest.mark.django_db


def events(node, reason):
    return list(PoolEvent.objects.filter(node=node, reason=reason).order_by("id").values_list("message", flat=True))


@pytest.fixture
def ready_pool(actors, train_document):
    pool = approved_pool(actors, train_document)
    return pool, run_until(pool, T0)


def test_the_articles_fix_relabels_the_existing_nodes_in_one_pass_and_the_pod_binds_there(actors, ready_pool):
    pool, now = ready_pool
    before = [n.name for n in live_nodes(pool)]
    pod = pod_services.pod_create(user=actors["lead"], document=train_pod_document(), now=now)
    scheduler_pass(now=now)
    assert Pod.objects.get(pk=pod.pk).phase == "Pending"  # no node carries pool=train

    edit_spec(actors, pool, now, nodeLabels={"gpu-class": "a100", "pool": "train"})
    lifecycle.reconcile_all(now=now + TICK)
    for node in live_nodes(pool):
        assert node.labels["pool"] == "train" and node.labels["gpu-class"] == "a100"
        assert SimClusterNode.objects.get(name=node.name).labels["pool"] == "train"
        assert events(node, "NodeLabeled")[-1] == f"Labels of {node.name} updated: +pool=train"
        assert events(node, "NodeTainted") == [events(node, "NodeTainted")[0]]  # taints unchanged: no new event
    pool = GpuNodePool.objects.get(pk=pool.pk)
    assert pool.observed_generation == pool.generation

    scheduler_pass(now=now + 2 * TICK)
    pod = Pod.objects.select_related("node").get(pk=pod.pk)
    assert pod.phase == "Running" and pod.node.name in before
    assert [n.name for n in live_nodes(pool)] == before and PoolOrder.objects.filter(pool=pool).count() == 1  # nothing bought


def test_a_removed_label_and_taint_leave_the_nodes_while_others_labels_and_taints_stay(actors, ready_pool):
    pool, now = ready_pool
    node = live_nodes(pool)[0]
    others_taint = {"key": "maintenance", "value": "soon", "effect": "PreferNoSchedule"}
    row = SimClusterNode.objects.get(name=node.name)
    SimClusterNode.objects.filter(pk=row.pk).update(labels={**row.labels, "owner": "ops"}, taints=[*row.taints, others_taint])
    edit_spec(actors, pool, now, nodeLabels={"accelerator": "a100"}, nodeTaints=[{"key": "dedicated", "value": "train", "effect": "NoSchedule"}])
    lifecycle.reconcile_all(now=now + TICK)
    row = SimClusterNode.objects.get(name=node.name)
    assert row.labels["owner"] == "ops" and row.labels["accelerator"] == "a100" and "gpu-class" not in row.labels
    assert row.taints == [others_taint, {"key": "dedicated", "value": "train", "effect": "NoSchedule"}]
    node = Node.objects.get(pk=node.pk)
    assert "owner" not in node.labels and node.taints == [{"key": "dedicated", "value": "train", "effect": "NoSchedule"}]
    assert events(node, "NodeLabeled")[-1] == f"Labels of {node.name} updated: +accelerator=a100, -gpu-class=a100"
    assert events(node, "NodeTainted")[-1] == f"Taints of {node.name} updated: +dedicated=train:NoSchedule, -pool=train:NoSchedule"


def test_a_label_or_taint_of_ours_changed_by_someone_else_is_put_back_next_pass(actors, ready_pool):
    pool, now = ready_pool
    node = live_nodes(pool)[1]
    row = SimClusterNode.objects.get(name=node.name)
    labels = {k: v for k, v in row.labels.items() if k != "gpu-class"} | {"ebcloud.io/billing": "spot", "owner": "ops"}
    SimClusterNode.objects.filter(pk=row.pk).update(labels=labels, taints=[])
    count = PoolEvent.objects.count()
    lifecycle.reconcile_all(now=now + TICK)
    row = SimClusterNode.objects.get(name=node.name)
    assert row.labels["gpu-class"] == "a100" and row.labels["ebcloud.io/billing"] == "monthly" and row.labels["owner"] == "ops"
    assert row.taints == [{"key": "pool", "value": "train", "effect": "NoSchedule"}]
    assert events(node, "NodeLabeled")[-1] == f"Labels of {node.name} restored: +ebcloud.io/billing=monthly, +gpu-class=a100"
    assert events(node, "NodeTainted")[-1] == f"Taints of {node.name} restored: +pool=train:NoSchedule"
    assert PoolEvent.objects.count() == count + 2  # the other node had nothing to fix
    lifecycle.reconcile_all(now=now + 2 * TICK)
    assert PoolEvent.objects.count() == count + 2  # level reached: quiet again


def test_a_drained_node_uncordoned_by_someone_else_is_cordoned_again(actors, ready_pool):
    pool, now = ready_pool
    node = live_nodes(pool)[0]
    simulated.pod_run(node_name=node.name, name="holdout", namespace="algorithm", eviction_blocked=True, now=now)
    edit_spec(actors, pool, now, nodeCount={"min": 1, "max": 1})
    lifecycle.reconcile_all(now=now + TICK)
    draining = Node.objects.get(phase="Draining", pool=pool)
    assert SimClusterNode.objects.get(name=draining.name).unschedulable
    SimClusterNode.objects.filter(name=draining.name).update(unschedulable=False)  # kubectl uncordon
    lifecycle.reconcile_all(now=now + 2 * TICK)
    assert SimClusterNode.objects.get(name=draining.name).unschedulable
    assert events(draining, "NodeCordoned")[-1] == f"Node {draining.name} was made schedulable by someone else while it is drained: cordoned again"


def test_a_spec_that_could_not_reach_a_node_stays_unobserved_and_is_retried(actors, ready_pool, monkeypatch):
    pool, now = ready_pool
    failing = live_nodes(pool)[0].name
    apply = simulated_cluster.SimulatedCluster.node_apply

    def flaky(self, *, name, labels, taints, applied_taints=()):
        if name == failing:
            raise ProviderError("the API server refused the patch")
        return apply(self, name=name, labels=labels, taints=taints, applied_taints=applied_taints)

    monkeypatch.setattr(simulated_cluster.SimulatedCluster, "node_apply", flaky)
    edit_spec(actors, pool, now, nodeLabels={"gpu-class": "a100", "pool": "train"})
    lifecycle.reconcile_all(now=now + TICK)
    pool = GpuNodePool.objects.get(pk=pool.pk)
    assert pool.observed_generation == pool.generation - 1
    node = Node.objects.get(name=failing)
    assert "pool" not in node.labels and events(node, "NodeUpdateFailed")
    assert (node.attempts, node.step_due_at) == (1, now + TICK + timedelta(seconds=30))  # retried after a backoff
    monkeypatch.setattr(simulated_cluster.SimulatedCluster, "node_apply", apply)
    lifecycle.reconcile_all(now=now + 3 * TICK)
    assert Node.objects.get(name=failing).labels["pool"] == "train"
    assert (Node.objects.get(name=failing).attempts, Node.objects.get(name=failing).last_error) == (0, "")
    assert GpuNodePool.objects.get(pk=pool.pk).observed_generation == pool.generation


def test_a_wanted_label_someone_else_already_set_is_applied_as_ours_and_a_quiet_node_needs_nothing():
    observed = ClusterNodeState(labels={"pool": "train", "a": "1"}, taints=())
    fix = node_fix(wanted_labels={"a": "1", "pool": "train"}, wanted_taints=[], applied_labels={"a": "1"}, applied_taints=[], cordoned=False, observed=observed)
    assert fix.rows_changed and fix.apply and fix.labels == "updated: +pool=train" and not fix.cordon
    quiet = node_fix(wanted_labels={"a": "1"}, wanted_taints=[], applied_labels={"a": "1"}, applied_taints=[], cordoned=True, observed=ClusterNodeState(labels={"a": "1"}, unschedulable=True))
    assert not (quiet.apply or quiet.cordon or quiet.labels or quiet.rows_changed)
