"""The autoscaler's scale-down keeps a burst node whose pods may not go, as Cluster Autoscaler
does (kubernetes/autoscaler, cluster-autoscaler/FAQ.md, "What types of pods can prevent CA from
removing a node?"), says why, and moves the pods it may move on a plan made under the
scheduler's lock."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

from pools.controllers import autoscaler
from pools.controllers.autoscaler import pool_autoscale
from pools.controllers.scheduler import scheduler_lock, scheduler_pass
from pools.models import Node, PoolEvent, ScalingActivity
from pools.models.pods import Pod
from pools.services import pods as pod_services
from pools.services.disruption_budgets import budget_create
from tests.pools.autoscaler_helpers import SCALING, memory_used, run_on
from tests.pools.pod_helpers import T0, pod_document, pool_with_nodes, submit

LATER = T0 + timedelta(hours=1)  # past the scale-down window


def pool_with_burst_node(actors):
    """The article's pool (two monthly nodes) with one Ready burst node beside them."""
    pool = pool_with_nodes(actors["lead"], node_labels={"gpu-class": "a100", "pool": "train"}, scaling=SCALING, burst={"enabled": True, "maxNodes": 4})
    first = pool.nodes.first()
    burst = Node.objects.create(pool=pool, name="train-pool-a-burst", billing=Node.Billing.ON_DEMAND, phase=Node.Phase.READY, zone=pool.zone,
                                gpu_count=8, labels=first.labels, taints=first.taints, ready_at=T0)  # fmt: skip
    return pool, burst


def budget(actors, name: str, spec: dict) -> None:
    budget_create(user=actors["member"], document={"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": "algorithm"}, "spec": spec})


def assert_kept(pool, burst, pod, because: str) -> None:
    burst.refresh_from_db()
    pod.refresh_from_db()
    assert burst.release_reason == "" and pod.node_id == burst.pk and pod.phase == Pod.Phase.RUNNING
    activity = ScalingActivity.objects.get(pool=pool)
    assert activity.reason == "ScaleDownBlocked" and activity.blocked
    assert f"{burst.name}: {because}" in activity.message, activity.message
    assert pool.events.get(reason="ScaleDownBlocked").type == PoolEvent.Type.WARNING


def test_a_pod_whose_disruption_budget_allows_no_eviction_keeps_its_burst_node(actors):
    pool, burst = pool_with_burst_node(actors)
    budget(actors, "keep", {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "trainer"}}})
    pod = submit(actors["member"], "small", gpus=2, labels={"app": "trainer"})
    run_on(pod, burst, [0, 1])
    memory_used(pool, 5)
    assert pool_autoscale(pool_id=pool.pk, now=LATER).reason == "ScaleDownBlocked"
    assert_kept(pool, burst, pod, "pod algorithm/small may not be evicted now: the disruption budget algorithm/keep allows no more disruptions")


def test_a_budget_that_allows_an_eviction_lets_the_node_go(actors):
    pool, burst = pool_with_burst_node(actors)
    budget(actors, "some", {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "trainer"}}})
    pod = submit(actors["member"], "small", gpus=2, labels={"app": "trainer"})
    run_on(pod, burst, [0, 1])
    memory_used(pool, 5)
    assert pool_autoscale(pool_id=pool.pk, now=LATER).reason == "ScaledDown"
    pod.refresh_from_db()
    assert pod.node.billing == Node.Billing.MONTHLY and pod.reason == "Repacked"


def test_a_pod_annotated_not_safe_to_evict_keeps_its_burst_node(actors):
    pool, burst = pool_with_burst_node(actors)
    document = pod_document("pinned", gpus=2)
    document["metadata"]["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"] = "false"
    pod = pod_services.pod_create(user=actors["member"], document=document, now=T0)
    run_on(pod, burst, [0, 1])
    memory_used(pool, 5)
    assert pool_autoscale(pool_id=pool.pk, now=LATER).reason == "ScaleDownBlocked"
    assert_kept(pool, burst, pod, 'pod algorithm/pinned is annotated cluster-autoscaler.kubernetes.io/safe-to-evict: "false"')
    pool_autoscale(pool_id=pool.pk, now=LATER + timedelta(minutes=1))  # said once, not every pass
    assert ScalingActivity.objects.count() == pool.events.get(reason="ScaleDownBlocked").count == 1


