"""Level-triggered node labels and taints on a real kube-apiserver: a spec edit reaches the
pool's existing Nodes within one pass over every pool, labels and taints set by other field
managers survive, a label of ours removed by someone else comes back the next pass, and a quiet
pass reads the cluster's nodes with one API call, however many nodes there are; the GPU-share
resource follows the GPUs a node reports, withdrawn when they are gone."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from kubernetes import client
from kubernetes.client import ApiClient

from pools.controllers import lifecycle
from pools.models import GpuNodePool, Node, PoolEvent
from pools.providers.fake_kubelet import FakeKubelet
from pools.providers.kubernetes import KubernetesCluster
from tests.k8s.helpers import SCHEDULER_WAIT, verdict, wait_for
from tests.pools.lifecycle_helpers import T0, TICK, approved_pool, live_nodes, run_until
from tests.pools.pod_helpers import pool_with_nodes
from tests.pools.pool_helpers import edit_spec

pytestmark = pytest.mark.django_db
OTHERS_TAINT = ("maintenance", "soon", "PreferNoSchedule")


def taints_of(core, name):
    return [(t.key, t.value or "", t.effect) for t in core.read_node(name).spec.taints or ()]


def last_event(node, reason):
    return PoolEvent.objects.filter(node=node, reason=reason).order_by("-id").values_list("message", flat=True).first()


@pytest.fixture
def api_calls(monkeypatch):
    """Counts every request the Kubernetes client sends (all ApiClients of the process)."""
    calls = []
    send = ApiClient.call_api

    def counted(self, method, url, *args, **kwargs):
        calls.append(f"{method} {urlsplit(url).path}")
        return send(self, method, url, *args, **kwargs)

    monkeypatch.setattr(ApiClient, "call_api", counted)
    return calls


def pool_on_cluster(actors, kube, name, nodes):
    """A pool with Ready nodes created directly, each registered by the fake kubelet and carrying
    the pool's labels and taints (applied as the lifecycle applies them at registration)."""
    pool = pool_with_nodes(actors["lead"], name=name, nodes=nodes)
    kubelet, cluster = FakeKubelet(kube), KubernetesCluster(kube)
    for node in Node.objects.filter(pool=pool):
        kubelet.join(name=node.name, cpu_milli=pool.node_type.cpu_milli, memory_mib=pool.node_type.memory_mib, gpus=node.gpu_count, now=T0)
        cluster.node_apply(name=node.name, labels=node.labels, taints=node.taints)
    return pool


def test_a_spec_edit_reaches_the_nodes_in_one_pass_and_others_labels_and_taints_stay(on_kubernetes, actors, train_document, core, unique):
    train_document["metadata"]["name"] = f"edit-{unique}"
    pool = approved_pool(actors, train_document)
    now = run_until(pool, T0)
    names = [n.name for n in live_nodes(pool)]
    for name in names:  # another field manager labels and taints the nodes (kubectl label / taint)
        core.patch_node(name, {"metadata": {"labels": {"owner": "ops"}}})
        core.patch_node(name, {"spec": {"taints": [{"key": k, "value": v, "effect": e} for k, v, e in [*taints_of(core, name), OTHERS_TAINT]]}})
    edit_spec(actors, pool, now, nodeLabels={"pool": "train"}, nodeTaints=[{"key": "dedicated", "value": "train", "effect": "NoSchedule"}])
    lifecycle.reconcile_all(now=now + TICK)
    for name in names:
        labels = core.read_node(name).metadata.labels
        assert labels["pool"] == "train" and "gpu-class" not in labels  # ours: the new set
        assert labels["owner"] == "ops" and labels["kubernetes.io/hostname"] == name  # others': kept
        assert sorted(taints_of(core, name)) == sorted([("dedicated", "train", "NoSchedule"), OTHERS_TAINT])
        node = Node.objects.get(name=name)
        assert node.labels == {k: v for k, v in labels.items() if k not in ("owner", "kubernetes.io/hostname")}
        assert node.taints == [{"key": "dedicated", "value": "train", "effect": "NoSchedule"}]
        assert last_event(node, "NodeLabeled") == f"Labels of {name} updated: +pool=train, -gpu-class=a100"
        assert last_event(node, "NodeTainted") == f"Taints of {name} updated: +dedicated=train:NoSchedule, -pool=train:NoSchedule"
    pool = GpuNodePool.objects.get(pk=pool.pk)
    assert pool.observed_generation == pool.generation


