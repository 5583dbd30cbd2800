"""The live autoscaler: monthly baseline plus on-demand burst, fit simulation, history (seed D3, O4, G4)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command

from pools.controllers.autoscaler import autoscale_all, pool_autoscale
from pools.controllers.scheduler import scheduler_pass
from pools.models import Node, PoolEvent, ScalingActivity
from tests.pools.autoscaler_helpers import SCALING, memory_used
from tests.pools.pod_helpers import T0, pool_with_nodes, submit


@pytest.fixture
def pool(actors):
    """The article's pool with 2 monthly nodes labelled pool=train, bursting by up to 4."""
    return pool_with_nodes(
        actors["lead"], node_labels={"gpu-class": "a100", "pool": "train"}, scaling=SCALING, burst={"enabled": True, "maxNodes": 4}
    )


def burst_nodes(pool):
    return pool.nodes.filter(billing=Node.Billing.ON_DEMAND).exclude(phase="Terminated")


def fill_then_queue(actors, queued: int, *, first: int = 0) -> None:
    """Two 8-GPU pods fill the pool's two nodes, then `queued` more wait (named from `first`)."""
    if first == 0:
        for index in range(2):
            submit(actors["member"], f"busy-{index}", gpus=8)
        scheduler_pass(now=T0)
    for index in range(first, first + queued):
        submit(actors["member"], f"queued-{index}", gpus=8)


def test_hot_gpu_memory_and_queued_pods_that_fit_add_an_on_demand_node(actors, pool):
    fill_then_queue(actors, 3)
    memory_used(pool, 95)
    result = pool_autoscale(pool_id=pool.pk, now=T0)
    assert result.reason == "ScaledUp" and (result.current, result.desired) == (2, 3)
    added = burst_nodes(pool).get()
    assert added.phase == "Ordering" and added.order is None  # the lifecycle controller provisions it
    activity = ScalingActivity.objects.get(pool=pool)
    assert (activity.from_nodes, activity.to_nodes, activity.reason) == (2, 3, "ScaledUp")
    assert activity.metrics["gpu-memory"] == 95.0 and activity.metrics["queued_pods"] == 3.0
    assert pool.events.filter(reason="ScaledUp").exists()


def test_scale_up_is_rate_limited_by_the_policies(actors, pool):
    fill_then_queue(actors, 4)
    memory_used(pool, 99)
    pool_autoscale(pool_id=pool.pk, now=T0)
    pool_autoscale(pool_id=pool.pk, now=T0 + timedelta(seconds=10))  # same period: no second node
    assert burst_nodes(pool).count() == 1


def test_nothing_is_added_when_no_pending_pod_would_fit_a_new_node(actors, pool):
    """Cluster Autoscaler's rule: a node nothing can use is not added; the history says why."""
    for index in range(2):
        submit(actors["member"], f"busy-{index}", gpus=8)
    scheduler_pass(now=T0)
    submit(actors["member"], "too-big", gpus=16)
    submit(actors["member"], "no-toleration", gpus=1, tolerate=None)
    memory_used(pool, 99)
    result = pool_autoscale(pool_id=pool.pk, now=T0)
    assert result.reason == "NotTriggerScaleUp"
    assert not burst_nodes(pool).exists()
    activity = ScalingActivity.objects.get(pool=pool)
    assert activity.blocked and "Insufficient nvidia.com/gpu" in activity.message and "untolerated taint" in activity.message
    assert pool.events.get(reason="NotTriggerScaleUp").type == PoolEvent.Type.WARNING