def test_the_repack_plan_sees_a_scheduler_pass_that_committed_before_the_lock(actors):
    """A scheduler pass binds a pod onto the monthly node's last free GPUs between the
    autoscaler's decision and its taking the scheduler's lock: the plan, made under the lock,
    moves the burst node's pod elsewhere, never onto GPUs taken."""
    pool, burst = pool_with_burst_node(actors)
    first, second = pool.nodes.filter(billing=Node.Billing.MONTHLY).order_by("name")
    run_on(submit(actors["member"], "a", gpus=6, cpu="1", duration="10h"), first, [0, 1, 2, 3, 4, 5])
    run_on(submit(actors["member"], "b", gpus=6, cpu="1", duration="10h"), second, [0, 1, 2, 3, 4, 5])
    run_on(submit(actors["member"], "c", gpus=2, cpu="1", duration="10h"), burst, [0, 1])
    memory_used(pool, 5)

    def lock_after_a_scheduler_pass():
        submit(actors["member"], "d", gpus=2, cpu="1", duration="10h")
        scheduler_pass(now=LATER)  # it takes the first node's two free GPUs
        scheduler_lock()

    with mock.patch.object(autoscaler, "scheduler_lock", lock_after_a_scheduler_pass):
        assert pool_autoscale(pool_id=pool.pk, now=LATER).reason == "ScaledDown"
    placed = {name: (node, gpus) for name, node, gpus in Pod.objects.filter(phase=Pod.Phase.RUNNING).values_list("name", "node__name", "gpu_indices")}
    assert placed["d"] == (first.name, [6, 7])
    assert placed["c"] == (second.name, [6, 7])
    for node in (first, second):
        used = [gpu for on, gpus in placed.values() if on == node.name for gpu in gpus]
        assert sorted(used) == list(range(8))  # every GPU once: nothing oversubscribed


def test_expendable_pods_keep_no_burst_node_and_are_not_moved(actors, settings):
    """Below the cutoff (CA's --expendable-pods-priority-cutoff, -10) a pod is left out of the
    scale-down simulation: neither its safe-to-evict annotation nor its budget keeps the node, it
    needs no room elsewhere (the monthly nodes are full) and is not moved: the drain evicts it
    (here its budget holds it until the drain's deadline). At the cutoff the same pods keep the
    node."""
    pool, burst = pool_with_burst_node(actors)
    for index, node in enumerate(pool.nodes.filter(billing=Node.Billing.MONTHLY)):
        run_on(submit(actors["member"], f"full-{index}", gpus=8, cpu="1"), node, list(range(8)))
    budget(actors, "keep", {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "filler"}}})
    document = pod_document("pinned", gpus=2, priority=-100, labels={"app": "filler"})
    document["metadata"]["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"] = "false"
    pods = [pod_services.pod_create(user=actors["member"], document=document, now=T0), submit(actors["member"], "filler", gpus=4, priority=-100, labels={"app": "filler"})]
    for pod, gpus in zip(pods, ([0, 1], [2, 3, 4, 5]), strict=True):
        run_on(pod, burst, gpus)
    memory_used(pool, 5)
    settings.EBCLOUD_EXPENDABLE_PODS_PRIORITY_CUTOFF = -100
    assert pool_autoscale(pool_id=pool.pk, now=LATER).reason == "ScaleDownBlocked"
    settings.EBCLOUD_EXPENDABLE_PODS_PRIORITY_CUTOFF = -10
    assert pool_autoscale(pool_id=pool.pk, now=LATER + timedelta(minutes=5)).reason == "ScaledDown"
    burst.refresh_from_db()
    assert burst.release_reason and burst.unschedulable
    assert set(Pod.objects.filter(name__in=["pinned", "filler"]).values_list("node", "reason")) == {(burst.pk, "")}  # not moved: left to the drain


