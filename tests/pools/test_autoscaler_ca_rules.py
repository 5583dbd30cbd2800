"""The live autoscaler scales up as Cluster Autoscaler does (kubernetes/autoscaler,
cluster-autoscaler/FAQ.md): pods that fit an upcoming node or the free room of a Ready node buy
nothing, expendable pods buy nothing, one pod buys one node across the team's pools, the GPU
quotas cap what is bought, and a pool with nothing pending says nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from pools.controllers import lifecycle
from pools.controllers.autoscaler import autoscale_all, pool_autoscale
from pools.controllers.scheduler import scheduler_pass
from pools.core import lifecycle as rules
from pools.models import Node, PoolEvent, Quota, ScalingActivity
from pools.models.cloud import SimClusterNode
from pools.providers.simulated_cluster import SimulatedCluster
from tests.pools.autoscaler_helpers import SCALING, memory_used
from tests.pools.pod_helpers import T0, pool_with_nodes, submit

# Asks for a node per queued pod at once (target 1), so a quota can cap a scale-up of several.
EAGER = {**SCALING, "default": {**SCALING["default"], "metrics": [{"type": "Pods", "pods": "queued_pods", "target": 1}]},
         "scaleUp": {"stabilizationWindow": "0s", "policies": [{"type": "Pods", "value": 4, "periodSeconds": 60}]}}  # fmt: skip


def train_pool(actors, name="train-pool-a", **spec):
    """The article's pool: two Ready monthly nodes labelled pool=train, bursting by up to 4."""
    return pool_with_nodes(actors["lead"], name=name, node_labels={"gpu-class": "a100", "pool": "train"}, **{"scaling": SCALING, "burst": {"enabled": True, "maxNodes": 4}, **spec})


def burst_nodes(pool=None):
    nodes = Node.objects.filter(billing=Node.Billing.ON_DEMAND).exclude(phase=Node.Phase.TERMINATED)
    return nodes.filter(pool=pool) if pool is not None else nodes


def fill(actors, nodes: int = 2, *, gpus: int = 8) -> None:
    """Running pods of `gpus` GPUs on the pools' `nodes` nodes (one each)."""
    for index in range(nodes):
        submit(actors["member"], f"busy-{index}", gpus=gpus, cpu="1", duration="10h")
    scheduler_pass(now=T0)


def test_a_pending_pod_waits_for_the_node_being_provisioned_instead_of_buying_another(actors):
    """One pod needs one node: while that node is ordered and boots (several minutes), later
    passes pack the pod onto it and buy nothing more (CA's upcoming nodes)."""
    pool = train_pool(actors)
    fill(actors)
    submit(actors["member"], "queued-0", gpus=8)
    memory_used(pool, 95)
    assert pool_autoscale(pool_id=pool.pk, now=T0).reason == "ScaledUp"
    for minutes in range(2, 13, 2):
        result = pool_autoscale(pool_id=pool.pk, now=T0 + timedelta(minutes=minutes))
        assert result.desired == result.current == 3, (minutes, result)
    assert burst_nodes(pool).count() == 1
    assert burst_nodes(pool).get().phase == Node.Phase.ORDERING
    assert list(ScalingActivity.objects.values_list("reason", flat=True)) == ["ScaledUp"]  # nothing to warn about meanwhile


def test_a_node_that_failed_for_good_is_no_longer_upcoming(actors):
    pool = train_pool(actors)
    fill(actors)
    submit(actors["member"], "queued-0", gpus=8)
    memory_used(pool, 95)
    pool_autoscale(pool_id=pool.pk, now=T0)
    burst_nodes(pool).update(phase=Node.Phase.TERMINATED, release_reason=rules.PROVISIONING_FAILED)
    result = pool_autoscale(pool_id=pool.pk, now=T0 + timedelta(minutes=2))
    assert result.reason == "ScaledUp" and burst_nodes(pool).count() == 1


