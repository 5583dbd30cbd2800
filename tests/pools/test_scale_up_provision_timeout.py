"""A burst node that is not Ready within the max provision time is given up and its pool backed
off, so the team's other pools take the Pending pods (Cluster Autoscaler's
`--max-node-provision-time` and node group backoff; Karpenter's registration TTL).

Before: a pod waited forever on a pool whose zone was out of stock, its Ordering burst node
counted as upcoming capacity on every pass, while a sibling pool with stock never scaled up."""

from __future__ import annotations

from datetime import timedelta

import pytest

from billing.metering import node_usage_collect
from pools.controllers.autoscaler import autoscale_all
from pools.controllers.lifecycle import pool_reconcile, reconcile_all
from pools.controllers.scheduler import scheduler_pass
from pools.core import lifecycle as rules
from pools.core import scale_up as scale_up_core
from pools.models import Node, PoolEvent
from pools.models.cloud import SimMachine
from pools.models.pods import Pod
from pools.providers import get_cloud_provider, simulated
from pools.providers.base import Machine, MachineRequest
from tests.pools.autoscaler_helpers import SCALING, memory_used
from tests.pools.pod_helpers import T0, pool_with_nodes, submit

pytestmark = pytest.mark.django_db

A, B = "cn-east-2a", "cn-east-2b"
M = timedelta(minutes=1)


def two_pools(actors):
    """pool-a in cn-east-2a (out of stock), then pool-b in cn-east-2b (stock): both of the team,
    both able to take an 8-GPU pod, each with one busy Ready node; one pod queued."""
    simulated.stock_set(zone=A, gpu_model="A100_80G", gpus=0)
    simulated.stock_set(zone=B, gpu_model="A100_80G", gpus=64)
    kw = dict(node_labels={"gpu-class": "a100", "pool": "train"}, scaling=SCALING, burst={"enabled": True, "maxNodes": 4}, nodes=1)
    a = pool_with_nodes(actors["lead"], name="pool-a", **kw)
    b = pool_with_nodes(actors["lead"], name="pool-b", region=B, **kw)
    for i in range(2):
        submit(actors["member"], f"busy-{i}", gpus=8, cpu="1", duration="10h")
    scheduler_pass(now=T0)
    submit(actors["member"], "queued-0", gpus=8, duration="10h")
    return a, b


def minute(pools, now, *, reconcile=True):
    """A minute of the scheduled tasks: autoscale, reconcile (only the steps the rows call for),
    schedule; the autoscaler's reasons by pool."""
    for p in pools:
        memory_used(p, 95)
    results = {r.pool: r.reason for r in autoscale_all(now=now)}
    if reconcile:
        reconcile_all(now=now)
    scheduler_pass(now=now)
    return results


def burst(pool):
    return Node.objects.filter(pool=pool, billing=Node.Billing.ON_DEMAND)


def test_a_pod_waiting_on_an_out_of_stock_pool_goes_to_a_sibling_pool_with_stock(actors):
    a, b = two_pools(actors)
    reasons = [minute((a, b), T0 + i * M) for i in range(25)]
    assert reasons[0] == {"pool-a": "ScaledUp", "pool-b": "PodsFitUpcomingOrFreeCapacity"}
    assert all(r["pool-b"] == "PodsFitUpcomingOrFreeCapacity" for r in reasons[1:15])  # the node may still come
    # 15 minutes after it was requested, pool-a's node is no longer upcoming: pool-a backs off, pool-b buys.
    assert reasons[15] == {"pool-a": "ScaleUpBackoff", "pool-b": "ScaledUp"}
    pod = Pod.objects.get(name="queued-0")
    assert pod.phase == "Running" and pod.node.pool == b

    given_up = burst(a).get()
    assert (given_up.phase, given_up.release_reason) == (Node.Phase.TERMINATED, rules.PROVISION_TIMEOUT)
    assert given_up.provider_id == "" and given_up.terminated_at == given_up.created_at  # nothing was delivered
    timeout = PoolEvent.objects.get(reason="ProvisionTimeout")
    assert timeout.node == given_up and timeout.type == "Warning" and timeout.first_timestamp == T0 + 15 * M
    assert f"Gave up on-demand node {given_up.name}: not Ready 15m0s after it was requested" in timeout.message
    assert f"OutOfStock in {A}" in timeout.message and "no machine was delivered: nothing is billed for it" in timeout.message
    backoff = PoolEvent.objects.get(reason="ScaleUpBackoff")
    assert backoff.pool == a and backoff.type == "Warning"
    assert "Scale-up of pool-a backed off for 5m0s, until 2026-12-01 08:20 UTC" in backoff.message
    # Nothing more is bought in pool-a's zone (the pod runs), and no money for the node never delivered.
    assert burst(a).count() == 1 and burst(b).count() == 1
    billed = [name for hour in (T0, T0 + 60 * M) for record in node_usage_collect(hour=hour).records for name in record.nodes_billed]
    assert given_up.name not in billed and burst(b).get().name in billed


def test_an_overdue_burst_node_is_not_upcoming_even_before_the_lifecycle_gives_it_up(actors):
    """The autoscaler runs before the lifecycle: a node past the max provision time neither
    holds the pod nor lets its own pool buy another one in the same out-of-stock zone."""
    a, b = two_pools(actors)
    minute((a, b), T0, reconcile=False)
    assert burst(a).get().phase == Node.Phase.ORDERING
    assert minute((a, b), T0 + 14 * M, reconcile=False) == {"pool-a": "PodsFitUpcomingOrFreeCapacity", "pool-b": "PodsFitUpcomingOrFreeCapacity"}
    assert minute((a, b), T0 + 15 * M, reconcile=False) == {"pool-a": "ScaleUpBackoff", "pool-b": "ScaledUp"}
    assert burst(a).count() == burst(b).count() == 1