def test_scale_down_waits_for_the_window_and_removes_only_burst_nodes(actors, pool):
    """T6: a short dip does not shrink the pool; after 30 quiet minutes one burst node goes."""
    burst = Node.objects.create(pool=pool, name="train-pool-a-burst", billing=Node.Billing.ON_DEMAND, phase="Ready", zone=pool.zone, gpu_count=8,
                                labels=pool.nodes.first().labels, taints=pool.nodes.first().taints, ready_at=T0)  # fmt: skip
    memory_used(pool, 90)
    pool_autoscale(pool_id=pool.pk, now=T0)  # busy: recommendation 4 stored
    memory_used(pool, 5)
    result = pool_autoscale(pool_id=pool.pk, now=T0 + timedelta(minutes=10))
    assert result.desired == 3 and result.reason in ("ScaleDownStabilized", "ScaleUpLimit", "TooManyReplicas", "DesiredWithinRange")
    burst.refresh_from_db()
    assert burst.release_reason == ""
    result = pool_autoscale(pool_id=pool.pk, now=T0 + timedelta(minutes=31))
    assert result.reason == "ScaledDown" and result.desired == 2
    burst.refresh_from_db()
    assert burst.release_reason == "ScaledIn" and burst.phase == "Terminated"  # empty: released at once
    assert pool.nodes.filter(billing="monthly", release_reason="").count() == 2
    result = pool_autoscale(pool_id=pool.pk, now=T0 + timedelta(minutes=40))
    assert result.desired == 2  # monthly nodes are the floor: never removed by the autoscaler


def test_a_burst_node_whose_pods_fit_nowhere_else_is_kept(actors, pool):
    burst = Node.objects.create(pool=pool, name="train-pool-a-burst", billing=Node.Billing.ON_DEMAND, phase="Ready", zone=pool.zone, gpu_count=8,
                                labels=pool.nodes.first().labels, taints=pool.nodes.first().taints, ready_at=T0)  # fmt: skip
    for index in range(3):
        submit(actors["member"], f"busy-{index}", gpus=8)
    scheduler_pass(now=T0)
    memory_used(pool, 1)
    result = pool_autoscale(pool_id=pool.pk, now=T0 + timedelta(hours=1))
    assert result.reason == "ScaleDownBlocked"
    burst.refresh_from_db()
    assert burst.release_reason == ""


def test_a_scaling_block_autoscales_unless_burst_is_turned_off(actors):
    """The article's block as written autoscales (issue 20 item 4); `burst.enabled: false` is
    the explicit override; a pool with neither is left alone."""
    written = pool_with_nodes(actors["lead"], name="written", scaling=SCALING)
    off = pool_with_nodes(actors["lead"], name="off", scaling=SCALING, burst={"enabled": False})
    plain = pool_with_nodes(actors["lead"], name="plain")
    assert pool_autoscale(pool_id=written.pk, now=T0).reason != "NotAutoscaled"
    assert pool_autoscale(pool_id=off.pk, now=T0).reason == "NotAutoscaled"
    assert pool_autoscale(pool_id=plain.pk, now=T0).reason == "NotAutoscaled"


def test_burst_without_a_scaling_block_scales_by_the_defaults(actors):
    """What the pool form writes (it has a burst box, no scaling fields): the autoscaler follows
    the defaults of an empty `scaling: {}` (D3/O4: GPU memory > 85% and > 10 queued pods)."""
    pool = pool_with_nodes(actors["lead"], node_labels={"gpu-class": "a100", "pool": "train"}, burst={"enabled": True, "maxNodes": 4})
    fill_then_queue(actors, 5)
    memory_used(pool, 95)
    result = pool_autoscale(pool_id=pool.pk, now=T0)
    assert result.reason != "NotAutoscaled" and not burst_nodes(pool).exists()  # hot, but too few queued
    fill_then_queue(actors, 25, first=5)
    result = pool_autoscale(pool_id=pool.pk, now=T0 + timedelta(minutes=6))  # after the 5-minute window
    assert result.reason == "ScaledUp" and result.desired > 2
    assert burst_nodes(pool).exists()


