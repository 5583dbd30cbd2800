"""The autoscaler's scale-down on a real cluster, over the pods its mirror stores, with a real
kube-apiserver answering the disruption budgets, the cordon and the drain's list of pods: a burst
node that runs only DaemonSet and mirror (static) pods is empty and goes, as Cluster Autoscaler
and `kubectl drain` leave those pods; one that runs a pod no controller owns stays (evicted,
nothing would create it again) unless the pod is annotated safe-to-evict "true", and says why."""

from __future__ import annotations

from datetime import timedelta

import pytest
from kubernetes import client

from pools.controllers.autoscaler import pool_autoscale
from pools.controllers.scale_down import PodsRecheck
from pools.controllers.scale_down_cordons import cordon_bound, decision_cordon
from pools.models import Node, Pod, ScalingActivity
from pools.providers import get_cluster_backend
from pools.providers.base import ClusterRefused
from pools.providers.kubernetes import KubernetesCluster
from pools.providers.kubernetes_pods import ClusterPods, pod_fields
from pools.services.pod_mirror import pods_apply
from tests.k8s.helpers import pod
from tests.pools.autoscaler_helpers import SCALING, memory_used
from tests.pools.pod_helpers import T0, cluster_pod, pool_with_nodes

pytestmark = pytest.mark.django_db
LATER = T0 + timedelta(hours=1)  # past the scale-down window
DAEMON_SET = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "nvidia-device-plugin", "uid": "ds-1", "controller": True}
REPLICA_SET = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "trainer-5d8f", "uid": "rs-1", "controller": True}
SAFE_TO_EVICT = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"}


@pytest.fixture
def burst_pool(actors, teams, on_kubernetes, unique):
    """A pool of two monthly nodes and a Ready burst node, every node running the GPU device
    plugin (a DaemonSet's pod), its GPU memory nearly unused."""
    name = f"sd-{unique}"
    pool = pool_with_nodes(actors["lead"], name=name, node_labels={"gpu-class": "a100", "pool": "train"}, scaling=SCALING, burst={"enabled": True, "maxNodes": 4})
    first = pool.nodes.first()
    burst = Node.objects.create(pool=pool, name=f"{name}-burst", billing=Node.Billing.ON_DEMAND, phase=Node.Phase.READY, zone=pool.zone,
                                gpu_count=8, labels=first.labels, taints=first.taints, ready_at=T0)  # fmt: skip
    mirrored(teams, *(cluster_pod(node.name, f"nvidia-device-plugin-{node.name}", namespace="kube-system", owner=DAEMON_SET, pinned=True) for node in pool.nodes.all()))
    memory_used(pool, 5)
    return pool, burst


def mirrored(teams, *documents) -> None:
    pods_apply([("ADDED", pod_fields(document, now=T0)) for document in documents], team_of={"algorithm": teams["algorithm"].pk}.get, now=T0)


def test_a_burst_node_with_only_daemonset_and_mirror_pods_goes(burst_pool, teams):
    pool, burst = burst_pool
    node_owner = {"apiVersion": "v1", "kind": "Node", "name": burst.name, "uid": "node-1", "controller": True}
    mirrored(teams, cluster_pod(burst.name, f"node-exporter-{burst.name}", namespace="kube-system", owner=node_owner, annotations={"kubernetes.io/config.mirror": "4f1c"}))
    assert pool_autoscale(pool_id=pool.pk, now=LATER).reason == "ScaledDown"
    burst.refresh_from_db()
    assert burst.release_reason


def test_a_pod_no_controller_owns_keeps_its_burst_node(burst_pool, teams):
    pool, burst = burst_pool
    mirrored(teams, cluster_pod(burst.name, "bare-train", gpus=1))
    assert pool_autoscale(pool_id=pool.pk, now=LATER).reason == "ScaleDownBlocked"
    burst.refresh_from_db()
    assert burst.release_reason == ""
    message = ScalingActivity.objects.get(pool=pool, reason="ScaleDownBlocked").message
    assert f'{burst.name}: pod algorithm/bare-train has no controller (no ownerReference with controller: true)' in message, message


@pytest.mark.parametrize("metadata", [{"owner": REPLICA_SET}, {"annotations": SAFE_TO_EVICT}], ids=["controlled", "safe-to-evict"])
def test_a_controlled_pod_or_one_safe_to_evict_lets_its_burst_node_go(burst_pool, teams, metadata):
    pool, burst = burst_pool
    mirrored(teams, cluster_pod(burst.name, "train", gpus=1, **metadata))
    assert pool_autoscale(pool_id=pool.pk, now=LATER).reason == "ScaledDown"
    burst.refresh_from_db()
    assert burst.release_reason