def test_b_pending_pods_that_fit_the_free_room_of_ready_nodes_buy_nothing(actors):
    """Two one-GPU pods arrive between two scheduler passes while each node has a GPU free: the
    next pass places them (CA's filter-out-schedulable), so no node is bought and nothing warns."""
    pool = train_pool(actors)
    fill(actors, gpus=7)
    memory_used(pool, 90)
    for index in range(2):
        submit(actors["member"], f"new-{index}", gpus=1, cpu="1")
    result = pool_autoscale(pool_id=pool.pk, now=T0 + timedelta(seconds=20))
    assert result.reason != "ScaledUp" and not burst_nodes().exists()
    assert not ScalingActivity.objects.exists() and not PoolEvent.objects.filter(type=PoolEvent.Type.WARNING).exists()
    scheduler_pass(now=T0 + timedelta(seconds=30))
    assert set(pool.nodes.filter(pods__name__startswith="new-").values_list("name", flat=True)) == {n.name for n in pool.nodes.all()}


def test_b_the_free_room_of_a_cordoned_node_does_not_count(actors):
    """The scheduler's filters decide what fits: a cordoned node takes no new pod."""
    pool = train_pool(actors)
    fill(actors, gpus=7)
    memory_used(pool, 90)
    pool.nodes.update(phase=Node.Phase.CORDONED, unschedulable=True)
    submit(actors["member"], "new-0", gpus=1, cpu="1")
    assert pool_autoscale(pool_id=pool.pk, now=T0).reason == "ScaledUp"


def test_b_the_free_room_of_a_node_the_cluster_runs_no_pods_on_does_not_count(actors):
    """A node whose Node is gone from the cluster (`kubectl delete node`) takes no pod whatever
    its row says: once the lifecycle pass has seen it, the pod that would fit its free GPU buys a
    node, as one that fits nowhere else does (Cluster Autoscaler reads such a node as unready)."""
    pool = train_pool(actors)
    fill(actors, gpus=7)
    memory_used(pool, 90)
    cluster = SimulatedCluster()
    for node in pool.nodes.all():
        cluster.register_node(name=node.name, now=T0)
        cluster.node_apply(name=node.name, labels=node.labels, taints=node.taints)
    gone = pool.nodes.order_by("name").first()
    SimClusterNode.objects.filter(name=gone.name).delete()
    lifecycle.reconcile_all(now=T0)
    assert Node.objects.get(pk=gone.pk).cluster_fault and not Node.objects.exclude(pk=gone.pk).exclude(cluster_fault="").exists()
    submit(actors["member"], "new-0", gpus=1, cpu="1")
    submit(actors["member"], "new-1", gpus=1, cpu="1")
    assert pool_autoscale(pool_id=pool.pk, now=T0 + timedelta(seconds=20)).reason == "ScaledUp"


def two_hot_pools(actors):
    """Two pools of the team that could both take the one Pending 8-GPU pod, their nodes full."""
    pools = train_pool(actors, name="pool-a", nodes=1), train_pool(actors, name="pool-b", nodes=1)
    fill(actors)
    submit(actors["member"], "queued-0", gpus=8)
    for pool in pools:
        memory_used(pool, 95)
    return pools


def test_c_one_pending_pod_buys_one_node_across_the_teams_pools(actors):
    """Both pools of the team could take the pod: in one pass the pool created first buys the
    node, and the other counts the pod as served by it (CA expands one node group per pod)."""
    first, second = two_hot_pools(actors)
    results = {r.pool: r for r in autoscale_all(now=T0)}
    assert results["pool-a"].reason == "ScaledUp" and results["pool-b"].desired == results["pool-b"].current
    assert list(burst_nodes().values_list("pool__name", flat=True)) == ["pool-a"]
    autoscale_all(now=T0 + timedelta(minutes=2))  # while it boots, neither buys another
    assert burst_nodes().count() == 1


def test_c_one_pool_decided_alone_buys_for_the_pod_and_the_other_then_counts_that_node(actors):
    first, second = two_hot_pools(actors)
    assert pool_autoscale(pool_id=second.pk, now=T0).reason == "ScaledUp"
    assert pool_autoscale(pool_id=first.pk, now=T0).reason != "ScaledUp"
    assert list(burst_nodes().values_list("pool__name", flat=True)) == ["pool-b"]