def test_a_pass_is_idempotent_and_runs_from_the_command(actors, pool):
    memory_used(pool, 50)
    first = autoscale_all(now=T0)
    second = autoscale_all(now=T0)
    assert [r.desired for r in first] == [r.desired for r in second] == [2]
    call_command("autoscale", "--once", "--now", (T0 + timedelta(minutes=1)).isoformat())
    assert not burst_nodes(pool).exists()


def test_the_autoscaler_is_scheduled_by_a_data_migration(db):
    from django_q.models import Schedule

    assert Schedule.objects.get(name="pools.autoscale_all").func == "pools.tasks.autoscale_all"


def test_the_pool_page_shows_the_scaling_history(client, actors, pool):
    for index in range(2):
        submit(actors["member"], f"busy-{index}", gpus=8)
    scheduler_pass(now=T0)
    submit(actors["member"], "queued", gpus=8)
    memory_used(pool, 95)
    pool_autoscale(pool_id=pool.pk, now=T0)
    client.force_login(actors["member"])
    html = client.get(f"/pools/{pool.name}/").content.decode()
    assert "Scaling history" in html and "2 → 3" in html and "ScaledUp" in html


def test_the_scaling_history_shows_a_missing_metric_in_words_and_numbers_without_a_pointless_point(client, actors, pool):
    """A metric no node agent reported is stored as null: it showed as Python's `None`."""
    ScalingActivity.objects.create(pool=pool, at=T0, from_nodes=2, to_nodes=2, reason="ScaleUpLimited", message="m", blocked=True,
                                   metrics={"gpu-memory": None, "queued_pods": 12.0, "load": 85.333, "zero": -0.0001})  # fmt: skip
    client.force_login(actors["member"])
    html = client.get(f"/pools/{pool.name}/").content.decode()
    for shown in ("gpu-memory=no report ", "queued_pods=12 ", "load=85.33 ", "zero=0 "):  # in any order: jsonb keeps its own
        assert shown in html, shown
    assert "=None" not in html and "=12.0" not in html


def test_the_task_books_its_next_run_thirty_seconds_later(db):
    from django_q.models import Schedule

    from pools import tasks

    tasks.autoscale_all()
    soon = Schedule.objects.get(name="pools.autoscale_soon")
    assert soon.schedule_type == Schedule.ONCE and soon.func == "pools.tasks.autoscale_all"


def test_scale_down_first_moves_a_burst_nodes_pods_onto_monthly_capacity(actors, pool):
    """Issue 5 §4: monthly capacity is paid already, so the burst node's pods move there."""
    from pools.models.pods import Pod

    burst = Node.objects.create(pool=pool, name="train-pool-a-burst", billing=Node.Billing.ON_DEMAND, phase="Ready", zone=pool.zone, gpu_count=8,
                                labels=pool.nodes.first().labels, taints=pool.nodes.first().taints, ready_at=T0)  # fmt: skip
    pod = submit(actors["member"], "small", gpus=2)
    Pod.objects.filter(pk=pod.pk).update(phase="Running", node=burst, gpu_indices=[0, 1], started_at=T0)
    memory_used(pool, 5)
    result = pool_autoscale(pool_id=pool.pk, now=T0 + timedelta(hours=1))
    assert result.reason == "ScaledDown"
    pod.refresh_from_db()
    burst.refresh_from_db()
    assert pod.phase == "Running" and pod.node.billing == "monthly" and pod.reason == "Repacked"
    assert burst.phase == "Terminated"  # empty after the move: released without evicting anything
    assert pool.events.filter(reason="Repacked").exists() and not pool.events.filter(reason="NodeDraining").exists()


