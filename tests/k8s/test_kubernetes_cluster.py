"""The Kubernetes ClusterBackend against a real kube-apiserver (+ kube-scheduler): nodes join
through their (fake) kubelet, labels and taints by server-side apply, cordon, eviction with
PodDisruptionBudgets, the pods a drain moves, node removal."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from pools.core.disruption import DisruptionBudget
from pools.providers.base import DRAIN_CORDON_ANNOTATION
from pools.providers.fake_kubelet import FakeKubelet
from pools.providers.kubernetes import KubernetesCluster, NodeNotRegistered
from tests.k8s.helpers import pod, pod_create_admitted, wait_for

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
TRAIN_TAINT = {"key": "pool", "value": "train", "effect": "NoSchedule"}


def state_of(cluster, node):
    """The Node's labels, taints (as dicts) and unschedulable, from the pass's one read."""
    state = cluster.nodes_state(names=[node])[node]
    taints = [{"key": k, "value": v, "effect": e} for k, v, e in state.taints]
    return dict(state.labels), taints, state.unschedulable


@pytest.fixture
def cluster(kube) -> KubernetesCluster:
    return KubernetesCluster(kube)


@pytest.fixture
def kubelet(kube) -> FakeKubelet:
    return FakeKubelet(kube)


@pytest.fixture
def node(kubelet, unique, core):
    name = f"gpu-{unique}"
    kubelet.join(name=name, cpu_milli=96_000, memory_mib=1_048_576, gpus=8, now=NOW)
    yield name
    try:
        core.delete_node(name)
    except ApiException:
        pass


def test_a_node_counts_as_registered_only_once_its_kubelet_has_joined(cluster, kubelet, unique, core):
    name = f"late-{unique}"
    with pytest.raises(NodeNotRegistered, match="has not registered"):
        cluster.register_node(name=name, now=NOW)
    kubelet.join(name=name, cpu_milli=64_000, memory_mib=524_288, gpus=4, now=NOW)
    cluster.register_node(name=name, now=NOW, gpus=4)
    assert core.read_node(name).status.allocatable["nvidia.com/gpu"] == "4"
    cluster.remove_node(name=name)
    cluster.remove_node(name=name)  # already gone: nothing to do
    with pytest.raises(ApiException) as gone:
        core.read_node(name)
    assert gone.value.status == 404


def test_a_gpu_node_joins_only_once_its_device_plugin_offers_gpus(cluster, kubelet, unique, core):
    """A real kubelet is Ready tens of seconds before the NVIDIA device plugin registers its
    GPUs: a node taken as joined then was reported as taking no pods, and, no longer counted
    as upcoming, could make the autoscaler buy another (found by review)."""
    name = f"plugin-{unique}"
    kubelet.join(name=name, cpu_milli=64_000, memory_mib=524_288, gpus=4, now=NOW)
    core.patch_node_status(name, {"status": {"allocatable": {"nvidia.com/gpu": "0"}, "capacity": {"nvidia.com/gpu": "0"}}})
    with pytest.raises(NodeNotRegistered, match="offers no GPU yet"):
        cluster.register_node(name=name, now=NOW, gpus=4)
    cluster.register_node(name=name, now=NOW)  # a node without GPUs needs none
    core.patch_node_status(name, {"status": {"allocatable": {"nvidia.com/gpu": "4"}, "capacity": {"nvidia.com/gpu": "4"}}})
    cluster.register_node(name=name, now=NOW, gpus=4)
    cluster.remove_node(name=name)


def test_labels_and_taints_are_ours_by_server_side_apply_and_what_others_set_survives(cluster, control_plane, node):
    assert control_plane.kubectl("label", "node", node, "ops.example.com/rack=r12").returncode == 0
    assert control_plane.kubectl("taint", "node", node, "maintenance=planned:PreferNoSchedule").returncode == 0
    cluster.node_apply(name=node, labels={"pool": "train", "ebcloud.io/pool": "train-pool-a"}, taints=[TRAIN_TAINT])
    labels, taints, _ = state_of(cluster, node)
    assert labels["pool"] == "train" and labels["ebcloud.io/pool"] == "train-pool-a" and labels["ops.example.com/rack"] == "r12"
    assert sorted((t["key"], t["effect"]) for t in taints) == [("maintenance", "PreferNoSchedule"), ("pool", "NoSchedule")]

    # The pool's spec changed: the next apply states the whole wanted set (level-triggered).
    cluster.node_apply(name=node, labels={"pool": "train-v2", "ebcloud.io/pool": "train-pool-a", "gpu-class": "a100"}, taints=[])
    labels, taints, _ = state_of(cluster, node)
    assert (labels["pool"], labels["gpu-class"], labels["ops.example.com/rack"]) == ("train-v2", "a100", "r12")
    assert [(t["key"], t["value"], t["effect"]) for t in taints] == [("maintenance", "planned", "PreferNoSchedule")]

    cluster.node_apply(name=node, labels={"ebcloud.io/pool": "train-pool-a"}, taints=[TRAIN_TAINT])
    labels, taints, _ = state_of(cluster, node)
    assert "pool" not in labels and "gpu-class" not in labels and labels["ops.example.com/rack"] == "r12"
    assert len(taints) == 2


def test_an_apply_from_a_stale_list_is_refused_and_done_again_from_a_fresh_read(cluster, core, node):
    cluster.nodes_state(names=[node])  # the pass's list: the apply starts from this resourceVersion
    core.patch_node(node, {"spec": {"taints": [{"key": "maintenance", "value": "soon", "effect": "PreferNoSchedule"}]}})  # someone else, meanwhile
    cluster.node_apply(name=node, labels={"pool": "train"}, taints=[TRAIN_TAINT])
    taints = {(t.key, t.value, t.effect) for t in core.read_node(node).spec.taints}
    assert taints == {("maintenance", "soon", "PreferNoSchedule"), ("pool", "train", "NoSchedule")}  # 409, read again: theirs kept
    assert core.read_node(node).metadata.labels["pool"] == "train"


def test_cordon_marks_the_node_unschedulable_and_keeps_our_labels(cluster, node):
    cluster.node_apply(name=node, labels={"pool": "train"}, taints=[TRAIN_TAINT])
    cluster.cordon(name=node)
    labels, taints, unschedulable = state_of(cluster, node)
    assert unschedulable and labels["pool"] == "train" and taints[0]["key"] == "pool"
    cluster.uncordon(name=node)  # a repair that cordoned the node is over (issue 21)
    labels, taints, unschedulable = state_of(cluster, node)
    assert not unschedulable and labels["pool"] == "train" and taints[0]["key"] == "pool"


def drain_mark(core, node: str) -> str | None:
    return (core.read_node(node).metadata.annotations or {}).get(DRAIN_CORDON_ANNOTATION)


def test_a_drains_cordon_is_marked_and_lifting_it_lifts_no_one_elses(cluster, node, core):
    """A drain's cordon (`mark=True`) records itself on the Node, and lifting it by the mark lifts
    only that: an administrator's `kubectl cordon` carries no mark and stays, and a repair's
    cordon (unmarked) over a drain's takes it over."""
    assert cluster.cordon(name=node, mark=True) is True
    assert core.read_node(node).spec.unschedulable and drain_mark(core, node) == "true"
    assert cluster.uncordon(name=node, mark=True) is True
    assert not core.read_node(node).spec.unschedulable and drain_mark(core, node) is None
    core.patch_node(node, {"spec": {"unschedulable": True}})  # kubectl cordon
    assert cluster.cordon(name=node, mark=True) is True  # cordoned already: kept as it is, unmarked
    assert drain_mark(core, node) is None
    assert cluster.uncordon(name=node, mark=True) is False
    assert core.read_node(node).spec.unschedulable
    cluster.uncordon(name=node)
    cluster.cordon(name=node, mark=True)
    cluster.cordon(name=node)  # a repair's
    assert drain_mark(core, node) is None and cluster.uncordon(name=node, mark=True) is False
    assert cluster.cordon(name="never-joined", mark=True) is False  # nothing to cordon
    assert cluster.uncordon(name="never-joined", mark=True) is True  # and no one's cordon stays