def test_a_burst_node_not_ready_yet_is_not_scaled_down(actors):
    """The node bought for a queued pod is still Provisioning when GPU memory falls: it is not a
    candidate (Cluster Autoscaler leaves a node that has not registered to its provisioning
    timeout; Karpenter never consolidates an uninitialised node), so the pod's node still comes."""
    pool = pool_with_nodes(actors["lead"], node_labels={"gpu-class": "a100", "pool": "train"}, scaling=SCALING, burst={"enabled": True, "maxNodes": 4})
    for index in range(2):
        submit(actors["member"], f"busy-{index}", gpus=8, cpu="1", duration="10h")
    scheduler_pass(now=T0)
    submit(actors["member"], "queued", gpus=8)
    memory_used(pool, 95)
    assert pool_autoscale(pool_id=pool.pk, now=T0).reason == "ScaledUp"
    upcoming = Node.objects.get(pool=pool, billing=Node.Billing.ON_DEMAND)
    Node.objects.filter(pk=upcoming.pk).update(phase=Node.Phase.PROVISIONING)
    memory_used(pool, 5)
    assert pool_autoscale(pool_id=pool.pk, now=T0 + timedelta(minutes=35)).reason == "ScaleDownBlocked"
    upcoming.refresh_from_db()
    assert upcoming.release_reason == "" and upcoming.phase == Node.Phase.PROVISIONING
    message = ScalingActivity.objects.get(pool=pool, reason="ScaleDownBlocked").message
    assert f"{upcoming.name}: it is still Provisioning: a node that has not become Ready is not scaled down" in message, message


def test_an_empty_burst_node_a_pending_pod_fits_only_on_stays(actors):
    """Both monthly nodes are full and a Pending pod fits only the empty Ready burst node: the
    scale-down places the Pending pods first, as Cluster Autoscaler does, and keeps that node."""
    pool, burst = pool_with_burst_node(actors)
    for index, node in enumerate(pool.nodes.filter(billing=Node.Billing.MONTHLY)):
        run_on(submit(actors["member"], f"busy-{index}", gpus=8, cpu="1"), node, list(range(8)))
    submit(actors["member"], "queued", gpus=8)
    memory_used(pool, 5)
    assert pool_autoscale(pool_id=pool.pk, now=LATER).reason == "ScaleDownBlocked"
    burst.refresh_from_db()
    assert burst.release_reason == ""
    message = ScalingActivity.objects.get(pool=pool).message
    assert f"{burst.name}: Pending pod algorithm/queued would be scheduled here: no node that stays has room for it" in message, message
    scheduler_pass(now=LATER + timedelta(seconds=5))
    assert Pod.objects.get(name="queued").node == burst


def test_a_pending_pod_that_fits_a_node_that_stays_keeps_no_burst_node(actors):
    pool, burst = pool_with_burst_node(actors)
    first = pool.nodes.filter(billing=Node.Billing.MONTHLY).order_by("name").first()
    run_on(submit(actors["member"], "busy", gpus=8, cpu="1"), first, list(range(8)))
    submit(actors["member"], "queued", gpus=8)  # the second monthly node is free
    memory_used(pool, 5)
    assert pool_autoscale(pool_id=pool.pk, now=LATER).reason == "ScaledDown"
    burst.refresh_from_db()
    assert burst.release_reason


def test_the_room_a_pending_pod_needs_is_not_given_to_a_pod_moved_off_a_burst_node(actors):
    """The monthly nodes have two GPUs free, which a Pending pod fits: a burst node's two-GPU pod
    cannot move there as well, so the burst node stays rather than strand the Pending pod."""
    pool, burst = pool_with_burst_node(actors)
    first, second = pool.nodes.filter(billing=Node.Billing.MONTHLY).order_by("name")
    run_on(submit(actors["member"], "full", gpus=8, cpu="1"), first, list(range(8)))
    run_on(submit(actors["member"], "most", gpus=6, cpu="1"), second, list(range(6)))
    on_burst = submit(actors["member"], "on-burst", gpus=2, cpu="1")
    run_on(on_burst, burst, [0, 1])
    submit(actors["member"], "queued", gpus=2, cpu="1")
    memory_used(pool, 5)
    assert pool_autoscale(pool_id=pool.pk, now=LATER).reason == "ScaleDownBlocked"
    assert_kept(pool, burst, on_burst, "pod algorithm/on-burst fits on no other node")
    scheduler_pass(now=LATER + timedelta(seconds=5))
    assert Pod.objects.get(name="queued").node == second
