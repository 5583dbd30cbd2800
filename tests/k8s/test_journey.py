"""The article's journey, one test body on both clusters: the simulated one (the embedded
default) and a real kube-apiserver + kube-scheduler whose nodes are played by fake kubelets.

The article's pool is created and approved, its nodes register with its labels and taints; the
article's pod is applied as a plain Kubernetes manifest (with kubectl on the real cluster) and
stays Pending with the scheduler's verdict and our hint; `nodeLabels: {pool: train}` is added,
the existing nodes are relabelled and the pod is bound; a queue of pods bursts the pool and the
new node takes pods; a disruption budget makes a drain wait; the hour is metered from the pods
the control plane saw."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal

import pytest
import yaml
from django.db import connection
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from billing.models import UsageRecord
from billing.services import meter_hour
from pools.controllers.autoscaler import autoscale_all
from pools.controllers.lifecycle import reconcile_all
from pools.controllers.scheduler import scheduler_pass
from pools.models import GpuNodePool, Node, PoolEvent, SimFailure
from pools.models.pods import Pod
from pools.providers.simulated import EVICT, failure_inject
from pools.services import pods as pod_services
from tests.conftest import EXAMPLES
from tests.k8s.control_plane import ControlPlane
from tests.k8s.helpers import plane_running
from tests.pools.autoscaler_helpers import SCALING, memory_used
from tests.pools.lifecycle_helpers import T0, approved_pool
from tests.pools.pool_helpers import edit_spec

pytestmark = pytest.mark.django_db(transaction=True)
TICK = timedelta(seconds=15)
TRAIN_POD = EXAMPLES / "pods" / "train-pod.yaml"
PRIORITY_CLASSES = EXAMPLES / "priorityclasses.yaml"


def queued_pod(name: str, *, gpus: int = 8, duration: str = "") -> dict:
    """A pod of the training queue: it needs the pool's label and tolerates its taint."""
    annotations = {"ebcloud.io/duration": duration} if duration else {}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "algorithm", "labels": {"project": "nlp", "app": name}, "annotations": annotations},
        "spec": {
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["train"]}]}]}}},
            "tolerations": [{"key": "pool", "operator": "Equal", "value": "train", "effect": "NoSchedule"}],
            "containers": [{"name": "main", "image": "registry.invalid/train:1",
                            "resources": {"requests": {"cpu": "8", "memory": "64Gi"}, "limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
    }  # fmt: skip


@dataclass
class Simulated:
    """The embedded cluster: our scheduler pass binds, evictions are refused by an injected
    disruption budget."""

    member: object
    name: str = "simulated"

    def apply_file(self, path) -> None:
        for document in _documents(path):
            if document["kind"] == "Pod":
                pod_services.pod_create(user=self.member, document=document, now=T0)

    def apply(self, document: dict, now) -> None:
        pod_services.pod_create(user=self.member, document=document, now=now)

    def tick(self, now) -> None:
        reconcile_all(now=now)
        scheduler_pass(now=now)

    def protect(self, pod: str) -> None:
        failure_inject(step=EVICT, times=None, token_prefix=f"algorithm/{pod}")

    def unprotect(self, pod: str) -> None:
        SimFailure.objects.filter(step=EVICT).delete()

    def node_exists(self, name: str) -> bool:
        from pools.models import SimClusterNode

        return SimClusterNode.objects.filter(name=name).exists()


@dataclass
class Kubernetes:
    """A real API server: kubectl and the client apply the pods, kube-scheduler binds them, the
    fake kubelets run them, the mirror reads them back, a PodDisruptionBudget refuses evictions."""

    plane: ControlPlane
    api: client.ApiClient
    name: str = "kubernetes"
    kubelets: object = None
    mirror: object = None
    seen_binds: dict = field(default_factory=dict)

    def __post_init__(self):
        from pools.controllers.pod_mirror import PodMirror
        from pools.providers.fake_kubelet import FakeKubelet
        from pools.providers.kubernetes_pods import ClusterPods

        self.core = client.CoreV1Api(self.api)
        self.kubelets = FakeKubelet(self.api)
        self.clock = [T0]
        self.mirror = PodMirror(ClusterPods(self.api), clock=lambda: self.clock[0])
        try:
            self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="algorithm", labels={"ebcloud.io/team": "algorithm"})))
            self.core.create_namespaced_service_account("algorithm", client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="default")))
        except ApiException as exc:
            if exc.status != 409:
                raise

    def apply_file(self, path) -> None:
        result = self.plane.kubectl("apply", "-f", str(path))
        assert result.returncode == 0, result.stderr

    def apply(self, document: dict, now) -> None:
        self.core.create_namespaced_pod("algorithm", document)

    def tick(self, now) -> None:
        self.clock[0] = now
        reconcile_all(now=now)
        for node in Node.objects.filter(phase__in=("Ready", "Cordoned", "Draining")).values_list("name", flat=True):
            self.kubelets.sync_pods(node_name=node, now=now)
        self._settle()
        self.mirror.relist()
        scheduler_pass(now=now)  # on a real cluster: our hints beside kube-scheduler's verdict

    def _settle(self) -> None:
        """Give kube-scheduler a moment to act on what changed (it binds asynchronously)."""
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            pods = self.core.list_namespaced_pod("algorithm").items
            pending = [p for p in pods if p.status.phase == "Pending" and not p.spec.node_name]
            if all(any(c.type == "PodScheduled" and c.status == "False" for c in p.status.conditions or ()) for p in pending):
                return
            time.sleep(0.2)

    def protect(self, pod: str) -> None:
        budget = client.V1PodDisruptionBudget(
            metadata=client.V1ObjectMeta(name=f"keep-{pod}", namespace="algorithm"),
            spec=client.V1PodDisruptionBudgetSpec(min_available=1, selector=client.V1LabelSelector(match_labels={"app": pod})),
        )
        client.PolicyV1Api(self.api).create_namespaced_pod_disruption_budget("algorithm", budget)

    def unprotect(self, pod: str) -> None:
        client.PolicyV1Api(self.api).delete_namespaced_pod_disruption_budget(f"keep-{pod}", "algorithm")

    def node_exists(self, name: str) -> bool:
        try:
            self.core.read_node(name)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True