def test_a_label_of_ours_removed_by_someone_else_is_restored_next_pass(on_kubernetes, actors, kube, core, unique, api_calls):
    pool = pool_on_cluster(actors, kube, f"drift-{unique}", 2)
    lifecycle.reconcile_all(now=T0)  # observes the new pool's spec: nothing to change on the nodes
    node = Node.objects.filter(pool=pool).order_by("name").first()
    core.patch_node(node.name, {"metadata": {"labels": {"gpu-class": None, "ebcloud.io/billing": "spot", "owner": "ops"}}})
    core.patch_node(node.name, {"spec": {"taints": [{"key": k, "value": v, "effect": e} for k, v, e in [OTHERS_TAINT]]}})  # ours dropped
    api_calls.clear()
    lifecycle.reconcile_all(now=T0 + TICK)
    sent = list(api_calls)
    labels = core.read_node(node.name).metadata.labels
    assert labels["gpu-class"] == "a100" and labels["ebcloud.io/billing"] == "monthly" and labels["owner"] == "ops"
    assert sorted(taints_of(core, node.name)) == sorted([("pool", "train", "NoSchedule"), OTHERS_TAINT])
    assert last_event(node, "NodeLabeled") == f"Labels of {node.name} restored: +ebcloud.io/billing=monthly, +gpu-class=a100"
    assert last_event(node, "NodeTainted") == f"Taints of {node.name} restored: +pool=train:NoSchedule"
    assert sent == ["GET /api/v1/nodes", f"PATCH /api/v1/nodes/{node.name}"]  # the list, then the drifted node's apply (conditional on the listed resourceVersion)
    api_calls.clear()
    events = PoolEvent.objects.count()
    lifecycle.reconcile_all(now=T0 + 2 * TICK)
    assert (api_calls, PoolEvent.objects.count()) == (["GET /api/v1/nodes"], events)  # level reached: quiet again


def test_a_quiet_pass_makes_one_api_call_however_many_nodes(on_kubernetes, actors, kube, unique, api_calls):
    pool_on_cluster(actors, kube, f"few-{unique}", 2)
    lifecycle.reconcile_all(now=T0)
    api_calls.clear()
    lifecycle.reconcile_all(now=T0 + TICK)
    few = list(api_calls)
    pool_on_cluster(actors, kube, f"many-{unique}", 6)
    lifecycle.reconcile_all(now=T0 + 2 * TICK)
    api_calls.clear()
    lifecycle.reconcile_all(now=T0 + 3 * TICK)
    assert few == api_calls == ["GET /api/v1/nodes"]
    assert Node.objects.filter(phase="Ready").count() == 8


def test_gpu_shares_are_advertised_at_join_and_put_back_after_a_kubelet_drops_them(on_kubernetes, actors, kube, core, unique, api_calls):
    """The GPU-share resource in every GPU Node's capacity and allocatable, 1000 per GPU, as
    Kubernetes documents advertising an extended resource; a kubelet that restarts zeroes it
    (it reports only its device plugins' resources) and the next pass puts it back (seed D1)."""
    pool = pool_with_nodes(actors["lead"], name=f"shares-{unique}", nodes=1)
    node = Node.objects.get(pool=pool)
    FakeKubelet(kube).join(name=node.name, cpu_milli=96_000, memory_mib=393_216, gpus=8, now=T0)
    KubernetesCluster(kube).register_node(name=node.name, now=T0)  # the lifecycle's join step

    def shares():
        status = core.read_node(node.name).status
        return status.capacity.get("ebcloud.io/gpu-milli"), status.allocatable.get("ebcloud.io/gpu-milli")

    assert shares() == ("8k", "8k")  # 8000, as the API server writes quantities
    lifecycle.reconcile_all(now=T0)
    core.patch_node_status(node.name, {"status": {"capacity": {"ebcloud.io/gpu-milli": "0"}, "allocatable": {"ebcloud.io/gpu-milli": "0"}}})
    api_calls.clear()
    lifecycle.reconcile_all(now=T0 + TICK)
    assert api_calls == ["GET /api/v1/nodes", f"PATCH /api/v1/nodes/{node.name}/status"]
    assert shares() == ("8k", "8k")
    assert last_event(node, "GpuSharesAdvertised") == f"{node.name} advertises ebcloud.io/gpu-milli again, 1000 per GPU it offers (none while it offers no GPU), so GPU shares are scheduled only where a GPU is"
    api_calls.clear()
    lifecycle.reconcile_all(now=T0 + 2 * TICK)
    assert api_calls == ["GET /api/v1/nodes"]


