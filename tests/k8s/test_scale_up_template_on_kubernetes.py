"""The node a scale-up would buy, as Cluster Autoscaler pictures it on a real cluster: a node of
the pool running the DaemonSet pods its Ready nodes run (the GPU device plugin, a log agent),
so a Pending pod that fits only an empty node buys nothing (`NotTriggerScaleUp`, with the
resource it would lack), rather than a node that would leave it Pending. A Pending pod that
kube-scheduler's preemption nominated a node for buys nothing either: it waits for its victims."""

from __future__ import annotations

import pytest

from pools.controllers.autoscaler import pool_autoscale
from pools.models import GpuNodePool, Node, Pod, ScalingActivity
from pools.providers.kubernetes_pods import pod_fields
from pools.selectors.prospects import pool_templates
from pools.selectors.queue import pool_queue_length
from pools.services.pod_mirror import pods_apply
from tests.pools.autoscaler_helpers import SCALING, memory_used
from tests.pools.pod_helpers import T0, cluster_pod, pool_with_nodes

pytestmark = pytest.mark.django_db
DAEMON_SET = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "log-agent", "uid": "ds-2", "controller": True}
JOB = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "job-1", "controller": True}


def requesting(document: dict, *, cpu: str, gpus: int = 0, pending: bool = False, nominated: str = "") -> dict:
    """`document` asking for this cpu (and GPUs); Pending (no node yet) when `pending`, with
    the node kube-scheduler's preemption `nominated` for it."""
    resources = {"requests": {"cpu": cpu, "memory": "1Gi"}, **({"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {})}
    document["spec"]["containers"][0]["resources"] = resources
    if pending:
        del document["spec"]["nodeName"]
        document["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
        if nominated:
            document["status"]["nominatedNodeName"] = nominated
    return document


@pytest.fixture
def full_pool(actors, teams, on_kubernetes, unique):
    return pool_of_full_nodes(actors, teams, f"tpl-{unique}", cpus_left=2)


def pool_of_full_nodes(actors, teams, name: str, *, cpus_left: int):
    """A pool with burst nodes allowed, whose two Ready nodes run a DaemonSet pod that takes all
    but `cpus_left` CPUs of a node, and a Job's pods on all their GPUs."""
    pool = pool_with_nodes(actors["lead"], name=name, scaling=SCALING, burst={"enabled": True, "maxNodes": 4})
    cpus = pool.node_type.cpu_milli // 1000
    documents = []
    for node in pool.nodes.all():
        documents.append(requesting(cluster_pod(node.name, f"log-agent-{node.name}", namespace="kube-system", owner=DAEMON_SET, pinned=True), cpu=str(cpus - cpus_left)))
        documents.append(requesting(cluster_pod(node.name, f"train-{node.name}", owner=JOB), cpu="0", gpus=node.gpu_count))
    mirrored(teams, *documents)
    memory_used(pool, 95)
    return pool


def mirrored(teams, *documents) -> None:
    pods_apply([("ADDED", pod_fields(document, now=T0)) for document in documents], team_of={"algorithm": teams["algorithm"].pk}.get, now=T0)


def test_a_pod_that_fits_a_new_node_beside_its_daemon_set_pods_buys_one(full_pool, teams):
    mirrored(teams, requesting(cluster_pod("", "small", owner=JOB), cpu="1", gpus=1, pending=True))
    assert pool_queue_length(full_pool) == 1
    assert pool_autoscale(pool_id=full_pool.pk, now=T0).reason == "ScaledUp"
    assert full_pool.nodes.filter(billing=Node.Billing.ON_DEMAND).count() == 1


def test_a_pod_that_fits_only_an_empty_node_buys_none(full_pool, teams):
    mirrored(teams, requesting(cluster_pod("", "wide", owner=JOB), cpu="4", gpus=1, pending=True))
    assert pool_autoscale(pool_id=full_pool.pk, now=T0).reason == "NotTriggerScaleUp"
    assert not full_pool.nodes.filter(billing=Node.Billing.ON_DEMAND).exists()
    message = ScalingActivity.objects.get(pool=full_pool).message
    assert "wide: Insufficient cpu" in message, message
    # The pool's queue (samples, /metrics) and Diagnose picture the same node.
    assert pool_queue_length(full_pool) == 0
    template = pool_templates([GpuNodePool.objects.select_related("team", "node_type", "gpu_model", "zone").get(pk=full_pool.pk)])[full_pool.pk]
    assert template.cpu_free == 2000 and len(template.bound) == 1


@pytest.mark.parametrize("there", [True, False], ids=["nominated-node-there", "nominated-node-gone"])
def test_a_pod_waiting_for_its_preemption_buys_no_node(full_pool, teams, there):
    """While the node kube-scheduler nominated is there; a pod nominated to a node gone since
    waits for nothing, and buys one as any Pending pod."""
    name = full_pool.nodes.order_by("name").first().name if there else "gone-since"
    mirrored(teams, requesting(cluster_pod("", "urgent", owner=JOB), cpu="1", gpus=1, pending=True, nominated=name))
    assert Pod.objects.get(name="urgent").nominated_node_name == name
    assert pool_autoscale(pool_id=full_pool.pk, now=T0).reason == ("NoPendingPods" if there else "ScaledUp")
    assert full_pool.nodes.filter(billing=Node.Billing.ON_DEMAND).exists() is not there


def test_a_node_on_its_way_is_pictured_with_the_daemon_set_pods_too(actors, teams, on_kubernetes, unique):
    """A burst node being provisioned holds what a new node holds: with 3 CPUs beside the
    DaemonSet pods, one of two 2-CPU pods waits for it and the other buys a node."""
    pool = pool_of_full_nodes(actors, teams, f"tpl-{unique}", cpus_left=3)
    first = pool.nodes.first()
    Node.objects.create(pool=pool, name=f"{pool.name}-burst", billing=Node.Billing.ON_DEMAND, phase=Node.Phase.PROVISIONING, zone=pool.zone,
                        gpu_count=first.gpu_count, labels=first.labels, taints=first.taints, created_at=T0)  # fmt: skip
    mirrored(teams, *(requesting(cluster_pod("", name, owner=JOB), cpu="2", gpus=1, pending=True) for name in ("a", "b")))
    result = pool_autoscale(pool_id=pool.pk, now=T0)
    assert (result.reason, result.desired - result.current) == ("ScaledUp", 1), result