def test_a_cordon_set_after_someone_lifted_the_drains_is_theirs_though_the_mark_stays(cluster, node, core):
    """`kubectl uncordon` of a node a drain cordoned leaves the drain's annotation, and a later
    `kubectl cordon` is theirs: the API server gives `spec.unschedulable` to whoever set it last,
    so lifting the drain's cordon leaves it. A cordon lifted and set again by the drain is its own."""
    cluster.cordon(name=node, mark=True)
    core.patch_node(node, {"spec": {"unschedulable": None}}, field_manager="kubectl-cordon")  # kubectl uncordon
    core.patch_node(node, {"spec": {"unschedulable": True}}, field_manager="kubectl-cordon")  # kubectl cordon
    assert drain_mark(core, node) == "true"
    assert cluster.uncordon(name=node, mark=True) is False and core.read_node(node).spec.unschedulable
    core.patch_node(node, {"spec": {"unschedulable": None}})
    assert cluster.cordon(name=node, mark=True) is True
    assert cluster.uncordon(name=node, mark=True) is True and not core.read_node(node).spec.unschedulable


def declared_too(core, node):
    """An administrator declares the cordon by server-side apply: a second holder of the field."""
    declared = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}, "spec": {"unschedulable": True}}
    core.patch_node(node, declared, field_manager="admin", _content_type="application/apply-patch+yaml")