def _documents(path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@pytest.fixture(scope="module")
def journey_plane():
    """A control plane of its own: no other test's pods or nodes meet this journey's."""
    yield from plane_running()


@pytest.fixture(params=["simulated", "kubernetes"])
def cluster(request, actors):
    if request.param == "simulated":
        return Simulated(member=actors["member"])
    return request.getfixturevalue("kubernetes_cluster")


@pytest.fixture
def kubernetes_cluster(settings, journey_plane):
    from kubernetes import config

    settings.EBCLOUD_CLUSTER_BACKEND = "kubernetes"
    settings.EBCLOUD_KUBECONFIG = str(journey_plane.kubeconfig)
    return Kubernetes(plane=journey_plane, api=config.new_client_from_config(config_file=str(journey_plane.kubeconfig)))


def run(cluster, start, until, *, limit=timedelta(minutes=30), what="condition"):
    now = start
    while now <= start + limit:
        cluster.tick(now)
        if until():
            return now
        now += TICK
    raise AssertionError(f"{cluster.name}: {what} not reached by {now}")


def test_the_articles_journey_on_both_clusters(cluster, actors, train_document):
    train_document["spec"]["scaling"] = SCALING
    train_document["spec"]["burst"] = {"enabled": True, "maxNodes": 1}
    pool = approved_pool(actors, train_document)
    now = run(cluster, T0, lambda: GpuNodePool.objects.get(pk=pool.pk).phase == "Ready", what="the pool Ready")
    monthly = list(Node.objects.filter(pool=pool, phase="Ready").order_by("name"))
    assert len(monthly) == 2 and all(n.labels["gpu-class"] == "a100" and n.taints == [{"key": "pool", "value": "train", "effect": "NoSchedule"}] for n in monthly)

    # The article's pod needs `pool In [train]`: the pool's nodes lack that label.
    cluster.apply_file(PRIORITY_CLASSES) if cluster.name == "kubernetes" else None
    cluster.apply_file(TRAIN_POD)
    now = run(cluster, now, lambda: Pod.objects.live().filter(name="bert-train-0", reason="Unschedulable").exclude(hints=[]).exists(), what="the verdict and hint")
    pod = Pod.objects.live().get(name="bert-train-0")
    assert pod.phase == "Pending" and "node affinity/selector" in pod.explanation, pod.explanation
    assert any("nodeLabels: {pool: train}" in hint and pool.name in hint for hint in pod.hints), pod.hints

    # The fix: add the label to the pool; the existing nodes get it and the pod is bound there.
    edit_spec(actors, pool, now, nodeLabels={"gpu-class": "a100", "pool": "train"})
    now = run(cluster, now + TICK, lambda: Pod.objects.live().filter(name="bert-train-0", phase="Running").exists(), limit=timedelta(minutes=2), what="the pod bound")
    bound = Pod.objects.live().get(name="bert-train-0")
    assert bound.node in monthly
    assert PoolEvent.objects.filter(node=bound.node, reason="Scheduled", message__startswith=f"Successfully assigned algorithm/bert-train-0 to {bound.node.name}").count() == 1
    assert Node.objects.filter(pool=pool, ready_at__isnull=False).count() == 2  # no node was bought for it

    # A queue: one more 8-GPU pod fits the second node, the next waits and bursts the pool.
    cluster.apply(queued_pod("job-a", duration="20m"), now)
    cluster.apply(queued_pod("job-b", duration="20m"), now)
    memory_used(pool, 99)
    burst = None

    def burst_used():
        nonlocal burst
        autoscale_all(now=now)
        burst = Node.objects.filter(pool=pool, billing="on_demand", phase="Ready").first()
        return burst is not None and Pod.objects.live().filter(node=burst, phase="Running").exists()

    now = run(cluster, now, burst_used, what="a burst node taking a pod")
    on_burst = Pod.objects.live().get(node=burst, phase="Running")
    assert PoolEvent.objects.filter(pool=pool, reason="ScaledUp").exists()

    # A disruption budget keeps that pod: shrinking the pool drains the burst node, which waits.
    cluster.protect(on_burst.name)
    edit_spec(actors, pool, now, burst={"enabled": False}, nodeCount={"min": 2, "max": 2})
    now = run(cluster, now + TICK, lambda: PoolEvent.objects.filter(pool=pool, reason="DrainWaiting", node=burst).exists(), limit=timedelta(minutes=5), what="the drain waiting")
    assert Node.objects.get(pk=burst.pk).phase == "Draining" and cluster.node_exists(burst.name)
    cluster.unprotect(on_burst.name)
    now = run(cluster, now + TICK, lambda: Node.objects.get(pk=burst.pk).phase == "Terminated", limit=timedelta(minutes=5), what="the drained node released")
    assert not cluster.node_exists(burst.name)

    # The hour is metered from the pods the control plane saw.
    meter_hour(hour=T0.replace(minute=0))
    pods = UsageRecord.objects.filter(kind=UsageRecord.Kind.POD, namespace="algorithm")
    assert pods.filter(pod_name="bert-train-0").exists() or pods.filter(label_set__labels__project="nlp").exists()
    assert sum((r.quantity for r in pods), Decimal(0)) > 0
    connection.close()


def test_the_autoscalers_scale_down_drains_through_the_eviction_api(kubernetes_cluster, actors, train_document):
    """On a real cluster a burst node's pods are not moved in the database before it goes: the
    drain evicts them (kube-scheduler places what their owners recreate)."""
    cluster = kubernetes_cluster
    scaling = copy.deepcopy(SCALING)
    scaling["scaleDown"]["stabilizationWindow"] = "1m"
    train_document["metadata"]["name"] = "scale-down"
    train_document["spec"].update(
        scaling=scaling, burst={"enabled": True, "maxNodes": 1}, nodeCount={"min": 1, "max": 2},
        nodeLabels={"gpu-class": "a100", "pool": "train"},
    )  # fmt: skip
    pool = approved_pool(actors, train_document)
    now = run(cluster, T0, lambda: GpuNodePool.objects.get(pk=pool.pk).phase == "Ready", what="the pool Ready")
    monthly = Node.objects.get(pool=pool, phase="Ready")
    for name in ("first", "second"):  # a Job's pods: a pod no controller owns would keep its node
        document = queued_pod(name)
        document["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "queue", "uid": "0d6f3a52-7c1e-4f7a-9a51-6f2d1c3b8e01", "controller": True}]
        cluster.apply(document, now)
    memory_used(pool, 99)

    def burst_runs_a_pod():
        autoscale_all(now=now)
        return Pod.objects.live().filter(node__billing="on_demand", node__pool=pool, phase="Running").exists()

    now = run(cluster, now, burst_runs_a_pod, what="a burst node running a pod")
    burst = Node.objects.get(pool=pool, billing="on_demand")
    on_monthly = Pod.objects.live().get(node=monthly, phase="Running")
    cluster.core.delete_namespaced_pod(on_monthly.name, "algorithm")  # the monthly node is free again
    memory_used(pool, 5)

    def scaled_down():
        autoscale_all(now=now)
        return Node.objects.get(pk=burst.pk).phase == "Terminated"

    now = run(cluster, now + TICK, scaled_down, what="the burst node scaled down")
    assert PoolEvent.objects.filter(pool=pool, reason="ScaledDown").exists()
    drained = PoolEvent.objects.get(node=burst, reason="NodeDraining").message
    assert drained.startswith(f"Evicted 1 pod(s) from {burst.name}") and "algorithm/" in drained
    assert not PoolEvent.objects.filter(pool=pool, reason="Repacked").exists()  # nothing moved behind the cluster's back
    assert not cluster.node_exists(burst.name)
    connection.close()