def hot_pools_statements(actors, pools: int) -> int:
    """The statements of one pass over `pools` hot pools of one team with one pod queued (rolled back)."""
    with transaction.atomic():
        hot = [train_pool(actors, name=f"pool-{index}", nodes=1) for index in range(pools)]
        fill(actors, nodes=pools)
        submit(actors["member"], "queued-0", gpus=8)
        for pool in hot:
            memory_used(pool, 95)
        with CaptureQueriesContext(connection) as queries:
            autoscale_all(now=T0)
        assert list(burst_nodes().values_list("pool__name", flat=True)) == ["pool-0"]
        transaction.set_rollback(True)
    return len(queries)


def test_c_pools_served_by_an_earlier_pools_nodes_cost_no_statement_of_their_own(actors):
    """The pass reads the scale-up inputs once for all pools: three more hot pools that the
    first pool's planned node serves add no statement."""
    assert hot_pools_statements(actors, 2) == hot_pools_statements(actors, 5)


def test_e_burst_nodes_stay_within_the_region_wide_gpu_quota(actors):
    pool = train_pool(actors)
    fill(actors)
    submit(actors["member"], "queued-0", gpus=8)
    memory_used(pool, 95)
    Quota.objects.update_or_create(region=pool.zone.region, gpu_model=pool.gpu_model, team=None, defaults={"limit_gpus": 0})
    result = pool_autoscale(pool_id=pool.pk, now=T0)
    assert result.reason == "QuotaExceeded" and not burst_nodes().exists()
    activity = ScalingActivity.objects.get()
    assert activity.blocked and f"would pass the GPU quota for {pool.gpu_model.name} in {pool.zone.region}: 0 of 0 GPU(s) in use" in activity.message
    assert pool.events.get(reason="QuotaExceeded").type == PoolEvent.Type.WARNING
    pool_autoscale(pool_id=pool.pk, now=T0 + timedelta(minutes=1))  # said once, not every pass
    assert ScalingActivity.objects.count() == pool.events.get(reason="QuotaExceeded").count == 1


def test_e_the_teams_quota_caps_a_scale_up_and_the_activity_says_so(actors):
    pool = train_pool(actors, scaling=EAGER)
    fill(actors)
    for index in range(3):
        submit(actors["member"], f"queued-{index}", gpus=8)
    Quota.objects.create(region=pool.zone.region, gpu_model=pool.gpu_model, team=pool.team, limit_gpus=16)
    result = pool_autoscale(pool_id=pool.pk, now=T0)
    assert result.reason == "ScaledUp" and (result.current, result.desired) == (2, 4)
    assert burst_nodes(pool).count() == 2
    activity = ScalingActivity.objects.get()
    assert f"1 more would pass the GPU quota of team {pool.team.slug}" in activity.message
    assert activity.limiting_policy.startswith(f"GPU quota of team {pool.team.slug}")


def test_e_quota_an_order_took_after_the_pass_read_it_is_counted_before_buying(actors, monkeypatch):
    """The pass reads the quotas for all its pools; the pool that acts reads them again under
    the quota rows' locks (those an order's check takes) and sees an order made since, so the
    two never pass the quota together."""
    from pools.selectors import autoscaler_view
    from pools.selectors.pools import quota_usage
    from pools.services import pools as pool_services
    from tests.conftest import make_document

    pool = train_pool(actors)
    fill(actors)
    submit(actors["member"], "queued-0", gpus=8)
    memory_used(pool, 95)
    region = pool.zone.region
    Quota.objects.update_or_create(region=region, gpu_model=pool.gpu_model, team=None, defaults={"limit_gpus": quota_usage(region=region, gpu_model_id=pool.gpu_model_id) + 8})
    read, reads = autoscaler_view.quota_rooms, []

    def read_then_another_team_orders(**kwargs):
        rooms = read(**kwargs)  # 8 GPUs left when the pass reads
        if not reads:  # the pass's read, before the claims and the locks
            reads.append(rooms)
            pool_services.pool_create(user=actors["other_lead"], document=make_document("other", region="cn-east-2b", nodeCount={"min": 1, "max": 1}))
        return rooms

    monkeypatch.setattr(autoscaler_view, "quota_rooms", read_then_another_team_orders)
    assert autoscale_all(now=T0)[0].reason == "QuotaExceeded" and not burst_nodes().exists()
    assert quota_usage(region=region, gpu_model_id=pool.gpu_model_id) == Quota.objects.get(region=region, gpu_model=pool.gpu_model, team=None).limit_gpus


