"""A burst node cordoned by a scale-down decision whose drain never started (the worker stopped
between the decision's commit and the drain) is settled by a later pass, as Cluster Autoscaler
removes its leftover ToBeDeletedByClusterAutoscaler taints (`CleanAllToBeDeleted`): once the
pool's claim time has passed since the decision, the cordon is lifted, never drained on the
stale decision, with an event that says why, and the next scale-down decides again from the
current state. Only a cordon the decision recorded is lifted: a repair's, or one nobody
recorded, never is. The drain's re-check reads every chosen node's pods once per pass."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from pools.controllers import autoscaler
from pools.controllers.autoscaler import autoscale_all, pool_autoscale
from pools.controllers.repair_cordon import wait_cordon
from pools.controllers.scale_down import PodsRecheck
from pools.controllers.scale_down_cordons import cordon_bound, cordons_left_settle
from pools.controllers.scheduler import scheduler_pass
from pools.models import Node, PoolEvent
from pools.models.cloud import SimClusterNode
from pools.models.pods import Pod
from pools.providers import get_cluster_backend
from pools.services import pods as pod_services
from pools.services.disruption_budgets import budget_create
from tests.pools.autoscaler_helpers import memory_used, run_on
from tests.pools.pod_helpers import submit
from tests.pools.test_autoscaler_scale_down_cordon import (
    LATER,
    pinned_document,
    scaling_down_pool,
)
from tests.race import concurrently

SETTLED = LATER + cordon_bound() + timedelta(seconds=1)  # the claim time has passed since the decision
postgresql_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent workers need PostgreSQL (SQLite has one writer)")


class WorkerStopped(Exception):
    """The worker's process ends between the decision's commit and the drain."""


def decided_then_stopped(pool) -> None:
    """A scale-down decision commits (the burst node cordoned, its pod moved off) and its worker
    stops before the drain: nothing is left to drain the node or lift its cordon."""

    def stop(*args, **kwargs):
        raise WorkerStopped

    with mock.patch.object(autoscaler, "drain_start", stop), pytest.raises(WorkerStopped):
        pool_autoscale(pool_id=pool.pk, now=LATER)


def kept_by_a_pinned_pod(actors):
    """A pool whose scale-down stopped after its decision, with a pod annotated safe-to-evict
    "false" on the cordoned burst node (bound in the same instant, as a real cluster's
    kube-scheduler may), and busy now: no scale-down of its own would take the node."""
    pool, burst = scaling_down_pool(actors)
    decided_then_stopped(pool)
    burst.refresh_from_db()
    assert burst.unschedulable and burst.release_reason == "" and burst.phase == Node.Phase.READY
    run_on(pod_services.pod_create(user=actors["member"], document=pinned_document(), now=LATER), burst, [2, 3, 4, 5])
    memory_used(pool, 95)
    return pool, burst


STALE = "did not start its drain within 2m0s (the pass that decided it stopped); the next scale-down decides again from the current state"


@pytest.mark.django_db
def test_a_cordon_a_stopped_pass_left_is_lifted_when_a_pod_on_the_node_keeps_it(actors):
    pool, burst = kept_by_a_pinned_pod(actors)
    autoscale_all(now=LATER + cordon_bound() - timedelta(seconds=1))  # the drain may still follow
    burst.refresh_from_db()
    assert burst.unschedulable and not pool.events.filter(reason="ScaleDownUncordoned").exists()
    autoscale_all(now=SETTLED)
    burst.refresh_from_db()
    assert not burst.unschedulable and burst.release_reason == "" and burst.phase == Node.Phase.READY
    event = pool.events.get(reason="ScaleDownUncordoned")
    assert event.node_id == burst.pk and event.type == PoolEvent.Type.WARNING
    assert event.message == f"Node {burst.name} takes new pods again: the scale-down that cordoned it at 09:00:00 UTC {STALE}", event.message
    assert Pod.objects.get(name="pinned").node_id == burst.pk  # nothing was evicted
    another = submit(actors["member"], "another", gpus=2, cpu="1", duration="10h")  # only the burst node has room
    scheduler_pass(now=SETTLED + timedelta(seconds=5))
    another.refresh_from_db()
    assert another.node_id == burst.pk  # its capacity is back


@pytest.mark.django_db
def test_a_cordon_a_stopped_pass_left_is_lifted_though_its_pods_could_all_go(actors):
    """The decision moved the node's pod off already and nothing on it keeps it: the cordon is
    lifted all the same, not drained on the stale decision (the pool is busy now), and a later
    scale-down, the pool cold again, chooses the node again from the current state."""
    pool, burst = scaling_down_pool(actors)
    decided_then_stopped(pool)
    memory_used(pool, 95)
    autoscale_all(now=SETTLED)
    burst.refresh_from_db()
    assert not burst.unschedulable and burst.release_reason == "" and burst.phase == Node.Phase.READY
    assert STALE in pool.events.get(reason="ScaleDownUncordoned").message
    assert not pool.events.filter(reason="ScaledDown").exists()
    memory_used(pool, 5)
    autoscale_all(now=SETTLED + timedelta(hours=1))  # past the scale-down window of the busy pass
    burst.refresh_from_db()
    assert burst.release_reason == "ScaledIn"
    assert sum(pool.events.filter(reason="ScaleDownCordoned", node=burst).values_list("count", flat=True)) == 2  # decided again
    assert STALE not in pool.events.get(reason="ScaledDown", node=burst).message


@pytest.mark.django_db
def test_a_leftover_whose_pods_lost_their_room_is_lifted_not_drained_into_a_scale_up(actors):
    """The review's case: the decision chose the burst node because its pod fit the first node's
    free GPUs; while it was cordoned a new pod came Pending that only the burst node has room
    for. Past the bound the cordon is lifted, the next scale-down keeps the node (a Pending pod
    would be scheduled on it), no node is ordered, and the pod lands there."""
    pool, burst = scaling_down_pool(actors)
    decided_then_stopped(pool)
    another = submit(actors["member"], "another", gpus=2, cpu="1", duration="10h")
    scheduler_pass(now=LATER + timedelta(seconds=30))
    another.refresh_from_db()
    assert another.node_id is None  # the first node is full now, the burst node cordoned
    nodes = set(pool.nodes.values_list("pk", flat=True))
    autoscale_all(now=SETTLED)
    burst.refresh_from_db()
    assert not burst.unschedulable and burst.release_reason == "" and burst.phase == Node.Phase.READY
    assert set(pool.nodes.values_list("pk", flat=True)) == nodes  # nothing ordered
    assert not pool.events.filter(reason="ScaledDown").exists()
    scheduler_pass(now=SETTLED + timedelta(seconds=5))
    another.refresh_from_db()
    assert another.node_id == burst.pk


@pytest.mark.django_db
def test_a_cordon_someone_set_in_the_cluster_before_the_decision_stays_when_the_stopped_pass_is_settled(actors):
    """Only the row's cordon is the decision's: the cluster's Node, cordoned by someone else
    before the decision (no drain's mark), keeps that cordon, and the event says so."""
    pool, burst = scaling_down_pool(actors)
    SimClusterNode.objects.create(name=burst.name, unschedulable=True)
    decided_then_stopped(pool)
    memory_used(pool, 95)
    autoscale_all(now=SETTLED)
    burst.refresh_from_db()
    assert not burst.unschedulable and SimClusterNode.objects.get(name=burst.name).unschedulable
    message = pool.events.get(reason="ScaleDownUncordoned").message
    assert STALE in message and "the cluster keeps the cordon of its Node, which someone else set (kubectl cordon)" in message, message


@pytest.mark.django_db
def test_settling_twice_lifts_the_cordon_once(actors):
    pool, burst = kept_by_a_pinned_pod(actors)
    autoscale_all(now=SETTLED)
    autoscale_all(now=SETTLED + timedelta(minutes=1))
    assert pool.events.get(reason="ScaleDownUncordoned").count == 1


@pytest.mark.django_db
def test_a_cordon_the_decision_did_not_record_is_never_lifted(actors):
    """A Ready node cordoned by someone else (no `ScaleDownCordoned` event of the decision on
    it) stays cordoned, however long."""
    pool, burst = scaling_down_pool(actors)
    Node.objects.filter(pk=burst.pk).update(unschedulable=True)
    memory_used(pool, 95)
    autoscale_all(now=SETTLED)
    burst.refresh_from_db()
    assert burst.unschedulable and burst.release_reason == ""
    assert not pool.events.filter(reason__in=["ScaleDownUncordoned", "ScaledDown"]).exists()


@pytest.mark.django_db
def test_a_repair_cordon_after_the_decisions_is_never_lifted(actors):
    """The repair cordons the node (its GPU fault waits) after the stopped decision: the cordon
    is the repair's now, and stays until the repair lifts it."""
    pool, burst = kept_by_a_pinned_pod(actors)
    assert wait_cordon(pool=pool, node=burst, cluster=get_cluster_backend(), waiting_for="the fault must persist", now=LATER + timedelta(seconds=10))
    autoscale_all(now=SETTLED)
    burst.refresh_from_db()
    assert burst.phase == Node.Phase.CORDONED and burst.unschedulable and burst.release_reason == ""
    assert not pool.events.filter(reason__in=["ScaleDownUncordoned", "ScaledDown"]).exists()


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_two_workers_settling_the_same_cordon_lift_it_once(actors):
    """Two workers settle the pool at once, past its claim (as after a claim that expired under
    a slow worker): the row's conditional UPDATE lets one of them lift it and say so."""
    pool, burst = kept_by_a_pinned_pod(actors)
    assert any(concurrently(*[lambda: cordons_left_settle(pool, SETTLED)] * 2))  # the later one may find it settled already
    burst.refresh_from_db()
    assert not burst.unschedulable
    assert pool.events.get(reason="ScaleDownUncordoned").count == 1


def burst_nodes_running(actors, count: int, **labels):
    """A pool with `count` Ready burst nodes, each running one pod (labelled `labels`)."""
    pool, first = scaling_down_pool(actors)
    nodes = [first]
    for index in range(1, count):
        nodes.append(Node.objects.create(pool=pool, name=f"{first.name}-{index}", billing=Node.Billing.ON_DEMAND, phase=Node.Phase.READY,
                                         zone=pool.zone, gpu_count=8, labels=first.labels, taints=first.taints, ready_at=first.ready_at))  # fmt: skip
        run_on(submit(actors["member"], f"on-{index}", gpus=2, cpu="1", duration="10h", labels=labels or None), nodes[-1], [0, 1])
    return pool, nodes


def recheck_statements(nodes: list[Node]) -> int:
    """The statements of the drain's re-check of these nodes, each asked in turn."""
    recheck = PodsRecheck(get_cluster_backend(), [(node, []) for node in nodes])
    with CaptureQueriesContext(connection) as queries:
        assert [recheck(node) for node in nodes] == [""] * len(nodes)
    return len(queries)


@pytest.mark.django_db
def test_the_drains_recheck_reads_the_pods_of_every_chosen_node_at_once(actors):
    """Three chosen nodes cost the re-check no more statements than one: their pods are read in
    one query, their budgets once."""
    pool, nodes = burst_nodes_running(actors, 3)
    assert recheck_statements(nodes[:1]) == recheck_statements(nodes)


@pytest.mark.django_db
def test_the_recheck_counts_the_pods_of_the_nodes_drained_before_against_their_budget(actors):
    """One budget over the newcomers of two chosen nodes allows one eviction: the first node's
    pod spends it, so the second node is kept."""
    pool, nodes = burst_nodes_running(actors, 3, app="trainer")
    budget_create(user=actors["member"], document={"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                                                   "metadata": {"name": "one", "namespace": "algorithm"},
                                                   "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "trainer"}}}})  # fmt: skip
    recheck = PodsRecheck(get_cluster_backend(), [(node, []) for node in nodes[1:]])
    assert recheck(nodes[1]) == ""
    assert recheck(nodes[2]) == "pod algorithm/on-2 may not be evicted now: the disruption budget algorithm/one allows no more disruptions"
