"""Node exits against a real kube-apiserver when the cluster does not answer as a drain hopes: a
Node deleted behind our back (`kubectl delete node`, the cloud's node controller), an eviction
refused with something other than a budget's 429 (500 for a pod under two budgets), an API server
out of reach, a pod already terminating; and the `timeAdded` of the taints our apply writes back.
Each time the drain goes on and the deadline holds, and the pool's pass does not fail."""

from __future__ import annotations

from datetime import timedelta

import pytest
from kubernetes import client

from pools.controllers import lifecycle
from pools.models import GpuNodePool, Node, PoolEvent
from pools.providers.base import ClusterRefused, EvictionRefused
from pools.providers.fake_kubelet import FakeKubelet
from pools.providers.kubernetes import KubernetesCluster
from pools.services import pools as services
from tests.k8s.helpers import pod
from tests.k8s.test_node_labels_on_kubernetes import pool_on_cluster
from tests.pools.lifecycle_helpers import T0, TICK

pytestmark = pytest.mark.django_db
TWO_BUDGETS = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support. (500)"


def passes(pool, start, count):
    """`count` passes over every pool, one TICK apart; the errors of this pool's passes."""
    errors, now = [], start
    for _ in range(count):
        now += TICK
        errors += [r.error for r in lifecycle.reconcile_all(now=now) if r.pool_id == pool.pk and r.error]
    return errors


def events_of(node, reason):
    return list(PoolEvent.objects.filter(node=node, reason=reason).order_by("id"))


def draining(node, *, deadline):
    """The node drains (scale-in) from now on, as `drain_start` left it, with this deadline."""
    Node.objects.filter(pk=node.pk).update(release_reason="ScaledIn", phase="Draining", drain_deadline=deadline, unschedulable=True)


def running_pod(core, kube, namespace, name, node, **spec):
    core.create_namespaced_pod(namespace, pod(namespace, name, node=node.name, **spec))
    FakeKubelet(kube).sync_pods(node_name=node.name, now=T0)


def unreachable() -> KubernetesCluster:
    """A cluster whose API server nobody listens for (connection refused at once)."""
    configuration = client.Configuration()
    configuration.host = "http://127.0.0.1:9"
    configuration.retries = False
    return KubernetesCluster(client.ApiClient(configuration))


# ---------------------------------------------------------------------------------------------
# A Node gone from the cluster


def test_deleting_a_pool_whose_node_object_is_gone_drains_and_releases_every_node(on_kubernetes, actors, kube, core, unique, namespace):
    pool = pool_on_cluster(actors, kube, f"gone-{unique}", 2)
    lifecycle.reconcile_all(now=T0)
    gone, other = Node.objects.filter(pool=pool).order_by("name")
    running_pod(core, kube, namespace, "trainer", other)
    core.delete_node(gone.name)  # kubectl delete node, or the cloud's node lifecycle controller
    services.pool_delete(user=actors["lead"], pool=pool, now=T0)

    assert passes(pool, T0, 1) == []
    FakeKubelet(kube).sync_pods(node_name=other.name, now=T0 + TICK)  # the evicted pod ends
    assert passes(pool, T0 + TICK, 1) == []
    assert GpuNodePool.objects.get(pk=pool.pk).deleted_at is not None
    assert list(Node.objects.filter(pool=pool).order_by("name").values_list("phase", flat=True)) == ["Terminated", "Terminated"]
    [said] = events_of(gone, "NodeCordoned")
    assert "no longer in the cluster" in said.message and said.type == "Normal"
    assert events_of(gone, "NodeReleased")
    assert [e.message for e in events_of(other, "NodeCordoned")] == [f"Node {other.name} cordoned: no new pods are scheduled on it"]
    assert f"{namespace}/trainer" in events_of(other, "NodeDraining")[0].message  # the surviving node was drained
    assert events_of(other, "NodeReleased")
    assert not core.list_node(field_selector=f"metadata.name={other.name}").items