def forgotten(core, node):
    """Ten tools write the Node after the drain: the API server keeps ten entries of who holds
    what and merges the oldest, the drain's, into `ancient-changes`."""
    for i in range(10):
        core.patch_node(node, {"metadata": {"labels": {f"tool-{i}": "x"}}}, field_manager=f"tool-{i}")
    node_read = core.read_node(node)
    holders = {m.manager for m in node_read.metadata.managed_fields if "f:unschedulable" in (m.fields_v1 or {}).get("f:spec", {})}
    assert holders == {"ancient-changes"}


def lifted_and_set_by_a_script(core, node):
    """Someone's script (by the client's default field manager, as an earlier release's drain)
    uncordons the node and cordons it again: the drain's mark stays, the cordon is theirs."""
    core.patch_node(node, {"spec": {"unschedulable": None}})
    core.patch_node(node, {"spec": {"unschedulable": True}})


@pytest.mark.parametrize("meanwhile", [declared_too, forgotten, lifted_and_set_by_a_script])
def test_a_drains_cordon_someone_else_also_holds_or_the_cluster_forgot_stays(cluster, node, core, meanwhile):
    """Lifting the drain's cordon needs the drain's field manager to hold `spec.unschedulable`
    alone: one who declared the same cordon by server-side apply holds it too, and where the API
    server merged the drain's entry into `ancient-changes`, whose the cordon is cannot be told.
    Either way the cordon stays."""
    cluster.cordon(name=node, mark=True)
    meanwhile(core, node)
    assert cluster.uncordon(name=node, mark=True) is False and core.read_node(node).spec.unschedulable


def test_a_drains_cordon_from_before_the_drain_had_a_field_manager_is_still_the_drains(cluster, node, core):
    """An earlier release wrote the drain's mark and cordon by the client's default field manager."""
    core.patch_node(node, {"metadata": {"annotations": {DRAIN_CORDON_ANNOTATION: "true"}}, "spec": {"unschedulable": True}})
    assert cluster.uncordon(name=node, mark=True) is True and not core.read_node(node).spec.unschedulable


