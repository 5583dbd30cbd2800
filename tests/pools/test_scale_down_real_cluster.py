"""The scale-down's choice on a real cluster, over the pods its mirror stores: DaemonSet pods and
mirror (static) pods keep no node (Cluster Autoscaler and `kubectl drain` leave them; a
DaemonSet pins each pod to its node by name, so it would fit nowhere else), and a pod no
controller owns keeps its node unless annotated safe-to-evict "true" (evicted, nothing would
create it again), as does one with data in a local volume. The API server is out of reach here: the disruption budgets cannot be read,
so a node with pods is kept for that, after the reasons a pod's own metadata gives
(tests/k8s/test_scale_down_on_kubernetes.py runs the whole scale-down against a real one)."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps

from pools.controllers.scale_down import Removable, removable_burst_nodes
from pools.models import Node, WatchCursor
from pools.models.pods import Pod
from pools.providers.kubernetes_pods import pod_fields
from pools.services.pod_mirror import pods_apply
from tests.pools.pod_helpers import T0, cluster_pod, pool_with_nodes

pytestmark = pytest.mark.django_db
OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "trainer-5d8f", "uid": "rs-1", "controller": True}


@pytest.fixture
def on_cluster_away(settings, cluster_away):
    """The whole test on a real cluster whose API server does not answer."""
    settings.EBCLOUD_CLUSTER_BACKEND, settings.EBCLOUD_KUBECONFIG = cluster_away.values()


def mirrored(teams, *documents) -> None:
    team_of = {"algorithm": teams["algorithm"].pk}.get
    pods_apply([("ADDED", pod_fields(document, now=T0)) for document in documents], team_of=team_of, now=T0)


def pool_with_burst_node(actors):
    pool = pool_with_nodes(actors["lead"], node_labels={"gpu-class": "a100", "pool": "train"}, burst={"enabled": True, "maxNodes": 4})
    first = pool.nodes.first()
    burst = Node.objects.create(pool=pool, name="train-pool-a-burst", billing=Node.Billing.ON_DEMAND, phase=Node.Phase.READY, zone=pool.zone,
                                gpu_count=8, labels=first.labels, taints=first.taints, ready_at=T0)  # fmt: skip
    return pool, burst


def scale_down_plan(pool) -> Removable:
    """What the autoscaler's scale-down would choose to remove (one node at most)."""
    live = list(pool.nodes.select_related("pool__node_type", "pool__gpu_model", "pool"))
    return removable_burst_nodes([n for n in live if n.billing == Node.Billing.ON_DEMAND], live, limit=1)


def test_the_mirror_keeps_a_pods_owner_references_and_the_controllers_kind_is_read_from_them():
    daemon = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "nvidia-device-plugin", "uid": "ds-1", "controller": True}
    mere_owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "cm-1"}  # an owner, not a controller
    fields = pod_fields(cluster_pod("n1", "plugin", namespace="kube-system", owner=daemon), now=T0)
    assert fields["document"]["metadata"]["ownerReferences"] == [daemon]
    assert Pod(document=fields["document"]).controller_kind == "DaemonSet"
    assert Pod(document=pod_fields(cluster_pod("n1", "owned", owner=mere_owner), now=T0)["document"]).controller_kind == ""
    assert Pod(document=pod_fields(cluster_pod("n1", "bare"), now=T0)["document"]).controller_kind == ""


def test_daemonset_and_mirror_pods_keep_no_burst_node(actors, teams, on_cluster_away):
    """Every node runs the GPU device plugin (a DaemonSet's pod pinned to it) and the burst node
    a static pod too: the burst node is empty for the scale-down, goes, and nothing is moved (the
    drain leaves such pods; they go with the node)."""
    pool, burst = pool_with_burst_node(actors)
    daemon = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "nvidia-device-plugin", "uid": "ds-1", "controller": True}
    node_owner = {"apiVersion": "v1", "kind": "Node", "name": burst.name, "uid": "node-1", "controller": True}
    plugins = [cluster_pod(node.name, f"nvidia-device-plugin-{node.pk}", namespace="kube-system", owner=daemon, pinned=True) for node in pool.nodes.all()]
    static = cluster_pod(burst.name, f"node-exporter-{burst.name}", namespace="kube-system", owner=node_owner, annotations={"kubernetes.io/config.mirror": "4f1c"})
    mirrored(teams, *plugins, static)
    assert Pod.objects.filter(node=burst, phase=Pod.Phase.RUNNING).count() == 2
    plan = scale_down_plan(pool)
    assert plan.chosen == [(burst, [])] and plan.kept == {}