def test_a_pool_tries_only_the_shapes_that_could_fit_its_nodes_and_finds_what_trying_all_finds():
    """Issue 9: `Shapes.fitting` lists each shape under one pair of its nodeSelector and under
    what its tolerations tolerate, so a pool filters only the shapes that select none of or one
    of its node labels and tolerate its first hard taint; the groups it returns are those
    `filter_node` passes when every shape is tried, in the order first seen."""
    from itertools import product

    from pools.core.scale_up import Shapes
    from pools.core.scheduling.nodes import NodeState, Pod, Taint, Toleration, filter_node

    def tolerating(*pairs):
        return tuple(Toleration(k, "Exists" if v is None else "Equal", v or "", e) for k, v, e in pairs)

    a, b = ("pool", "a", "NoSchedule"), ("pool", "b", "NoSchedule")
    pods = [
        Pod("q/any-0", gpu_count=1, tolerations=tolerating(a)),
        Pod("q/pin-a-0", gpu_count=2, node_selector={"pool": "a"}, tolerations=tolerating(a)),
        Pod("q/pin-b-0", gpu_count=2, node_selector={"pool": "b"}, tolerations=tolerating(b)),
        Pod("q/any-1", gpu_count=1, tolerations=tolerating(a)),
        Pod("q/two-pairs", gpu_count=1, node_selector={"pool": "a", "zone": "z2"}, tolerations=tolerating(a, b)),
        Pod("q/big", gpu_count=16, node_selector={"pool": "a"}, tolerations=tolerating(a)),
        Pod("q/untolerating", gpu_count=1, node_selector={"pool": "a"}),
        Pod("q/exists", gpu_count=1, tolerations=tolerating(("pool", None, ""))),
        Pod("q/everything", gpu_count=1, tolerations=tolerating(("", None, ""))),
        Pod("q/wrong-effect", gpu_count=1, tolerations=tolerating(("pool", "a", "NoExecute"))),
        Pod("q/pin-a-1", gpu_count=2, node_selector={"pool": "a"}, tolerations=tolerating(a)),
    ]
    shapes = Shapes()
    for pod in pods:
        shapes.add(pod)
    assert len(shapes.groups) == 9  # the replicas of any-* and pin-a-* share a shape

    def node(labels, taints):
        return NodeState(name="t", cpu_milli=96_000, memory_mib=1_000_000, gpu_count=8, gpu_model="A100", labels=labels, taints=taints)

    labels = ({"pool": "a", "zone": "z1"}, {"pool": "a", "zone": "z2"}, {"pool": "b"}, {})
    taints = ((), (Taint(*a),), (Taint(*b),), (Taint("pool", "a", "PreferNoSchedule"), Taint(*b)), (Taint("gpu", "x", "NoExecute"),))
    for template in (node(ls, ts) for ls, ts in product(labels, taints)):
        assert shapes.fitting(template) == [group for group in shapes.groups.values() if filter_node(group[0], template) is None]
    names = [[p.name for p in group] for group in shapes.fitting(node({"pool": "a", "zone": "z2"}, (Taint(*a),)))]
    assert names == [["q/any-0", "q/any-1"], ["q/pin-a-0", "q/pin-a-1"], ["q/two-pairs"], ["q/exists"], ["q/everything"]]


def test_the_pool_pages_say_what_the_pool_waits_for_in_words(client, actors, pool):
    """pendingReason is "Reason: message; Reason: message": the pages lead with the words."""
    from pools.models import GpuNodePool

    GpuNodePool.objects.filter(pk=pool.pk).update(pending_reason="OrderPending: order #3 awaits approval by a platform admin; WaitingForNodes: 1/2 Ready, 1 provisioning")
    client.force_login(actors["member"])
    detail = client.get(f"/pools/{pool.name}/").content.decode()
    assert "<li>order #3 awaits approval by a platform admin <span class=\"muted\">(pendingReason OrderPending)</span></li>" in detail
    assert "<li>1/2 Ready, 1 provisioning <span class=\"muted\">(pendingReason WaitingForNodes)</span></li>" in detail
    listed = client.get("/pools/").content.decode()
    assert "<td>order #3 awaits approval by a platform admin; 1/2 Ready, 1 provisioning</td>" in listed
