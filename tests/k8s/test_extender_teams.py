"""The team rule holds against the real kube-scheduler (deploy/kube-scheduler-config.yaml, its
extender served by the live server): a pool's nodes take only its team's pods, CPU-only ones
included, and kube-scheduler's preemption never evicts a team's pod for another team's pod.

Each test joins one 8-GPU node of team algorithm's pool, labelled and tainted pool=train as the
controller applies them, and deletes it after: a node the product no longer knows would
otherwise be a plain node to the next test. Teams come from the namespaces: `algorithm` and
`inference` are named like their teams (the latter also labelled `ebcloud.io/team`), and
kube-system belongs to no team.
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from pools.core.scheduling.nodes import REASON_TEAM
from pools.providers.fake_kubelet import FakeKubelet
from pools.providers.kubernetes import KubernetesCluster
from pools.providers.kubernetes_pods import TEAM_LABEL
from tests.k8s import test_extender
from tests.k8s.helpers import pod_create_admitted, pod_gone, verdict, wait_for
from tests.pools.pod_helpers import T0, pool_with_nodes

pytestmark = pytest.mark.django_db(transaction=True)
# The extender's tests' fixtures: a control plane whose kube-scheduler runs the deployed
# configuration, the product on its API server, and the verbs the extender was asked for.
plane, cluster, calls = test_extender.plane, test_extender.cluster, test_extender.calls
NAMESPACE = test_extender.NAMESPACE  # team algorithm's
OTHER = "inference"
SYSTEM = "kube-system"
TRAIN = {"key": "pool", "operator": "Equal", "value": "train", "effect": "NoSchedule"}


def manifest(name: str, *, gpus: int = 0, priority_class: str | None = None, node: str | None = None) -> dict:
    """A pod tolerating the pool's taint; `node` pins it by name as a DaemonSet's pods are pinned."""
    limits = {"cpu": "4", "memory": "8Gi", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    spec = {"containers": [{"name": "main", "image": "registry.invalid/x:1", "resources": {"limits": limits}}],
            "tolerations": [TRAIN], "automountServiceAccountToken": False}  # fmt: skip
    if priority_class:
        spec["priorityClassName"] = priority_class
    if node:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}  # fmt: skip
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def ignoring_conflicts(create, *args) -> None:
    try:
        create(*args)
    except ApiException as exc:
        if exc.status != 409:
            raise


@pytest.fixture
def core_api(cluster) -> client.CoreV1Api:
    """The API server's core group, with the namespaces of team inference and kube-system."""
    core = client.CoreV1Api(cluster)
    for namespace, labels in ((OTHER, {TEAM_LABEL: OTHER}), (SYSTEM, None)):
        ignoring_conflicts(core.create_namespace, client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace, labels=labels)))
        ignoring_conflicts(core.create_namespaced_service_account, namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="default")))
    return core


@pytest.fixture
def train_node(cluster, core_api, actors):
    core = core_api
    """Team algorithm's pool of one Ready 8-GPU node, joined to the API server (deleted after)."""
    pool = pool_with_nodes(actors["lead"], name="teams-train", nodes=1, node_labels={"pool": "train"})
    node = pool.nodes.get()
    FakeKubelet(cluster).join(name=node.name, cpu_milli=96_000, memory_mib=393_216, gpus=8, labels=node.labels, now=T0)
    backend = KubernetesCluster(cluster)
    backend.node_apply(name=node.name, labels=node.labels, taints=node.taints)
    backend.register_node(name=node.name, now=T0)
    yield node.name
    for namespace in (OTHER, SYSTEM, NAMESPACE):
        for item in core.list_namespaced_pod(namespace, field_selector=f"spec.nodeName={node.name}").items:
            core.delete_namespaced_pod(item.metadata.name, namespace, grace_period_seconds=0)
    for item in core.list_namespaced_pod(OTHER).items:
        core.delete_namespaced_pod(item.metadata.name, OTHER, grace_period_seconds=0)
    core.delete_node(node.name)


def test_another_teams_cpu_only_pod_stays_pending_while_the_owners_and_kube_systems_pods_schedule(core_api, train_node, calls):
    core = core_api
    core.create_namespaced_pod(OTHER, manifest("cpu-intruder"))
    core.create_namespaced_pod(OTHER, manifest("gpu-intruder", gpus=1))
    core.create_namespaced_pod(NAMESPACE, manifest("owners-cpu-job"))
    core.create_namespaced_pod(SYSTEM, manifest("node-agent", node=train_node))  # a DaemonSet's pod, of no team
    assert wait_for(lambda: verdict(core, NAMESPACE, "owners-cpu-job"), what="the owner's CPU-only pod scheduled") == ("bound", train_node)
    assert wait_for(lambda: verdict(core, SYSTEM, "node-agent"), what="kube-system's pod scheduled") == ("bound", train_node)
    for name in ("cpu-intruder", "gpu-intruder"):
        kind, message = wait_for(lambda name=name: verdict(core, OTHER, name), what=f"kube-scheduler's verdict on {name}")
        assert kind == "pending" and f"1 {REASON_TEAM}" in message, (name, message)
    assert calls.count("filter") >= 4, calls  # every pod asked the extender, CPU-only ones too
    core.delete_namespaced_pod("node-agent", SYSTEM, grace_period_seconds=0)


def test_kube_scheduler_never_preempts_a_teams_pod_for_another_teams_pod(cluster, core_api, train_node, calls):
    """The owner's 8-GPU pod fills its pool's node. A pod of team inference with a far higher
    priority, tolerating the pool's taint, would have had it evicted (kube-scheduler's own
    filters fail the node on GPUs, so the extender's filter never saw it); the extender's
    preempt drops the node, the owner's pod runs on and the intruder stays Pending. A pod of
    the owner team with that priority still preempts it."""
    core = core_api
    scheduling = client.SchedulingV1Api(cluster)
    for name, value in (("teams-low", 10), ("teams-high", 100_000)):
        ignoring_conflicts(scheduling.create_priority_class, client.V1PriorityClass(metadata=client.V1ObjectMeta(name=name), value=value))
    owner = manifest("owners-job", gpus=8, priority_class="teams-low")
    owner["spec"]["nodeName"] = train_node
    pod_create_admitted(core, NAMESPACE, owner)
    kubelet = FakeKubelet(cluster)
    kubelet.sync_pods(node_name=train_node, now=T0)

    pod_create_admitted(core, OTHER, manifest("vip-intruder", gpus=1, priority_class="teams-high"))
    wait_for(lambda: "preempt" in calls, what="kube-scheduler asking the extender's preempt")
    kind, message = wait_for(lambda: verdict(core, OTHER, "vip-intruder"), what="kube-scheduler's verdict on the intruder")
    time.sleep(3)  # preemption's evictions are asynchronous: give a wrong one time to show
    assert kind == "pending" and "Insufficient nvidia.com/gpu" in message and "no candidate node for preemption" in message, message
    assert not pod_gone(core, NAMESPACE, "owners-job"), "the owner's pod was evicted for another team's pod"
    assert verdict(core, OTHER, "vip-intruder")[0] == "pending"

    pod_create_admitted(core, NAMESPACE, manifest("owners-vip", gpus=1, priority_class="teams-high"))
    wait_for(lambda: pod_gone(core, NAMESPACE, "owners-job"), what="the owner team's own pod preempting its lower-priority one")