def test_the_mirror_reads_the_controller_of_a_pod_the_api_server_lists(kube, core, namespace):
    """The owner references as the API server serves them (camelCase, `controller: true`) reach
    the stored document, and the controller's kind is read from them."""
    owner = client.V1OwnerReference(api_version="apps/v1", kind="ReplicaSet", name="trainer-5d8f", uid="6b1c1f0e-9d7a-4c8e-a1f3-2e4b5c6d7e8f", controller=True)
    core.create_namespaced_pod(namespace, pod(namespace, "owned", owner=[owner], node_selector={"kubernetes.io/hostname": "nowhere"}))
    core.create_namespaced_pod(namespace, pod(namespace, "bare", node_selector={"kubernetes.io/hostname": "nowhere"}))
    listed, _ = ClusterPods(kube).list()
    kinds = {item["metadata"]["name"]: Pod(document=pod_fields(item, now=T0)["document"]).controller_kind for item in listed if item["metadata"]["namespace"] == namespace}
    assert kinds == {"owned": "ReplicaSet", "bare": ""}


def cluster_node(core, name: str, *, cordoned: bool = False, annotations: dict[str, str] | None = None) -> None:
    metadata = client.V1ObjectMeta(name=name, labels={"kubernetes.io/hostname": name}, annotations=annotations)
    core.create_node(client.V1Node(metadata=metadata, spec=client.V1NodeSpec(unschedulable=cordoned or None)))


def cordoned_in_cluster(core, name: str) -> bool:
    return bool(core.read_node(name).spec.unschedulable)


@pytest.mark.parametrize(
    ("known", "cordoned_by"),
    [(False, "drain"), (True, "drain"), (True, "administrator")],
    ids=["unknown-bare-pod", "mirrored-controlled-pod", "cordoned-by-an-administrator-before"],
)
def test_a_cordon_a_stopped_scale_down_left_is_lifted_in_the_cluster_too(burst_pool, core, namespace, teams, known, cordoned_by):
    """The decision cordoned the burst node and its drain cordoned the cluster's Node, then the
    worker stopped. Past the claim time the next pass lifts the cordon in the cluster and on the
    row and says why, whatever the node's pod: one the read model does not know yet, or one a
    ReplicaSet owns that the drain's re-check would let go. The stale decision is never carried
    out (its pod may have nowhere to go now): the pod stays, and the next scale-down decides.
    A `kubectl cordon` the Node had before the decision carries no drain's mark and stays."""
    pool, burst = burst_pool
    cluster_node(core, burst.name, cordoned=cordoned_by == "administrator")
    get_cluster_backend().cordon(name=burst.name, mark=True)  # as the drain did, before the worker stopped
    try:
        decision_cordon(pool, [burst], LATER)
        owner = [client.V1OwnerReference(api_version="apps/v1", kind="ReplicaSet", name="trainer-5d8f", uid="rs-1", controller=True)] if known else None
        core.create_namespaced_pod(namespace, pod(namespace, "train", node=burst.name, owner=owner))
        if known:
            pods_apply([("ADDED", pod_fields(cluster_pod(burst.name, "train", namespace=namespace, owner=REPLICA_SET, gpus=1), now=T0))],
                       team_of={namespace: teams["algorithm"].pk}.get, now=T0)  # fmt: skip
        memory_used(pool, 95)  # busy now: no scale-down of its own
        pool_autoscale(pool_id=pool.pk, now=LATER + cordon_bound() + timedelta(seconds=1))
        burst.refresh_from_db()
        assert not burst.unschedulable and burst.release_reason == ""
        assert cordoned_in_cluster(core, burst.name) is (cordoned_by == "administrator")
        message = pool.events.get(reason="ScaleDownUncordoned").message
        assert "did not start its drain within 2m0s (the pass that decided it stopped); the next scale-down decides again from the current state" in message, message
        assert ("the cluster keeps the cordon of its Node, which someone else set (kubectl cordon)" in message) is (cordoned_by == "administrator")
        assert not pool.events.filter(reason="ScaledDown").exists()
        assert core.read_namespaced_pod("train", namespace).metadata.deletion_timestamp is None  # not evicted
    finally:
        core.delete_node(burst.name)


def test_the_recheck_cordons_the_chosen_nodes_in_the_cluster_before_it_lists_their_pods(burst_pool, core):
    """kube-scheduler sees only the cluster's cordon: the nodes the drain has not reached yet
    are cordoned before the one read of every chosen node's pods; a cordon set so ahead of a
    drain cancelled before it asked is lifted."""
    pool, burst = burst_pool
    second = Node.objects.create(pool=pool, name=f"{burst.name}-2", billing=Node.Billing.ON_DEMAND, phase=Node.Phase.READY, zone=pool.zone,
                                 gpu_count=8, labels=burst.labels, taints=burst.taints, ready_at=T0)  # fmt: skip
    for node in (burst, second):
        cluster_node(core, node.name)
    try:
        cluster = get_cluster_backend()
        recheck = PodsRecheck(cluster, [(burst, []), (second, [])])
        cluster.cordon(name=burst.name, mark=True)  # as the drain does before it asks
        assert recheck(burst) == ""
        assert cordoned_in_cluster(core, second.name)
        recheck.cordons_lift([second])  # its drain did not get as far as asking
        assert not cordoned_in_cluster(core, second.name)
    finally:
        for node in (burst, second):
            core.delete_node(node.name)