def share_pod(namespace: str, node: str) -> client.V1Pod:
    """Half a GPU, on that node only (it tolerates the pool's taints)."""
    container = client.V1Container(name="main", image="registry.invalid/x:1", resources=client.V1ResourceRequirements(limits={"ebcloud.io/gpu-milli": "500"}))
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name="half", namespace=namespace),
        spec=client.V1PodSpec(containers=[container], node_selector={"kubernetes.io/hostname": node}, tolerations=[client.V1Toleration(operator="Exists")], automount_service_account_token=False),
    )


def test_gpu_shares_follow_the_gpus_the_device_plugin_reports_none_where_none_is_and_back_when_they_return(on_kubernetes, actors, kube, core, unique, namespace):
    """The shares were put back only when a GPU node lacked them: a node whose GPUs were gone
    (the device plugin reports 0, or an unhealthy GPU leaves allocatable) kept offering all its
    shares, and kube-scheduler bound share pods to a node without a GPU. Each side now offers
    1000 per GPU of its own: 0 when none is, and the shares come back with the GPUs."""
    pool = pool_with_nodes(actors["lead"], name=f"gone-{unique}", nodes=1)
    node = Node.objects.get(pool=pool)
    FakeKubelet(kube).join(name=node.name, cpu_milli=96_000, memory_mib=393_216, gpus=8, now=T0)
    KubernetesCluster(kube).register_node(name=node.name, now=T0)
    lifecycle.reconcile_all(now=T0)

    def shares():
        status = core.read_node(node.name).status
        return status.capacity.get("ebcloud.io/gpu-milli"), status.allocatable.get("ebcloud.io/gpu-milli")

    def gpus(capacity: str | None, allocatable: str | None) -> None:  # what the kubelet reports from its device plugin
        core.patch_node_status(node.name, {"status": {"capacity": {"nvidia.com/gpu": capacity}, "allocatable": {"nvidia.com/gpu": allocatable}}})

    assert shares() == ("8k", "8k")
    gpus("0", "0")  # the device plugin reports none
    lifecycle.reconcile_all(now=T0 + TICK)
    assert shares() == ("0", "0")
    assert KubernetesCluster(kube).nodes_state(names=[node.name])[node.name].gpu_shares_advertised
    core.create_namespaced_pod(namespace, share_pod(namespace, node.name))
    kind, message = wait_for(lambda: verdict(core, namespace, "half"), timeout=SCHEDULER_WAIT, what="kube-scheduler's verdict")
    assert kind == "pending" and "Insufficient ebcloud.io/gpu-milli" in message, message
    gpus("8", "7")  # the GPUs back, one of them unhealthy: in the capacity, not allocatable
    lifecycle.reconcile_all(now=T0 + 2 * TICK)
    assert shares() == ("8k", "7k")
    assert wait_for(lambda: verdict(core, namespace, "half")[0] == "bound", timeout=SCHEDULER_WAIT, what="the share pod bound once GPUs are back")
    gpus(None, None)  # the resource itself gone from the status (the device plugin stopped): no shares either
    assert not KubernetesCluster(kube).nodes_state(names=[node.name])[node.name].gpu_shares_advertised
    lifecycle.reconcile_all(now=T0 + 3 * TICK)
    assert shares() == ("0", "0")


@pytest.mark.parametrize("record", ["not json", "[1]", "null", '{"a": 1}', '[["pool"]]', None, "[" * 100_000])
def test_a_garbled_or_removed_record_of_our_taints_stalls_no_pass_and_leaves_none_of_ours(on_kubernetes, actors, kube, core, unique, record):
    """The Node's annotation of the taints we applied is anyone's to edit: garbled, it failed
    the pool's whole pass with the JSON error, every pass (a label lost on the pool's other node
    never came back); removed, a taint the spec then dropped stayed on the Node for good while
    the row said it was gone. The Node row's record stands in, and the apply writes it again."""
    pool = pool_on_cluster(actors, kube, f"rec-{unique}", 2)
    lifecycle.reconcile_all(now=T0)
    first, second = Node.objects.filter(pool=pool).order_by("pk")
    core.patch_node(first.name, {"metadata": {"annotations": {"ebcloud.io/managed-taints": record}}})
    core.patch_node(second.name, {"metadata": {"labels": {"gpu-class": None}}})
    results = [r for r in lifecycle.reconcile_all(now=T0 + TICK) if r.pool_id == pool.pk]
    assert not any(r.error for r in results), results
    assert core.read_node(second.name).metadata.labels.get("gpu-class") == "a100"
    assert core.read_node(first.name).metadata.annotations.get("ebcloud.io/managed-taints") == '[["pool", "NoSchedule"]]'  # written again
    edit_spec(actors, pool, T0, nodeTaints=[])
    lifecycle.reconcile_all(now=T0 + 2 * TICK)
    assert taints_of(core, first.name) == taints_of(core, second.name) == []
