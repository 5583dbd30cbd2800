"""A pool that stops bursting (`spec.burst.enabled: false`, or its `scaling` block removed) gives
its on-demand burst nodes back, as Cluster Autoscaler does when a node group's max is lowered
below its size: down to the new bound (here the monthly baseline), by the usual scale-down
rules (a pod annotated safe-to-evict "false", a budget that allows no eviction, a pod that fits
on no other node keeps its node; the others' pods move), without the scale-down window (the
team asked for it), and never a monthly node."""

from __future__ import annotations

from datetime import timedelta

import pytest

from billing.hours import hour_overlap
from billing.metering import node_usage_collect
from pools.controllers.autoscaler import autoscale_all, pool_autoscale
from pools.controllers.scheduler import scheduler_pass
from pools.core import lifecycle as rules
from pools.models import Node, PoolEvent, ScalingActivity
from pools.models.cloud import SimMachine
from pools.models.pods import Pod
from pools.providers import get_cloud_provider, simulated
from pools.providers.base import MachineRequest
from pools.services import pods as pod_services
from pools.services.pools import pool_patch
from tests.pools.autoscaler_helpers import SCALING, memory_used, run_on
from tests.pools.pod_helpers import T0, pod_document, pool_with_nodes, submit

pytestmark = pytest.mark.django_db


def monthly_untouched(pool) -> bool:
    return set(pool.nodes.filter(billing=Node.Billing.MONTHLY).values_list("phase", "release_reason")) == {(Node.Phase.READY, "")}


def burst_node(pool, name: str) -> Node:
    first = pool.nodes.filter(billing=Node.Billing.MONTHLY).first()
    return Node.objects.create(pool=pool, name=name, billing=Node.Billing.ON_DEMAND, phase=Node.Phase.READY, zone=pool.zone,
                               gpu_count=8, labels=first.labels, taints=first.taints, ready_at=T0)  # fmt: skip


def test_turning_burst_off_gives_the_burst_nodes_back_at_once(actors):
    """A minute after a scale-up, GPU memory still hot: with burst on the pool keeps its node;
    turned off, the pass gives it back at once (no 30-minute window), says why once, and leaves
    the monthly nodes alone. The next pass has nothing left to do."""
    pool = pool_with_nodes(actors["lead"], node_labels={"gpu-class": "a100", "pool": "train"}, scaling=SCALING, burst={"enabled": True, "maxNodes": 4})
    for index in range(2):
        submit(actors["member"], f"busy-{index}", gpus=8, cpu="1", duration="10h")
    scheduler_pass(now=T0)
    submit(actors["member"], "queued-0", gpus=8, cpu="1", duration="10h")
    memory_used(pool, 95)
    assert [r.reason for r in autoscale_all(now=T0)] == ["ScaledUp"]
    bought = pool.nodes.get(billing=Node.Billing.ON_DEMAND)
    Node.objects.filter(pk=bought.pk).update(phase=Node.Phase.READY, ready_at=T0)
    Pod.objects.filter(name="queued-0").delete()  # no longer wanted: no Pending pod waits for the node
    a_minute = T0 + timedelta(minutes=1)
    assert autoscale_all(now=a_minute)[0].reason != "ScaledDown"  # still bursting: kept
    pool_patch(user=actors["lead"], pool=pool, patch={"spec": {"burst": {"enabled": False}}}, now=a_minute)
    [result] = autoscale_all(now=a_minute + timedelta(seconds=10))
    assert (result.reason, result.current, result.desired) == ("ScaledDown", 3, 2)
    bought.refresh_from_db()
    assert bought.release_reason == rules.SCALED_IN and bought.unschedulable
    assert monthly_untouched(pool)
    [event] = pool.events.filter(reason="ScaledDown")
    assert "burst is off" in event.message and "spec.burst.enabled" in event.message, event.message
    assert ScalingActivity.objects.filter(pool=pool).latest("at", "id").reason == "ScaledDown"
    [again] = autoscale_all(now=a_minute + timedelta(minutes=1))
    assert again.reason == "NotAutoscaled"
    assert pool.events.filter(reason="ScaledDown").count() == 1 and not pool.events.filter(reason="ScaleDownBlocked").exists()


def test_removing_the_scaling_block_sheds_the_burst_nodes_by_the_scale_down_rules(actors):
    """Without a `scaling` block nor `burst.enabled` the pool no longer bursts: of its three
    burst nodes the empty one goes, the one whose pod fits a monthly node goes once the pod is
    moved there, and the one with a pod annotated safe-to-evict "false" stays, said once as
    ScaleDownBlocked; monthly nodes are never shed, idle as they are."""
    pool = pool_with_nodes(actors["lead"], node_labels={"gpu-class": "a100", "pool": "train"}, scaling=SCALING)
    empty, movable, pinned_node = (burst_node(pool, f"train-pool-a-burst-{index}") for index in range(3))
    moving = submit(actors["member"], "moving", gpus=2, cpu="1", duration="10h")
    run_on(moving, movable, [0, 1])
    document = pod_document("pinned", gpus=2, cpu="1", duration="10h")
    document["metadata"]["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"] = "false"
    pinned = pod_services.pod_create(user=actors["member"], document=document, now=T0)
    run_on(pinned, pinned_node, [0, 1])
    memory_used(pool, 90)
    pool_patch(user=actors["lead"], pool=pool, patch={"spec": {"scaling": None}}, now=T0)
    result = pool_autoscale(pool_id=pool.pk, now=T0 + timedelta(minutes=1))
    assert (result.reason, result.current, result.desired) == ("ScaledDown", 5, 3)
    assert set(Node.objects.filter(release_reason=rules.SCALED_IN).values_list("name", flat=True)) == {empty.name, movable.name}
    moving.refresh_from_db()
    assert moving.phase == Pod.Phase.RUNNING and moving.node.billing == Node.Billing.MONTHLY and moving.reason == "Repacked"
    assert monthly_untouched(pool)
    for minutes in (2, 3):
        assert pool_autoscale(pool_id=pool.pk, now=T0 + timedelta(minutes=minutes)).reason == "ScaleDownBlocked"
    blocked = pool.events.get(reason="ScaleDownBlocked")
    assert blocked.count == 1 and blocked.type == PoolEvent.Type.WARNING
    assert f'{pinned_node.name}: pod algorithm/pinned is annotated cluster-autoscaler.kubernetes.io/safe-to-evict: "false"' in blocked.message
    pinned.refresh_from_db()
    pinned_node.refresh_from_db()
    assert pinned.node_id == pinned_node.pk and pinned_node.release_reason == "" and not pinned_node.unschedulable