def test_cordoning_or_uncordoning_a_node_the_cluster_no_longer_has_changes_nothing(kube, unique):
    cluster = KubernetesCluster(kube)
    assert cluster.cordon(name=f"never-{unique}") is False
    assert cluster.uncordon(name=f"never-{unique}") is False
    FakeKubelet(kube).join(name=f"here-{unique}", cpu_milli=1000, memory_mib=1024, gpus=1, now=T0)
    assert cluster.cordon(name=f"here-{unique}") is True
    assert client.CoreV1Api(kube).read_node(f"here-{unique}").spec.unschedulable is True


# ---------------------------------------------------------------------------------------------
# Evictions refused otherwise than by a budget's 429


def two_budgets_over(kube, namespace):
    policy = client.PolicyV1Api(kube)
    for name, selector in (("by-app", {"app": "t"}), ("by-tier", {"tier": "x"})):
        budget = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
                  "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector}}}  # fmt: skip
        policy.create_namespaced_pod_disruption_budget(namespace, budget)


def test_an_eviction_refused_with_a_500_is_not_evicted_now_and_says_why(kube, core, unique, namespace):
    node_name = f"two-{unique}"
    FakeKubelet(kube).join(name=node_name, cpu_milli=1000, memory_mib=1024, gpus=1, now=T0)
    core.create_namespaced_pod(namespace, pod(namespace, "guarded", node=node_name, labels={"app": "t", "tier": "x"}))
    FakeKubelet(kube).sync_pods(node_name=node_name, now=T0)
    two_budgets_over(kube, namespace)
    with pytest.raises(EvictionRefused) as refused:
        KubernetesCluster(kube).evict_pod(namespace=namespace, name="guarded", reason="ScaledIn")
    assert refused.value.message == TWO_BUDGETS
    assert core.read_namespaced_pod("guarded", namespace).metadata.deletion_timestamp is None


def test_a_pod_under_two_budgets_waits_with_the_apis_message_then_the_deadline_releases_its_node(on_kubernetes, actors, kube, core, unique, namespace):
    pool = pool_on_cluster(actors, kube, f"pdb-{unique}", 1)
    lifecycle.reconcile_all(now=T0)
    node = Node.objects.get(pool=pool)
    running_pod(core, kube, namespace, "guarded", node, labels={"app": "t", "tier": "x"})
    two_budgets_over(kube, namespace)
    draining(node, deadline=T0 + 2 * TICK)

    assert passes(pool, T0, 1) == []
    node.refresh_from_db()
    assert node.phase == "Draining"
    [waiting] = events_of(node, "DrainWaiting")
    assert waiting.type == "Warning" and f"{namespace}/guarded (eviction refused: {TWO_BUDGETS})" in waiting.message
    assert not events_of(node, "NodeDraining")

    assert passes(pool, T0 + TICK, 1) == []  # the deadline: released anyway, with a Warning naming the pod
    node.refresh_from_db()
    assert node.phase == "Terminated"
    [timeout] = events_of(node, "DrainTimeout")
    assert timeout.type == "Warning" and f"{namespace}/guarded (eviction refused: {TWO_BUDGETS})" in timeout.message
    assert events_of(node, "NodeReleased")


def test_an_api_server_out_of_reach_fails_no_drain_call_with_its_own_exception(unique):
    cluster = unreachable()
    with pytest.raises(EvictionRefused):
        cluster.evict_pod(namespace="default", name=f"p-{unique}", reason="ScaledIn")
    with pytest.raises(ClusterRefused, match="did not list pods on node"):
        cluster.list_pods(node_name=f"n-{unique}")
    with pytest.raises(ClusterRefused, match=r"did not patch nodes/n-\S+ \(cordon\)"):
        cluster.cordon(name=f"n-{unique}")


