"""Cluster Autoscaler's unneeded-node rule in the live autoscaler (pools/selectors/burst_idle.py):
a Ready burst node that held no pod for the whole scale-down window goes, even where HPA's
arithmetic keeps the count (two full nodes of three are 66.7% used and ceil(3 x 66.7 / 85) = 3),
as the offline replay removes it (pools/simulation/scale_down.py). Before, the idle node stayed
and was paid for by the hour for ever."""

from __future__ import annotations

from datetime import timedelta

import pytest

from monitoring.models import NodeAgentState
from pools.controllers.autoscaler import pool_autoscale
from pools.controllers.scale_down import removable_burst_nodes
from pools.models import Node, ScalingActivity
from pools.models.pods import Pod
from tests.pools.autoscaler_helpers import SCALING, run_on
from tests.pools.pod_helpers import T0, pool_with_nodes, submit

pytestmark = pytest.mark.django_db
WINDOW = timedelta(minutes=30)  # the scale-down stabilization window of SCALING and of the defaults


def busy_pool_with_idle_burst_node(actors, scaling):
    """Two monthly nodes, each running an 8-GPU pod, and a Ready burst node beside them."""
    pool = pool_with_nodes(actors["lead"], node_labels={"gpu-class": "a100", "pool": "train"}, burst={"enabled": True, "maxNodes": 4},
                           **({"scaling": scaling} if scaling else {}))  # fmt: skip
    first = pool.nodes.first()
    burst = Node.objects.create(pool=pool, name="train-pool-a-burst", billing=Node.Billing.ON_DEMAND, phase=Node.Phase.READY, zone=pool.zone,
                                gpu_count=8, labels=first.labels, taints=first.taints, ready_at=T0)  # fmt: skip
    for i, node in enumerate(pool.nodes.filter(billing=Node.Billing.MONTHLY)):
        run_on(submit(actors["member"], f"busy-{i}", gpus=8, cpu="1", duration="10h"), node, list(range(8)))
    memory(pool, {"train-pool-a-0": 100, "train-pool-a-1": 100, burst.name: 0})
    return pool, burst


def memory(pool, percent: dict[str, int]) -> None:
    for node in pool.nodes.filter(name__in=percent):
        NodeAgentState.objects.update_or_create(node=node, defaults={"fb_used_mib": percent[node.name] * 8, "fb_total_mib": 800, "last_report_at": T0})


def leaving(burst: Node) -> bool:
    burst.refresh_from_db()
    return burst.release_reason != ""


@pytest.mark.parametrize("scaling", [SCALING, None], ids=["article", "defaults"])
def test_a_burst_node_idle_for_the_scale_down_window_goes_though_hpa_keeps_the_count(actors, scaling):
    pool, burst = busy_pool_with_idle_burst_node(actors, scaling)
    result = pool_autoscale(pool_id=pool.pk, now=T0 + WINDOW - timedelta(minutes=1))
    assert (result.current, result.desired) == (3, 3) and not leaving(burst)  # not idle for the whole window yet
    result = pool_autoscale(pool_id=pool.pk, now=T0 + WINDOW)
    assert (result.reason, result.current, result.desired) == ("ScaledDown", 3, 2) and leaving(burst)
    activity = ScalingActivity.objects.filter(pool=pool).latest("at")
    assert activity.message == "Scaled down from 3 to 2 node(s): 1 burst node(s) held no pod for the scale-down window (30m)"
    assert pool.events.get(reason="ScaledDown", node=burst).message.startswith(f"Autoscaler removes burst node {burst.name}: 1 burst node(s) held no pod")


def test_the_window_counts_from_when_its_last_pod_left(actors):
    pool, burst = busy_pool_with_idle_burst_node(actors, SCALING)
    done = submit(actors["member"], "short", gpus=1, cpu="1")
    run_on(done, burst, [0])
    Pod.objects.filter(pk=done.pk).update(phase=Pod.Phase.SUCCEEDED, finished_at=T0 + timedelta(minutes=20))
    pool_autoscale(pool_id=pool.pk, now=T0 + WINDOW + timedelta(minutes=19))
    assert not leaving(burst)
    pool_autoscale(pool_id=pool.pk, now=T0 + WINDOW + timedelta(minutes=20))
    assert leaving(burst)


def test_a_running_pod_keeps_the_node_but_a_daemonset_s_does_not(actors):
    pool, burst = busy_pool_with_idle_burst_node(actors, SCALING)
    agent = submit(actors["member"], "agent", cpu="100m")
    run_on(agent, burst, [])
    Pod.objects.filter(pk=agent.pk).update(document={"metadata": {"ownerReferences": [{"kind": "DaemonSet", "name": "agent", "controller": True}]}})
    worker = submit(actors["member"], "worker", gpus=1, cpu="1", duration="10h")
    run_on(worker, burst, [0])
    pool_autoscale(pool_id=pool.pk, now=T0 + 2 * WINDOW)
    assert not leaving(burst)
    Pod.objects.filter(pk=worker.pk).update(phase=Pod.Phase.SUCCEEDED, finished_at=T0 + 2 * WINDOW)
    pool_autoscale(pool_id=pool.pk, now=T0 + 3 * WINDOW)
    assert leaving(burst)


def test_only_a_node_idle_for_the_whole_window_goes_not_another_idle_one(actors):
    """Both burst nodes hold no pod and GPU memory keeps the count at 4 (ceil(4 x 70 / 85));
    the one a pod left 20 minutes in (named first, as the scale-down's order would otherwise
    pick it) stays until its own window is over."""
    pool, burst = busy_pool_with_idle_burst_node(actors, None)
    later = Node.objects.create(pool=pool, name="train-pool-a-aaa", billing=Node.Billing.ON_DEMAND, phase=Node.Phase.READY, zone=pool.zone,
                                gpu_count=8, labels=burst.labels, taints=burst.taints, ready_at=T0)  # fmt: skip
    done = submit(actors["member"], "short", gpus=1, cpu="1")
    run_on(done, later, [0])
    Pod.objects.filter(pk=done.pk).update(phase=Pod.Phase.SUCCEEDED, finished_at=T0 + timedelta(minutes=20))
    memory(pool, {later.name: 40, burst.name: 40})
    result = pool_autoscale(pool_id=pool.pk, now=T0 + WINDOW)
    assert (result.current, result.desired) == (4, 3) and leaving(burst) and not leaving(later)


def test_an_idle_node_a_pod_landed_on_since_the_view_was_read_is_kept(actors):
    """The acting pass decides on the idle nodes the pass's view read moments before; its plan,
    on fresh rows, removes only a node still empty rather than moving the pod that just landed."""
    pool, burst = busy_pool_with_idle_burst_node(actors, None)
    run_on(submit(actors["member"], "newcomer", gpus=1, cpu="1", duration="1h"), burst, [0])
    live = list(pool.nodes.select_related("pool__node_type", "pool__gpu_model", "pool"))
    plan = removable_burst_nodes([burst], live, limit=1, empty=True)
    assert plan.chosen == [] and plan.kept == {burst.name: "pod algorithm/newcomer runs on it now: it is not idle any more"}