def test_a_cordon_set_between_the_drains_read_and_its_write_stays_theirs(cluster, node, core, monkeypatch):
    """Someone cordons the Node after the drain's cordon read it schedulable and before it wrote:
    the write, conditional on the resourceVersion it read, is refused (409), the Node is read
    again, found cordoned, and left unmarked, so that lifting the drain's cordon leaves theirs."""
    read = cluster.core.read_node

    def read_then_cordoned_by_someone(name, **kwargs):
        answer = read(name, **kwargs)
        core.patch_node(name, {"spec": {"unschedulable": True}})
        monkeypatch.setattr(cluster.core, "read_node", read)
        return answer

    monkeypatch.setattr(cluster.core, "read_node", read_then_cordoned_by_someone)
    assert cluster.cordon(name=node, mark=True) is True
    assert drain_mark(core, node) is None
    assert cluster.uncordon(name=node, mark=True) is False and core.read_node(node).spec.unschedulable


def test_eviction_goes_through_the_eviction_api_and_a_disruption_budget_makes_it_wait(cluster, kubelet, core, kube, node, namespace):
    core.create_namespaced_pod(namespace, pod(namespace, "guarded", node=node, labels={"app": "trainer"}))
    core.create_namespaced_pod(namespace, pod(namespace, "free", node=node, labels={"app": "notebook"}))
    kubelet.sync_pods(node_name=node, now=NOW)  # both Running: a budget protects running pods
    policy = client.PolicyV1Api(kube)
    budget = client.V1PodDisruptionBudget(
        metadata=client.V1ObjectMeta(name="trainer"),
        spec=client.V1PodDisruptionBudgetSpec(min_available=1, selector=client.V1LabelSelector(match_labels={"app": "trainer"})),
    )
    created = policy.create_namespaced_pod_disruption_budget(namespace, budget)
    pods = {f"{namespace}/guarded": {"app": "trainer"}, f"{namespace}/free": {"app": "notebook"}}
    assert cluster.disruption_budgets(pods=pods) == [DisruptionBudget(frozenset({f"{namespace}/guarded"}), 0)]  # the plan's answer, asked first

    assert cluster.evict_pod(namespace=namespace, name="guarded", reason="drain") is False  # 429: not now
    assert cluster.evict_pod(namespace=namespace, name="free", reason="drain") is True
    kubelet.sync_pods(node_name=node, now=NOW)  # the kubelet confirms the deletion
    wait_for(lambda: [p.metadata.name for p in core.list_namespaced_pod(namespace).items] == ["guarded"], what="free to go")

    # The disruption controller (absent here) would report that one disruption is allowed now.
    policy.patch_namespaced_pod_disruption_budget_status("trainer", namespace, {"status": {
        "observedGeneration": created.metadata.generation, "disruptionsAllowed": 1, "currentHealthy": 2,
        "desiredHealthy": 1, "expectedPods": 2,
    }})  # fmt: skip
    assert cluster.disruption_budgets(pods=pods) == [DisruptionBudget(frozenset({f"{namespace}/guarded"}), 1)]
    assert cluster.evict_pod(namespace=namespace, name="guarded", reason="drain") is True
    assert cluster.evict_pod(namespace=namespace, name="never-existed", reason="drain") is True  # gone is evicted


def test_a_drain_moves_what_kubectl_drain_moves(cluster, kubelet, core, kube, node, namespace, unique):
    high = f"high-{unique}"
    client.SchedulingV1Api(kube).create_priority_class(client.V1PriorityClass(metadata=client.V1ObjectMeta(name=high), value=1000))
    owner = [client.V1OwnerReference(api_version="apps/v1", kind="DaemonSet", name="dcgm-exporter", uid="0b6a8c4e-5b1e-4b8e-9d7a-2f4f3c1d9e01", controller=True)]
    core.create_namespaced_pod(namespace, pod(namespace, "exporter", node=node, owner=owner, gpus=0))
    core.create_namespaced_pod(namespace, pod(namespace, "static", node=node, annotations={"kubernetes.io/config.mirror": "x"}, gpus=0))
    pod_create_admitted(core, namespace, pod(namespace, "trainer", node=node, priority_class_name=high, annotations={"ebcloud.io/checkpointable": "true"}))
    core.create_namespaced_pod(namespace, pod(namespace, "done", node=node, annotations={"ebcloud.io/duration": "1s"}))
    kubelet.sync_pods(node_name=node, now=NOW)
    kubelet.sync_pods(node_name=node, now=NOW.replace(minute=1))  # "done" ran its second: Succeeded
    moved = cluster.list_pods(node_name=node)
    assert [(p.name, p.priority, p.checkpointable) for p in moved] == [("trainer", 1000, True)]


