"""The simulated cluster preempts as the real kube-scheduler v1.37 does (pools/core/scheduling/preempt.py):
under PodDisruptionBudgets, it evicts the pods kube-scheduler evicts, on the node it nominates
(preemption deletes pods: a pod that two budgets select counts against each, and the Eviction
API's "more than one budget" refusal plays no part); and where preemption finds nothing, the
simulated pass's verdict (`explain`) is kube-scheduler's, node by node: "No preemption victims
found" only on a node without a lower-priority pod, the filter's own reasons where evicting all
of them still leaves the pod short. Between nodes equal on every other criterion both pick the
one whose victims started latest (status.startTime, read by the product as its pod mirror
reads it).

Nodes joined by fake kubelets, their pods bound by name (the kubelet runs them); the budgets'
status is written as kube-controller-manager's disruption controller would (it does not run
here). The other nodes of the shared control plane keep the pods off by taint and selector."""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from kubernetes import client

from pools.core.scheduling.explain import explain
from pools.core.scheduling.nodes import NodeSelectorRequirement, NodeState, Pod, best_fit_gpus
from pools.core.scheduling.preempt import preempt
from pools.models.pods import Pod as PodRow
from pools.providers.fake_kubelet import FakeKubelet
from pools.providers.kubernetes import KubernetesCluster
from pools.providers.kubernetes_pods import ClusterPods, pod_fields
from pools.selectors.cluster import core_pod_of
from tests.k8s.helpers import SCHEDULER_WAIT, pod_create_admitted, pod_gone, verdict, wait_for

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
CPU, MEMORY, GPUS = 64_000, 262_144, 8


@pytest.fixture
def place(kube, core, namespace, unique):
    """`nodes(*layout)` makes Ready 8-GPU nodes that only this test's pods tolerate and select
    (named `key`-0, -1, ...), each with its pods ({name: (gpus, priority, labels)}) bound and
    running; `pending(name, gpus, priority)` submits a pod for kube-scheduler to place. The
    PriorityClasses are made as needed. Everything is deleted after."""
    scheduling, kubelet, made = client.SchedulingV1Api(kube), FakeKubelet(kube), {"nodes": [], "classes": set()}
    key = f"preempt-{unique}"

    def priority_class(value: int) -> str:
        name = f"{key}-{value}"
        if name not in made["classes"]:
            scheduling.create_priority_class(client.V1PriorityClass(metadata=client.V1ObjectMeta(name=name), value=value))
            made["classes"].add(name)
        return name

    def body(name: str, gpus: int, priority: int, labels=None, node: str | None = None, pinned: str | None = None) -> dict:
        spec = {
            "containers": [{"name": "main", "image": "registry.invalid/train:1",
                            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": str(gpus)}}}],
            "automountServiceAccountToken": False, "priorityClassName": priority_class(priority), "nodeSelector": {key: "yes"},
            "tolerations": [{"key": key, "operator": "Exists", "effect": "NoSchedule"}],
        }  # fmt: skip
        if node:
            spec["nodeName"] = node
        if pinned:  # required affinity naming the node, as a DaemonSet's pods are pinned
            term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [pinned]}]}
            spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels or {}}, "spec": spec}

    def nodes(*layout: dict[str, tuple], started: tuple[datetime, ...] = ()) -> None:
        """`started`: when each node's kubelet starts its pods (their status.startTime; NOW)."""
        for index, pods in enumerate(layout):
            name = f"{key}-{index}"
            core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name, labels={key: "yes"}),
                                           spec=client.V1NodeSpec(taints=[client.V1Taint(key=key, value="yes", effect="NoSchedule")])))  # fmt: skip
            made["nodes"].append(name)
            kubelet.join(name=name, cpu_milli=CPU, memory_mib=MEMORY, gpus=GPUS, labels={key: "yes"}, now=NOW)
            for pod, (gpus, priority, labels) in pods.items():
                pod_create_admitted(core, namespace, body(pod, gpus, priority, labels, node=name))
            kubelet.sync_pods(node_name=name, now=started[index] if index < len(started) else NOW)

    def pending(name: str, gpus: int, priority: int, pinned: str | None = None) -> None:
        pod_create_admitted(core, namespace, body(name, gpus, priority, pinned=pinned))

    yield SimpleNamespace(key=key, nodes=nodes, pending=pending)
    for item in core.list_namespaced_pod(namespace).items:
        core.delete_namespaced_pod(item.metadata.name, namespace, grace_period_seconds=0)
    for name in made["nodes"]:
        core.delete_node(name)
    for name in made["classes"]:
        scheduling.delete_priority_class(name)


