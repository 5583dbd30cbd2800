"""A node the rows call Ready but the cluster runs no pod on, read from a real kube-apiserver:
its Node deleted (`kubectl delete node`), its kubelet reporting NotReady, or its GPU device
plugin serving none of its GPUs. kube-scheduler places nothing there, so the
node's room must not count: the row records why (`cluster_fault`), the scheduling core reads it
as not Ready, and one event says when it starts and when it ends (design §1: the cluster's
state is level-triggered, every change is an event)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from kubernetes.client.exceptions import ApiException

from pools.controllers import lifecycle, repair
from pools.models import Node, PoolEvent
from pools.selectors.cluster import cluster_state, live_nodes
from tests.k8s.test_node_labels_on_kubernetes import pool_on_cluster
from tests.pools.lifecycle_helpers import T0, TICK

pytestmark = pytest.mark.django_db


def events(reason):
    return list(PoolEvent.objects.filter(reason=reason).order_by("id").values_list("node__name", "message"))


@pytest.fixture
def cleanup(core):
    """Nodes to delete after the test: a Ready GPU Node left behind would take other tests' pods."""
    names: list[str] = []
    yield names
    for name in names:
        try:
            core.delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise


def test_a_deleted_node_a_not_ready_one_and_one_without_its_gpus_take_nothing_until_they_are_back(on_kubernetes, actors, kube, core, unique, cleanup):
    pool = pool_on_cluster(actors, kube, f"faults-{unique}", nodes=4)
    gone, silent, short, fine = names = sorted(Node.objects.filter(pool=pool).values_list("name", flat=True))
    cleanup.extend(names)
    lifecycle.reconcile_all(now=T0)
    assert not Node.objects.exclude(cluster_fault="").exists() and not events("NodeUnavailable")

    core.delete_node(gone)
    core.patch_node_status(silent, {"status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]}})
    core.patch_node_status(short, {"status": {"allocatable": {"nvidia.com/gpu": "0"}}})
    lifecycle.reconcile_all(now=T0 + TICK)
    faults = dict(Node.objects.filter(pool=pool).values_list("name", "cluster_fault"))
    assert faults == {
        gone: f"the cluster has no Node '{gone}' (deleted?); its kubelet registers it again when it restarts",
        silent: "its Node is not Ready (Ready=Unknown)",
        short: "its Node offers none of its 8 GPUs (nvidia.com/gpu allocatable 0): its GPU device plugin serves none",
        fine: "",
    }
    assert [name for name, _ in events("NodeUnavailable")] == [gone, silent, short]
    states = cluster_state(live_nodes(pools=[pool]), [])
    assert {name for name in names if states[name].ready} == {fine}  # the autoscaler and Diagnose count only its room

    lifecycle.reconcile_all(now=T0 + 2 * TICK)  # level-triggered: the same faults write nothing again
    assert len(events("NodeUnavailable")) == 3

    core.patch_node_status(silent, {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}})
    core.patch_node_status(short, {"status": {"allocatable": {"nvidia.com/gpu": "8"}}})
    lifecycle.reconcile_all(now=T0 + 3 * TICK)
    assert [name for name, _ in events("NodeAvailable")] == [silent, short]
    assert set(Node.objects.filter(pool=pool).exclude(cluster_fault="").values_list("name", flat=True)) == {gone}


def test_a_node_not_ready_for_half_an_hour_is_replaced_and_its_node_leaves_the_cluster(on_kubernetes, actors, kube, core, unique, cleanup):
    """A dead kubelet left its node in the pool's paid slot for ever: the repair ladder read the
    agent's Xids only. After 30 minutes NotReady (as EKS and Karpenter), the repair pass drains
    and releases it, and its Node leaves the API server."""
    pool = pool_on_cluster(actors, kube, f"dead-{unique}", nodes=2)
    dead, fine = names = sorted(Node.objects.filter(pool=pool).values_list("name", flat=True))
    cleanup.extend(names)
    core.patch_node_status(dead, {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]}})
    lifecycle.reconcile_all(now=T0)
    assert repair.repair_all(now=T0 + timedelta(minutes=29)) == 0
    assert repair.repair_all(now=T0 + timedelta(minutes=30)) == 1
    node = Node.objects.get(name=dead)
    assert (node.phase, node.release_reason) == ("Terminated", "Repair")
    with pytest.raises(ApiException) as gone:
        core.read_node(dead)
    assert gone.value.status == 404
    assert Node.objects.get(name=fine).phase == "Ready" and core.read_node(fine).spec.unschedulable is None


def test_a_node_removed_on_purpose_while_it_drains_is_no_fault(on_kubernetes, actors, kube, core, unique, cleanup):
    """A pass cut off between the Node's removal and the row's Terminated left a draining node
    whose Node was gone, and the next pass warned `NodeUnavailable` of a node released on purpose
    (review)."""
    pool = pool_on_cluster(actors, kube, f"leaving-{unique}", nodes=1)
    (name,) = Node.objects.filter(pool=pool).values_list("name", flat=True)
    cleanup.append(name)
    Node.objects.filter(name=name).update(phase="Draining", release_reason="Surplus")
    core.delete_node(name)
    lifecycle.reconcile_all(now=T0)
    assert not events("NodeUnavailable") and Node.objects.get(name=name).cluster_fault == ""