def test_kube_scheduler_binds_the_articles_pod_once_the_pool_label_reaches_the_existing_node(cluster, kubelet, core, node, namespace):
    """The article's fix "add nodeLabels pool: train" reaches a node that already exists: the
    apply relabels it and kube-scheduler binds the pod that waited for it."""
    cluster.node_apply(name=node, labels={"ebcloud.io/pool": "train-pool-a"}, taints=[TRAIN_TAINT])
    toleration = client.V1Toleration(key="pool", operator="Equal", value="train", effect="NoSchedule")
    core.create_namespaced_pod(namespace, pod(namespace, "train", gpus=8, node_selector={"pool": "train"}, tolerations=[toleration]))

    def unschedulable():
        conditions = core.read_namespaced_pod("train", namespace).status.conditions or ()
        return next((c for c in conditions if c.type == "PodScheduled" and c.status == "False"), None)

    waiting = wait_for(unschedulable, what="the scheduler's verdict")
    assert waiting.reason == "Unschedulable" and "didn't match Pod's node affinity/selector" in waiting.message

    cluster.node_apply(name=node, labels={"ebcloud.io/pool": "train-pool-a", "pool": "train"}, taints=[TRAIN_TAINT])
    bound = wait_for(lambda: core.read_namespaced_pod("train", namespace).spec.node_name, timeout=60, what="the bind")
    assert bound == node


def _evicts(core, namespace: str, name: str) -> bool:
    """What the Eviction API answers now, asked as a dry run (nothing is evicted)."""
    dry_run = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace), delete_options=client.V1DeleteOptions(dry_run=["All"]))
    try:
        core.create_namespaced_pod_eviction(name, namespace, dry_run)
    except ApiException as exc:
        assert exc.status == 429, exc.body
        return False
    return True


def test_the_plan_frees_an_unready_pod_exactly_when_the_eviction_api_does(cluster, kubelet, core, kube, node, namespace):
    """A Running pod that is not Ready goes without spending a disruption, under the budget's
    unhealthyPodEvictionPolicy: for each policy and status, the plan's budgets leave it free
    exactly when the Eviction API (dry run) lets it go."""
    for name in ("ready", "sick"):
        core.create_namespaced_pod(namespace, pod(namespace, name, node=node, labels={"app": "trainer"}))
    kubelet.sync_pods(node_name=node, now=NOW)
    conditions = [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}]
    core.patch_namespaced_pod_status("sick", namespace, {"status": {"conditions": conditions}})
    pods = {f"{namespace}/ready": {"app": "trainer"}, f"{namespace}/sick": {"app": "trainer"}}
    policy, seen = client.PolicyV1Api(kube), []
    for unhealthy in ("IfHealthyBudget", "AlwaysAllow"):
        spec = {"minAvailable": 1, "selector": {"matchLabels": {"app": "trainer"}}, "unhealthyPodEvictionPolicy": unhealthy}
        policy.create_namespaced_pod_disruption_budget(namespace, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "trainer"}, "spec": spec})
        for current, desired in ((1, 1), (0, 1), (1, 0)):
            policy.patch_namespaced_pod_disruption_budget_status("trainer", namespace, {"status": {
                "observedGeneration": 1, "currentHealthy": current, "desiredHealthy": desired, "disruptionsAllowed": 0, "expectedPods": 2}})  # fmt: skip
            free = all(f"{namespace}/sick" not in budget.pods for budget in cluster.disruption_budgets(pods=pods))
            assert free == _evicts(core, namespace, "sick"), (unhealthy, current, desired)
            assert not _evicts(core, namespace, "ready")  # a Ready pod spends a disruption: none allowed
            seen.append(free)
        policy.delete_namespaced_pod_disruption_budget("trainer", namespace)
    assert seen == [True, False, False, True, True, True]