def test_a_pool_that_never_burst_is_left_alone(actors):
    """No burst node, no scaling: nothing to give back, nothing recorded."""
    pool = pool_with_nodes(actors["lead"], name="plain", burst={"enabled": False})
    assert pool_autoscale(pool_id=pool.pk, now=T0).reason == "NotAutoscaled"
    assert [r.reason for r in autoscale_all(now=T0)] == ["NotAutoscaled"]
    assert not ScalingActivity.objects.exists() and monthly_untouched(pool)


def ordered(pool, node: Node, at) -> str:
    """The simulated cloud's machine for `node`, ordered under its client token (its name)."""
    simulated.stock_set(zone=pool.zone.name, gpu_model=pool.gpu_model.name, gpus=64)
    request = MachineRequest(client_token=node.name, zone=pool.zone.name, gpu_model=pool.gpu_model.name,
                             node_type=pool.node_type.name, billing=Node.Billing.ON_DEMAND, image="ubuntu-22.04-cuda-12.4")  # fmt: skip
    return get_cloud_provider().place_order(request=request, now=at).provider_id


def test_burst_nodes_not_ready_yet_are_cancelled_at_once_and_billed_only_for_their_machine(actors):
    """The scale-down's rules never take a node not Ready (a Pending pod may wait for it): a
    pool that stops bursting cancels such nodes at once instead, as CA's lowered target size
    deletes unregistered nodes. One still Ordering (no machine) costs nothing; one Provisioning
    has its machine released and is billed from when the machine came to now; one whose pass
    was killed after ordering, before recording the machine, has that machine (found by its
    client token) released too. Nothing failed: no ScaleUpBackoff; no replacement."""
    pool = pool_with_nodes(actors["lead"], node_labels={"gpu-class": "a100", "pool": "train"}, scaling=SCALING, burst={"enabled": True, "maxNodes": 4})
    requested, machine_came = T0 + timedelta(minutes=1), T0 + timedelta(minutes=2)
    ordering, provisioning, interrupted = (
        Node.objects.create(pool=pool, name=f"train-pool-a-burst-{index}", billing=Node.Billing.ON_DEMAND, phase=Node.Phase.ORDERING,
                            zone=pool.zone, gpu_count=8, created_at=requested)  # fmt: skip
        for index in range(3)
    )
    machine = ordered(pool, provisioning, machine_came)
    Node.objects.filter(pk=provisioning.pk).update(phase=Node.Phase.PROVISIONING, step=rules.BOOT, provider_id=machine, machine_at=machine_came)
    lost = ordered(pool, interrupted, machine_came)  # the pass was killed before writing provider_id
    off = T0 + timedelta(minutes=5)
    pool_patch(user=actors["lead"], pool=pool, patch={"spec": {"burst": {"enabled": False}}}, now=off)
    [result] = autoscale_all(now=off)
    assert (result.reason, result.current, result.desired) == ("ScaledDown", 5, 2)
    nodes = {n.name: n for n in pool.nodes.filter(billing=Node.Billing.ON_DEMAND)}
    assert len(nodes) == 3  # none replaced
    for node in nodes.values():
        assert (node.phase, node.release_reason) == (Node.Phase.TERMINATED, rules.SCALED_IN), node.name
    assert nodes[ordering.name].terminated_at == requested and nodes[ordering.name].machine_at is None
    assert nodes[provisioning.name].terminated_at == off
    assert set(SimMachine.objects.values_list("provider_id", "status", "released_at")) == {
        (machine, SimMachine.Status.RELEASED, off), (lost, SimMachine.Status.RELEASED, off)
    }
    events = {e.node.name: e.message for e in pool.events.filter(reason="ScaledDown")}
    assert set(events) == set(nodes) and all("burst is off" in m for m in events.values()), events
    assert "nothing is billed" in events[ordering.name] and f"machine {machine} released, billed until now" in events[provisioning.name]
    assert f"machine {lost}" in events[interrupted.name]
    assert not pool.events.filter(reason__in=("ScaleUpBackoff", rules.PROVISION_TIMEOUT, "ScaleDownBlocked")).exists()
    assert monthly_untouched(pool)
    billed = {name: r.quantity for r in node_usage_collect(hour=T0).records for name in r.nodes_billed if name in nodes}
    assert billed == {provisioning.name: hour_overlap(machine_came, off, T0)}, billed
    assert autoscale_all(now=off + timedelta(minutes=1))[0].reason == "NotAutoscaled"