def test_a_pod_no_controller_owns_keeps_its_burst_node(actors, teams, on_cluster_away):
    pool, burst = pool_with_burst_node(actors)
    mirrored(teams, cluster_pod(burst.name, "bare-train", gpus=1))
    plan = scale_down_plan(pool)
    assert plan.chosen == [] and plan.kept == {burst.name: (
        'pod algorithm/bare-train has no controller (no ownerReference with controller: true): evicted, nothing would create it again; '
        'annotate it cluster-autoscaler.kubernetes.io/safe-to-evict: "true" to let its node go'
    )}  # fmt: skip


@pytest.mark.parametrize("metadata", [{"owner": OWNER}, {"annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"}}], ids=["controlled", "safe-to-evict"])
def test_a_controlled_pod_or_one_safe_to_evict_is_not_kept_for_lacking_a_controller(actors, teams, on_cluster_away, metadata):
    """Such a pod is weighed like any other: here its node is kept only because the cluster's
    disruption budgets cannot be read."""
    pool, burst = pool_with_burst_node(actors)
    mirrored(teams, cluster_pod(burst.name, "train", gpus=1, **metadata))
    assert scale_down_plan(pool).kept == {burst.name: "the cluster's disruption budgets could not be read"}


@pytest.mark.parametrize("volume, annotations, kept", [
    ({"name": "scratch", "emptyDir": {}}, {}, True),
    ({"name": "host", "hostPath": {"path": "/data"}}, {}, True),
    ({"name": "scratch", "emptyDir": {}}, {"cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes": "other, scratch"}, False),
    ({"name": "scratch", "emptyDir": {}}, {"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"}, False),
    ({"name": "shm", "emptyDir": {"medium": "Memory"}}, {}, False),
    ({"name": "claim", "persistentVolumeClaim": {"claimName": "ckpt"}}, {}, False),
], ids=["emptydir", "hostpath", "listed", "safe-to-evict", "in-memory", "claim"])  # fmt: skip
def test_a_pod_with_local_storage_keeps_its_burst_node_unless_it_says_it_may_lose_it(actors, teams, on_cluster_away, volume, annotations, kept):
    """Cluster Autoscaler's local-storage rule (FAQ: "pods with local storage"): what a pod wrote
    to a hostPath or a disk-backed emptyDir is lost if it moves. Otherwise the node is weighed as
    any other: kept here only because the cluster's disruption budgets cannot be read."""
    pool, burst = pool_with_burst_node(actors)
    document = cluster_pod(burst.name, "train", gpus=1, owner=OWNER, annotations=annotations)
    document["spec"]["volumes"] = [volume]
    mirrored(teams, document)
    because = (f"pod algorithm/train keeps data in its local volume {volume['name']!r} (emptyDir or hostPath), lost if it moves; "
               f'annotate it cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes: "{volume["name"]}" to let its node go')  # fmt: skip
    assert scale_down_plan(pool).kept == {burst.name: because if kept else "the cluster's disruption budgets could not be read"}


def test_the_mirror_lists_the_cluster_again_once_so_stored_pods_gain_their_owner_references():
    """Rows mirrored before kept no ownerReferences; a watch resumed from the stored
    resourceVersion would bring them only as each pod changes, so the migration clears the
    pods' cursor and the mirror relists at its next start."""
    WatchCursor.objects.create(resource="pods", resource_version="48213")
    WatchCursor.objects.create(resource="other", resource_version="7")
    importlib.import_module("pools.migrations.0023_pod_mirror_relists_for_owner_references").relist(apps, None)
    assert dict(WatchCursor.objects.values_list("resource", "resource_version")) == {"pods": "", "other": "7"}