def test_g_expendable_pods_never_trigger_a_scale_up(actors, settings):
    """Priority below the cutoff (CA's --expendable-pods-priority-cutoff, -10): the pod waits for
    spare room, without a node bought or a warning; at the cutoff it counts."""
    pool = train_pool(actors)
    fill(actors)
    submit(actors["member"], "best-effort", gpus=8, priority=-100)
    memory_used(pool, 95)
    result = pool_autoscale(pool_id=pool.pk, now=T0)
    assert result.reason != "ScaledUp" and not burst_nodes().exists() and not ScalingActivity.objects.exists()
    settings.EBCLOUD_EXPENDABLE_PODS_PRIORITY_CUTOFF = -100
    assert pool_autoscale(pool_id=pool.pk, now=T0 + timedelta(minutes=1)).reason == "ScaledUp"


def test_h_a_hot_pool_with_no_pending_pod_says_nothing(actors):
    pool = train_pool(actors)
    fill(actors)
    memory_used(pool, 95)
    for minutes in range(5):
        result = pool_autoscale(pool_id=pool.pk, now=T0 + timedelta(minutes=minutes))
        assert result.desired == result.current == 2
    assert not ScalingActivity.objects.exists() and not PoolEvent.objects.filter(reason="NotTriggerScaleUp").exists()


@pytest.mark.parametrize("batched", [False, True])
def test_h_a_pod_no_new_node_would_fit_is_reported_once(actors, batched):
    pool = train_pool(actors)
    fill(actors)
    submit(actors["member"], "too-big", gpus=16)
    memory_used(pool, 95)
    for minutes in range(4):
        if batched:
            autoscale_all(now=T0 + timedelta(minutes=minutes))
        else:
            pool_autoscale(pool_id=pool.pk, now=T0 + timedelta(minutes=minutes))
    activity = ScalingActivity.objects.get()
    assert activity.reason == "NotTriggerScaleUp" and "Insufficient nvidia.com/gpu" in activity.message
    assert pool.events.get(reason="NotTriggerScaleUp").count == 1


EAGER_UP = {**SCALING, "scaleUp": EAGER["scaleUp"]}  # GPU memory alone sets the target: a node per 85% of one


def test_h_the_same_unfit_pod_is_not_reported_again_as_the_target_size_moves(actors):
    """The GPU memory moves the target size from pass to pass; the pod and its reason stay the
    same, and so it is said once."""
    pool = train_pool(actors, nodes=8, nodeCount={"min": 0, "max": 12}, scaling=EAGER_UP)
    fill(actors, nodes=8)
    submit(actors["member"], "too-big", gpus=16)
    for minutes, percent in enumerate((95, 100, 95, 100)):
        memory_used(pool, percent)
        pool_autoscale(pool_id=pool.pk, now=T0 + timedelta(minutes=minutes))
    assert ScalingActivity.objects.filter(reason="NotTriggerScaleUp").count() == 1
    assert pool.events.get(reason="NotTriggerScaleUp").count == 1


def test_h_a_pod_that_comes_later_and_fits_no_new_node_is_reported_too(actors):
    """Said once while the Pending pods and their reasons stay the same, not once per pool size:
    a pod that arrives later, for another reason, is reported when it comes, as Cluster
    Autoscaler tells each pod NotTriggerScaleUp."""
    pool = train_pool(actors)
    fill(actors)
    submit(actors["member"], "too-big", gpus=16)
    memory_used(pool, 95)
    pool_autoscale(pool_id=pool.pk, now=T0)
    pool_autoscale(pool_id=pool.pk, now=T0 + timedelta(minutes=1))
    submit(actors["member"], "too-much-memory", gpus=1, memory="100Ti")
    for minutes in (2, 3):
        pool_autoscale(pool_id=pool.pk, now=T0 + timedelta(minutes=minutes))
    first, second = ScalingActivity.objects.order_by("at")
    assert (first.at, second.at) == (T0, T0 + timedelta(minutes=2))
    assert "too-big: Insufficient nvidia.com/gpu" in first.message and "too-much-memory" not in first.message
    assert "too-big: Insufficient nvidia.com/gpu" in second.message and "too-much-memory: Insufficient memory" in second.message