def test_the_max_provision_time_is_a_setting(actors, settings):
    settings.EBCLOUD_MAX_NODE_PROVISION_SECONDS = 30 * 60
    a, b = two_pools(actors)
    reasons = [minute((a, b), T0 + i * M) for i in range(31)]
    assert all(r["pool-b"] == "PodsFitUpcomingOrFreeCapacity" for r in reasons[:30])
    assert reasons[30]["pool-b"] == "ScaledUp"
    assert "not Ready 30m0s after it was requested" in PoolEvent.objects.get(reason="ProvisionTimeout").message


def test_a_delivered_machine_that_never_becomes_ready_is_released_and_billed_until_then(actors, settings):
    """A machine the cloud delivered but that boots for an hour: given up at 15 minutes, its
    machine released (the stock is back) and the node billed for the time it existed, as any
    on-demand node."""
    settings.EBCLOUD_SIM_STEP_SECONDS = {**settings.EBCLOUD_SIM_STEP_SECONDS, "boot": 3600}
    a, b = two_pools(actors)
    simulated.stock_set(zone=A, gpu_model="A100_80G", gpus=8)  # one machine in pool-a's zone
    for i in range(16):
        minute((a, b), T0 + i * M)
    node = burst(a).get()
    assert (node.phase, node.release_reason, node.terminated_at) == (Node.Phase.TERMINATED, rules.PROVISION_TIMEOUT, T0 + 15 * M)
    machine = SimMachine.objects.get(provider_id=node.provider_id)
    assert machine.status == SimMachine.Status.RELEASED and machine.released_at == T0 + 15 * M
    assert f"machine {node.provider_id} released" in PoolEvent.objects.get(reason="ProvisionTimeout").message
    assert node.name in [name for record in node_usage_collect(hour=T0).records for name in record.nodes_billed]
    assert burst(b).count() == 1


def test_a_monthly_node_is_bought_capacity_and_keeps_being_retried(actors):
    """Only on-demand burst nodes are given up: a monthly node out of stock for an hour keeps
    retrying with backoff and stays upcoming."""
    simulated.stock_set(zone=A, gpu_model="A100_80G", gpus=0)
    pool = pool_with_nodes(actors["lead"], name="pool-a", nodes=0)
    node = Node.objects.create(pool=pool, name="pool-a-monthly", billing=Node.Billing.MONTHLY, phase=Node.Phase.ORDERING, zone=pool.zone, gpu_count=8, created_at=T0)
    for i in range(0, 61, 5):
        pool_reconcile(pool_id=pool.pk, now=T0 + i * M)
    node.refresh_from_db()
    assert (node.phase, node.release_reason) == (Node.Phase.ORDERING, "") and node.last_error.startswith("OutOfStock")
    assert not PoolEvent.objects.filter(reason__in=["ProvisionTimeout", "ScaleUpBackoff"]).exists()


def test_the_backoff_is_cluster_autoscalers():
    """5 minutes, doubled for each failure within 3 hours of the one before, at most 30 minutes;
    a failure over 3 hours after the last starts again at 5 minutes."""
    scale_up_backoff = scale_up_core.scale_up_backoff
    assert scale_up_backoff([]) is None
    failures, durations = [], []
    for i in range(6):
        failures.append(T0 + i * 40 * M)
        durations.append(scale_up_backoff(failures)[1])
    assert durations == [timedelta(minutes=m) for m in (5, 10, 20, 30, 30, 30)]
    assert scale_up_backoff(failures[::-1]) == (failures[-1] + 30 * M, 30 * M)  # in any order
    assert scale_up_backoff([*failures, failures[-1] + 181 * M]) == (failures[-1] + 186 * M, 5 * M)


def test_a_machine_ordered_by_a_killed_pass_is_found_by_its_client_token_and_released(actors):
    """A pass killed after ordering, before it wrote the node's provider_id (`_place`), left a
    machine at the cloud under the node's client token (its name): giving the node up finds it
    there (`machine_by_token`, read only: nothing is ordered) and releases it; the node, whose
    machine was never recorded, is billed nothing."""
    simulated.stock_set(zone=A, gpu_model="A100_80G", gpus=8)
    pool = pool_with_nodes(actors["lead"], name="pool-a", nodes=0)
    node = Node.objects.create(pool=pool, name="pool-a-burst-0", billing=Node.Billing.ON_DEMAND, phase=Node.Phase.ORDERING,
                               zone=pool.zone, gpu_count=8, created_at=T0, step_due_at=T0 + 60 * M)  # fmt: skip
    cloud = get_cloud_provider()
    assert cloud.machine_by_token(client_token=node.name) is None
    request = MachineRequest(client_token=node.name, zone=A, gpu_model="A100_80G", node_type=pool.node_type.name, billing="on_demand", image="img")
    machine = cloud.place_order(request=request, now=T0 + M).provider_id  # the killed pass's order
    assert cloud.machine_by_token(client_token=node.name) == Machine(provider_id=machine, zone=A, created=False)
    pool_reconcile(pool_id=pool.pk, now=T0 + 15 * M)
    node.refresh_from_db()
    assert (node.phase, node.release_reason, node.provider_id, node.terminated_at) == (Node.Phase.TERMINATED, rules.PROVISION_TIMEOUT, "", T0)
    assert SimMachine.objects.get().status == SimMachine.Status.RELEASED and SimMachine.objects.count() == 1
    assert f"machine {machine}" in PoolEvent.objects.get(reason="ProvisionTimeout").message
