"""A burst node chosen for scale-down is cordoned with the decision, and its pods are checked
again right before they are evicted, as Cluster Autoscaler taints a node ToBeDeletedByClusterAutoscaler
as part of its decision and re-checks the node's pods (the actuator's `GetPodsToMove`) before it
drains it: a scheduler pass that runs after the plan places nothing on the node, and a pod that
landed there anyway and would have kept the node (safe-to-evict "false", its budget spent)
cancels the scale-down of that node, which is uncordoned."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

import pytest

from pools.controllers import autoscaler
from pools.controllers.autoscaler import pool_autoscale
from pools.controllers.scheduler import scheduler_pass
from pools.models import Node, PoolEvent, ScalingActivity
from pools.models.pods import Pod
from pools.services import pods as pod_services
from tests.pools.autoscaler_helpers import SCALING, memory_used, run_on
from tests.pools.pod_helpers import T0, pod_document, pool_with_nodes, submit

pytestmark = pytest.mark.django_db
LATER = T0 + timedelta(hours=1)  # past the scale-down window


def pinned_document(name: str = "pinned") -> dict:
    document = pod_document(name, gpus=4, cpu="1", duration="10h")
    document["metadata"]["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"] = "false"
    return document


def scaling_down_pool(actors):
    """Two monthly nodes (6 and 8 GPUs used) and a burst node whose 2-GPU pod fits the first's
    free GPUs: a cold pool scales the burst node down, its pod moved to the first node."""
    pool = pool_with_nodes(actors["lead"], node_labels={"gpu-class": "a100", "pool": "train"}, scaling=SCALING, burst={"enabled": True, "maxNodes": 4})
    first, second = pool.nodes.order_by("name")
    burst = Node.objects.create(pool=pool, name="train-pool-a-burst", billing=Node.Billing.ON_DEMAND, phase=Node.Phase.READY, zone=pool.zone,
                                gpu_count=8, labels=first.labels, taints=first.taints, ready_at=T0)  # fmt: skip
    run_on(submit(actors["member"], "a", gpus=6, cpu="1", duration="10h"), first, list(range(6)))
    run_on(submit(actors["member"], "b", gpus=8, cpu="1", duration="10h"), second, list(range(8)))
    run_on(submit(actors["member"], "c", gpus=2, cpu="1", duration="10h"), burst, [0, 1])
    memory_used(pool, 5)
    return pool, burst


def test_a_scheduler_pass_after_the_plan_places_nothing_on_the_node_being_removed(actors):
    """Another worker's scheduler pass runs after the scale-down plan committed and before the
    drain: the burst node is cordoned already, so the pod it would have bound there (annotated
    safe-to-evict "false") waits Pending instead of being evicted by the drain."""
    pool, burst = scaling_down_pool(actors)
    real = autoscaler.drain_start

    def after_a_scheduler_pass(p, node, **kwargs):
        pod_services.pod_create(user=actors["member"], document=pinned_document(), now=LATER)
        scheduler_pass(now=LATER)
        return real(p, node, **kwargs)

    with mock.patch.object(autoscaler, "drain_start", after_a_scheduler_pass):
        assert pool_autoscale(pool_id=pool.pk, now=LATER).reason == "ScaledDown"
    pinned = Pod.objects.get(name="pinned")
    assert pinned.node_id is None and pinned.reason != "Evicted", (pinned.phase, pinned.reason)
    burst.refresh_from_db()
    assert burst.release_reason and burst.unschedulable
    assert not pool.events.filter(reason="NodeDraining").exists()  # nothing was left on it to evict


def test_a_pod_that_landed_on_the_node_anyway_cancels_its_scale_down(actors):
    """A pod bound by a scheduler that had not seen the cordon yet (a real cluster's
    kube-scheduler, in the same instant) is on the node when the drain begins: it is annotated
    safe-to-evict "false", so the node is not drained but uncordoned, with a Warning; the pod
    keeps running, and the activity says the scale-down was cancelled."""
    pool, burst = scaling_down_pool(actors)
    real = autoscaler.drain_start

    def landed_first(p, node, **kwargs):
        run_on(pod_services.pod_create(user=actors["member"], document=pinned_document(), now=LATER), node, [2, 3, 4, 5])
        return real(p, node, **kwargs)

    with mock.patch.object(autoscaler, "drain_start", landed_first):
        result = pool_autoscale(pool_id=pool.pk, now=LATER)
    assert (result.reason, result.desired) == ("ScaleDownBlocked", 3)
    pinned = Pod.objects.get(name="pinned")
    burst.refresh_from_db()
    assert pinned.phase == Pod.Phase.RUNNING and pinned.node_id == burst.pk
    assert burst.release_reason == "" and burst.phase == Node.Phase.READY and not burst.unschedulable
    event = pool.events.get(reason="ScaleDownBlocked")
    assert event.type == PoolEvent.Type.WARNING and "cancelled" in event.message
    assert 'pod algorithm/pinned is annotated cluster-autoscaler.kubernetes.io/safe-to-evict: "false"' in event.message, event.message
    activity = ScalingActivity.objects.get(pool=pool)
    assert activity.blocked and activity.reason == "ScaleDownBlocked"
    assert not pool.events.filter(reason__in=["ScaledDown", "NodeDraining"]).exists()
    another = submit(actors["member"], "another", gpus=2, cpu="1", duration="10h")  # the monthly nodes are full now
    scheduler_pass(now=LATER + timedelta(seconds=5))
    another.refresh_from_db()
    assert another.node_id == burst.pk  # uncordoned: the node takes pods again


def test_a_pod_that_may_go_does_not_cancel_the_scale_down(actors):
    """A pod that landed anyway but keeps no node (no annotation, no budget) is evicted by the
    drain, as Cluster Autoscaler drains what `GetPodsToMove` lets go."""
    pool, burst = scaling_down_pool(actors)
    real = autoscaler.drain_start

    def landed_first(p, node, **kwargs):
        run_on(submit(actors["member"], "late", gpus=4, cpu="1", duration="10h"), node, [2, 3, 4, 5])
        return real(p, node, **kwargs)

    with mock.patch.object(autoscaler, "drain_start", landed_first):
        assert pool_autoscale(pool_id=pool.pk, now=LATER).reason == "ScaledDown"
    late = Pod.objects.get(name="late")
    burst.refresh_from_db()
    assert burst.release_reason and late.phase == Pod.Phase.PENDING and late.reason == "Evicted"