def test_a_drain_with_the_api_server_out_of_reach_waits_and_the_pools_pass_goes_on(on_kubernetes, actors, kube, unique):
    pool = pool_on_cluster(actors, kube, f"away-{unique}", 2)
    lifecycle.reconcile_all(now=T0)
    leaving, staying = Node.objects.filter(pool=pool).order_by("name")
    draining(leaving, deadline=T0 + timedelta(minutes=10))
    results = lifecycle.reconcile_all(now=T0 + TICK, cluster=unreachable())
    assert [r.error for r in results if r.pool_id == pool.pk] == [""]
    leaving.refresh_from_db()
    assert leaving.phase == "Draining"
    [waiting] = events_of(leaving, "DrainWaiting")
    assert "pods that could not be listed" in waiting.message and waiting.type == "Warning"

    services.pool_delete(user=actors["lead"], pool=pool, now=T0 + TICK)  # a drain that cannot cordon starts all the same
    results = lifecycle.reconcile_all(now=T0 + 2 * TICK, cluster=unreachable())
    assert [r.error for r in results if r.pool_id == pool.pk] == [""]
    staying.refresh_from_db()
    assert (staying.phase, staying.release_reason, staying.unschedulable) == ("Draining", "PoolDeleted", True)
    [said] = events_of(staying, "NodeCordoned")
    assert said.type == "Warning" and "could not be cordoned in the cluster now" in said.message

    assert passes(pool, T0 + 2 * TICK, 2) == []  # the API server is back: cordoned, drained, released
    assert GpuNodePool.objects.get(pk=pool.pk).deleted_at is not None


# ---------------------------------------------------------------------------------------------
# A pod already terminating


def test_a_terminating_pod_is_waited_for_not_evicted_again(on_kubernetes, actors, kube, core, unique, namespace):
    pool = pool_on_cluster(actors, kube, f"term-{unique}", 1)
    lifecycle.reconcile_all(now=T0)
    node = Node.objects.get(pool=pool)
    running_pod(core, kube, namespace, "slow", node, termination_grace_period_seconds=3600)
    running_pod(core, kube, namespace, "quick", node, termination_grace_period_seconds=3600)
    core.delete_namespaced_pod("slow", namespace)  # terminating already: its grace period runs, no kubelet ends it
    draining(node, deadline=T0 + timedelta(minutes=10))

    assert passes(pool, T0, 3) == []
    [drained] = events_of(node, "NodeDraining")  # `quick` evicted once (it terminates too), `slow` never
    assert drained.count == 1 and drained.message.startswith(f"Evicted 1 pod(s) from {node.name}") and "slow" not in drained.message
    [waiting] = events_of(node, "DrainWaiting")  # the same words each pass: one event, counted
    assert waiting.count == 3
    assert f"{namespace}/slow (terminating)" in waiting.message and f"{namespace}/quick (terminating)" in waiting.message
    assert {p.metadata.name for p in core.list_namespaced_pod(namespace).items} == {"slow", "quick"}

    FakeKubelet(kube).sync_pods(node_name=node.name, now=T0)  # the kubelet ends them
    assert passes(pool, T0 + 3 * TICK, 1) == []
    node.refresh_from_db()
    assert node.phase == "Terminated" and not events_of(node, "DrainTimeout")


# ---------------------------------------------------------------------------------------------
# timeAdded of the taints written back


def test_a_taint_written_back_keeps_its_time_added(kube, core, unique):
    name = f"ta-{unique}"
    FakeKubelet(kube).join(name=name, cpu_milli=1000, memory_mib=1024, gpus=1, now=T0)
    core.patch_node(name, {"spec": {"taints": [
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"},
        {"key": "pool", "value": "train", "effect": "NoExecute", "timeAdded": "2026-02-01T00:00:00Z"},
    ]}})  # fmt: skip
    KubernetesCluster(kube).node_apply(name=name, labels={"pool": "train"}, taints=[{"key": "pool", "value": "train", "effect": "NoExecute"}])
    taints = {t.key: (t.value, t.effect, t.time_added) for t in core.read_node(name).spec.taints}
    assert taints["node.kubernetes.io/unreachable"][2] is not None and f"{taints['node.kubernetes.io/unreachable'][2]:%Y-%m-%d}" == "2026-01-01"
    assert taints["pool"][:2] == ("train", "NoExecute") and f"{taints['pool'][2]:%Y-%m-%d}" == "2026-02-01"  # ours, unchanged: same clock