def states(namespace: str, key: str, *layout: dict[str, tuple]) -> list[NodeState]:
    """The nodes and their pods as the product's core sees them."""
    found = []
    for index, pods in enumerate(layout):
        node = NodeState(f"{key}-{index}", CPU, MEMORY, GPUS, "", labels={key: "yes"})
        free = iter(range(GPUS))
        for pod, (gpus, priority, labels) in pods.items():
            node.bind(Pod(f"{namespace}/{pod}", cpu_milli=1000, memory_mib=1024, gpu_count=gpus, priority=priority, labels=labels or {}),
                      tuple(next(free) for _ in range(gpus)))  # fmt: skip
        found.append(node)
    return found


def incoming(namespace: str, key: str, name: str, gpus: int, priority: int) -> Pod:
    return Pod(f"{namespace}/{name}", cpu_milli=1000, memory_mib=1024, gpu_count=gpus, priority=priority, node_selector={key: "yes"})


def budget(kube, namespace: str, name: str, labels: dict, allowed: int) -> None:
    policy = client.PolicyV1Api(kube)
    policy.create_namespaced_pod_disruption_budget(namespace, {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
        "spec": {"maxUnavailable": allowed, "selector": {"matchLabels": labels}}})  # fmt: skip
    policy.patch_namespaced_pod_disruption_budget_status(name, namespace, {"status": {  # as kube-controller-manager would
        "observedGeneration": 1, "disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1 - allowed, "expectedPods": 1}})  # fmt: skip


def test_the_pod_that_two_budgets_select_goes_not_the_one_its_budget_guards(kube, core, namespace, place):
    layout = ({"a-guarded": (8, 0, {"app": "g"})}, {"b-double": (8, 0, {"x": "1", "y": "1"})})
    place.nodes(*layout)
    budget(kube, namespace, "g", {"app": "g"}, 0)
    budget(kube, namespace, "x", {"x": "1"}, 1)
    budget(kube, namespace, "y", {"y": "1"}, 1)
    time.sleep(2)  # kube-scheduler's informers see the budgets' status
    place.pending("vip", 8, 100)
    nominated = wait_for(lambda: core.read_namespaced_pod("vip", namespace).status.nominated_node_name, what="kube-scheduler's preemption")
    assert nominated == f"{place.key}-1"
    wait_for(lambda: pod_gone(core, namespace, "b-double"), what="the victim's deletion")
    assert not pod_gone(core, namespace, "a-guarded")
    pods = {f"{namespace}/{name}": labels for node in layout for name, (_, _, labels) in node.items()}
    budgets = KubernetesCluster(kube).disruption_budgets(pods=pods)  # the cluster's own budgets, read by the product
    plan = preempt(incoming(namespace, place.key, "vip", 8, 100), states(namespace, place.key, *layout), budgets)
    assert (plan.node, plan.victim_names) == (nominated, (f"{namespace}/b-double",))


def test_where_preemption_finds_nothing_the_verdict_is_kube_schedulers_node_by_node(kube, core, namespace, place):
    """Node -0: evicting `low` still leaves 2 GPUs of the 4 asked (the filter's reason); node -1:
    no pod of lower priority (no victims). Every other node of the cluster is not helpful."""
    layout = ({"high": (6, 100, None), "low": (2, 0, None)}, {"peer": (8, 50, None)})
    place.nodes(*layout)
    place.pending("mid", 4, 50)

    def refused():
        found = verdict(core, namespace, "mid")
        return found if found and found[0] == "pending" and "preemption:" in found[1] and "0 Insufficient" not in found[1] else None

    deadline, theirs = time.monotonic() + 30, None
    while time.monotonic() < deadline:  # its first tries may come before the kubelet's status reached its cache
        theirs = refused() or theirs
        if theirs and "1 No preemption victims" in theirs[1]:
            break
        time.sleep(0.2)
    assert theirs is not None, "kube-scheduler gave no verdict"
    total = len(core.list_node().items)
    others = [NodeState(f"other-{i}", CPU, MEMORY, GPUS, "") for i in range(total - len(layout))]  # the selector keeps the pod off
    ours = explain(incoming(namespace, place.key, "mid", 4, 50), states(namespace, place.key, *layout) + others).message
    assert ours.split(" preemption: ")[1] == theirs[1].split(" preemption: ")[1], (ours, theirs[1])
    assert f"preemption: 0/{total} nodes are available: 1 Insufficient nvidia.com/gpu, 1 No preemption victims found for incoming pod" in theirs[1]


def test_a_pod_pinned_to_its_node_by_name_gets_kube_scheduler_s_verdict_word_for_word(kube, core, namespace, place):
    """Required affinity naming the node (`matchFields metadata.name In`): kube-scheduler's
    NodeAffinity PreFilter runs the filters on that node only, and counts every other node,
    the cordoned -1 included, as not satisfying NodeAffinity (`explain.named_nodes`)."""
    layout = ({"peer": (6, 50, None)}, {})
    place.nodes(*layout)
    core.patch_node(f"{place.key}-1", {"spec": {"unschedulable": True}})
    place.pending("pinned", 4, 50, pinned=f"{place.key}-0")
    theirs = wait_for(lambda: (found := verdict(core, namespace, "pinned")) and "1 No preemption victims" in found[1] and found,
                      timeout=SCHEDULER_WAIT, what="kube-scheduler's verdict with its preemption's")  # fmt: skip
    total = len(core.list_node().items)
    nodes = states(namespace, place.key, *layout) + [NodeState(f"other-{i}", CPU, MEMORY, GPUS, "") for i in range(total - len(layout))]
    nodes[1].unschedulable = True
    pinned = dataclasses.replace(incoming(namespace, place.key, "pinned", 4, 50),
                                 affinity_terms=((NodeSelectorRequirement("metadata.name", "In", (f"{place.key}-0",), field=True),),))  # fmt: skip
    assert explain(pinned, nodes).message == theirs[1]
    assert theirs[1].startswith(f"0/{total} nodes are available: 1 Insufficient nvidia.com/gpu, {total - 1} node(s) didn't satisfy plugin(s) [NodeAffinity].")


def mirrored_states(kube, namespace: str, key: str, count: int) -> list[NodeState]:
    """The nodes with their Running pods as the product reads them from the API server: each
    pod's fields as the pod mirror writes them (`pod_fields`, status.startTime included), then
    the core's pod as every reader of the read model builds it (`core_pod_of`)."""
    found = {f"{key}-{index}": NodeState(f"{key}-{index}", CPU, MEMORY, GPUS, "", labels={key: "yes"}) for index in range(count)}
    for document in ClusterPods(kube).list()[0]:
        fields = pod_fields(document, now=NOW)
        node = found.get(fields.pop("node_name"))
        if document["metadata"]["namespace"] == namespace and node is not None and fields["phase"] == "Running":
            pod = core_pod_of(PodRow(**fields))
            node.bind(pod, best_fit_gpus(pod, node.gpu_free))
    return list(found.values())


def test_of_nodes_equal_on_every_other_criterion_both_preempt_where_the_victims_started_latest(kube, core, namespace, place):
    """One 8-GPU pod of priority 0 on each node; -1's kubelet started its pod an hour later.
    kube-scheduler nominates -1 (the latest start of the highest-priority victims), where the
    first node by name would be -0; the product, reading the same pods, agrees."""
    layout = ({"a-early": (8, 0, None)}, {"b-late": (8, 0, None)})
    place.nodes(*layout, started=(NOW, NOW + timedelta(hours=1)))
    nodes = mirrored_states(kube, namespace, place.key, len(layout))
    assert [[b.pod.started_at for b in node.bound.values()] for node in nodes] == [[NOW], [NOW + timedelta(hours=1)]]
    time.sleep(2)  # kube-scheduler's informers see the pods' status
    place.pending("vip", 8, 100)
    nominated = wait_for(lambda: core.read_namespaced_pod("vip", namespace).status.nominated_node_name, what="kube-scheduler's preemption")
    assert nominated == f"{place.key}-1"
    wait_for(lambda: pod_gone(core, namespace, "b-late"), what="the victim's deletion")
    assert not pod_gone(core, namespace, "a-early")
    plan = preempt(incoming(namespace, place.key, "vip", 8, 100), nodes)
    assert (plan.node, plan.victim_names) == (nominated, (f"{namespace}/b-late",))