@pytest.mark.parametrize("before", [False, True], ids=["not-cordoned", "cordoned-by-an-administrator"])
def test_a_cancelled_scale_down_lifts_only_the_cordon_it_set(burst_pool, core, namespace, before):
    """A pod the plan did not see (not in the read model yet) keeps the chosen burst node, and the
    scale-down is cancelled: its own cordon is lifted, in the cluster and on the row, but a
    `kubectl cordon` from before the decision stays, as Cluster Autoscaler (whose mark is a
    taint of its own) never touches `spec.unschedulable`."""
    pool, burst = burst_pool
    cluster_node(core, burst.name, cordoned=before)
    try:
        core.create_namespaced_pod(namespace, pod(namespace, "newcomer", node=burst.name))
        assert pool_autoscale(pool_id=pool.pk, now=LATER).reason == "ScaleDownBlocked"
        burst.refresh_from_db()
        assert burst.release_reason == "" and not burst.unschedulable
        assert cordoned_in_cluster(core, burst.name) is before
        message = ScalingActivity.objects.get(pool=pool, reason="ScaleDownBlocked").message
        assert f"{burst.name}: pod {namespace}/newcomer is on the node and not known here yet" in message, message
    finally:
        core.delete_node(burst.name)


@pytest.mark.parametrize(
    ("annotations", "kept"),
    [
        ({"cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"}, 'annotated cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"'),
        ({"karpenter.sh/do-not-disrupt": "true"}, 'annotated karpenter.sh/do-not-disrupt: "true"'),
        ({"cluster-autoscaler.kubernetes.io/scale-down-disabled": "True"}, None),  # compared exactly, as Cluster Autoscaler does
    ],
    ids=["scale-down-disabled", "do-not-disrupt", "not-exactly-true"],
)
def test_a_burst_node_annotated_to_opt_out_of_scale_down_stays(burst_pool, core, annotations, kept):
    """An idle burst node whose Node is annotated `scale-down-disabled` (Cluster Autoscaler) or
    `do-not-disrupt` (Karpenter) is never chosen: it stays, uncordoned, and the scale-down says
    why; any other value of the annotation lets the node go."""
    pool, burst = burst_pool
    cluster_node(core, burst.name, annotations=annotations)
    try:
        result = pool_autoscale(pool_id=pool.pk, now=LATER)
        burst.refresh_from_db()
        if kept is None:  # drained and released: its Node is deleted
            assert result.reason == "ScaledDown" and burst.release_reason
            assert not core.list_node(field_selector=f"metadata.name={burst.name}").items
            return
        assert result.reason == "ScaleDownBlocked" and burst.release_reason == "" and not burst.unschedulable
        assert not cordoned_in_cluster(core, burst.name)
        message = ScalingActivity.objects.get(pool=pool, reason="ScaleDownBlocked").message
        assert f"{burst.name}: node {burst.name} is {kept}" in message, message
    finally:
        if core.list_node(field_selector=f"metadata.name={burst.name}").items:
            core.delete_node(burst.name)


@pytest.mark.parametrize("expendable", [False, True], ids=["pod", "expendable-pod"])
def test_a_burst_node_a_pending_pod_is_nominated_to_stays(burst_pool, teams, expendable):
    """kube-scheduler's preemption nominated the burst node for a Pending pod: the node stays
    while the pod waits there for its victims, as Cluster Autoscaler counts the pod on it; an
    expendable pod (priority below the cutoff) keeps no node, nominated or not."""
    pool, burst = burst_pool
    waiting = cluster_pod("", "urgent", gpus=1, owner=REPLICA_SET)
    del waiting["spec"]["nodeName"]
    waiting["spec"]["priority"] = -100 if expendable else 1000
    waiting["status"] = {"phase": "Pending", "nominatedNodeName": burst.name, "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    mirrored(teams, waiting)
    if expendable:
        assert pool_autoscale(pool_id=pool.pk, now=LATER).reason == "ScaledDown"
        return
    assert pool_autoscale(pool_id=pool.pk, now=LATER).reason == "ScaleDownBlocked"
    burst.refresh_from_db()
    assert burst.release_reason == "" and not burst.unschedulable
    message = ScalingActivity.objects.get(pool=pool, reason="ScaleDownBlocked").message
    assert f"{burst.name}: Pending pod algorithm/urgent is nominated to it" in message, message


def test_no_burst_node_goes_while_the_cluster_s_nodes_cannot_be_read(burst_pool, core, monkeypatch):
    """Whether a node opted out of scale-down (or was cordoned by someone) is read from the
    cluster: while that read fails, every burst node stays, and the scale-down says why."""
    pool, burst = burst_pool
    cluster_node(core, burst.name, annotations={"cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"})

    def refused(self, *, names):
        raise ClusterRefused("list nodes: timed out")

    monkeypatch.setattr(KubernetesCluster, "nodes_state", refused)
    try:
        assert pool_autoscale(pool_id=pool.pk, now=LATER).reason == "ScaleDownBlocked"
        burst.refresh_from_db()
        assert burst.release_reason == "" and not burst.unschedulable
        message = ScalingActivity.objects.get(pool=pool, reason="ScaleDownBlocked").message
        assert f"{burst.name}: the cluster's Nodes could not be read now (list nodes: timed out)" in message, message
    finally:
        core.delete_node(burst.name)
