"""`Pod.pending_since`: when a pod began to wait for a node. It is set when the pod is created
Pending and again at every way a Running pod is put back to Pending (its node lost, a NoExecute
taint's eviction, preemption, a drain's eviction, a removed node), as Kubernetes would create the
evicted pod anew with a new creationTimestamp; `submitted_at` stays the pod's creation."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from pools.controllers.scheduler import scheduler_pass
from pools.models import Node
from pools.models.pods import Pod
from pools.providers.kubernetes_pods import pod_fields
from pools.providers.simulated_cluster import SimulatedCluster
from pools.services.pod_mirror import pods_apply
from tests.pools.pod_helpers import T0, cluster_pod, pool_with_nodes, submit

pytestmark = pytest.mark.django_db
HOURS_LATER = T0 + timedelta(hours=3)


def running_for_hours(actors, name="trainer", **kwargs) -> Pod:
    """A pod submitted at T0 and bound by the pass at T0: by HOURS_LATER it has run three hours."""
    pod = submit(actors["member"], name, **kwargs)
    scheduler_pass(now=T0)
    pod.refresh_from_db()
    assert (pod.phase, pod.submitted_at, pod.pending_since) == ("Running", T0, T0)
    return pod


def waits(pod: Pod) -> tuple[str, str, object, object]:
    pod.refresh_from_db()
    return pod.phase, pod.reason, pod.submitted_at, pod.pending_since


def test_a_submitted_pod_waits_from_its_submission(actors):
    pod = submit(actors["member"], "fresh")
    assert (pod.phase, pod.submitted_at, pod.pending_since) == ("Pending", T0, T0)


def test_a_pod_whose_node_left_waits_from_its_requeue_not_from_its_creation(actors):
    pool_with_nodes(actors["lead"], nodes=1, node_labels={"pool": "train"})
    pod = running_for_hours(actors, gpus=8)
    Node.objects.filter(pk=pod.node_id).update(phase=Node.Phase.TERMINATED)
    assert scheduler_pass(now=HOURS_LATER).requeued == [pod.key]
    assert waits(pod) == ("Pending", "NodeLost", T0, HOURS_LATER)


def test_a_pod_evicted_by_a_noexecute_taint_waits_from_its_eviction(actors):
    pool_with_nodes(actors["lead"], nodes=1, node_labels={"pool": "train"})
    pod = running_for_hours(actors, gpus=8)
    node = Node.objects.get(pk=pod.node_id)
    Node.objects.filter(pk=node.pk).update(taints=[*node.taints, {"key": "maintenance", "effect": "NoExecute"}])
    assert scheduler_pass(now=HOURS_LATER).requeued == [pod.key]
    assert waits(pod) == ("Pending", "TaintManagerEviction", T0, HOURS_LATER)


def test_a_preempted_pod_waits_from_its_preemption(actors):
    pool_with_nodes(actors["lead"], nodes=1, node_labels={"pool": "train"})
    pod = running_for_hours(actors, gpus=8, priority=10, checkpointable=True)
    submit(actors["member"], "online", gpus=8, priority=1000)
    assert scheduler_pass(now=HOURS_LATER).preempted == [pod.key]
    assert waits(pod) == ("Pending", "Preempted", T0, HOURS_LATER)


def test_a_pod_a_drain_evicts_waits_from_its_eviction(actors):
    pool_with_nodes(actors["lead"], nodes=1, node_labels={"pool": "train"})
    pod = running_for_hours(actors)
    assert SimulatedCluster().evict_pods(pods=[("algorithm", "trainer")], reason="drain", now=HOURS_LATER) == {("algorithm", "trainer")}
    assert waits(pod) == ("Pending", "Evicted", T0, HOURS_LATER)


def test_a_pod_on_a_removed_node_waits_from_the_removal(actors):
    pool_with_nodes(actors["lead"], nodes=1, node_labels={"pool": "train"})
    pod = running_for_hours(actors)
    SimulatedCluster().remove_node(name="train-pool-a-0", now=HOURS_LATER)
    assert waits(pod) == ("Pending", "NodeLost", T0, HOURS_LATER)


def test_a_pod_bound_again_keeps_when_it_last_began_to_wait(actors):
    pool_with_nodes(actors["lead"], nodes=2, node_labels={"pool": "train"})
    pod = running_for_hours(actors, gpus=8)
    Node.objects.filter(pk=pod.node_id).update(phase=Node.Phase.TERMINATED)
    scheduler_pass(now=HOURS_LATER)
    scheduler_pass(now=HOURS_LATER + timedelta(minutes=1))
    assert waits(pod) == ("Running", "Scheduled", T0, HOURS_LATER)


# --- a real cluster's pods, through the mirror -------------------------------------------------


def pending_document(name: str, created: str) -> dict:
    document = cluster_pod("", name)
    document["metadata"]["creationTimestamp"] = created
    document["spec"].pop("nodeName")
    document["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    return document


def test_a_mirrored_pod_waits_from_its_creation_and_from_when_it_is_seen_pending_again(teams):
    team_of = {"algorithm": teams["algorithm"].pk}.get
    waiting = pending_document("waiting", "2026-12-01T07:50:00Z")
    ran = cluster_pod("n1", "ran")
    pods_apply([("ADDED", pod_fields(d, now=T0)) for d in (waiting, ran)], team_of=team_of, now=T0)
    rows = {p.name: p for p in Pod.objects.all()}
    assert rows["waiting"].pending_since == rows["waiting"].submitted_at == T0 - timedelta(minutes=10)
    assert rows["ran"].pending_since == rows["ran"].submitted_at == T0
    again = pending_document("ran", "2026-12-01T08:00:00Z")
    pods_apply([("MODIFIED", pod_fields(again, now=HOURS_LATER))], team_of=team_of, now=HOURS_LATER)
    assert Pod.objects.get(name="ran").pending_since == HOURS_LATER
    later = HOURS_LATER + timedelta(minutes=5)  # the same state applied again (a relist) changes nothing
    stats = pods_apply([("MODIFIED", pod_fields(d, now=later)) for d in (again, waiting)], team_of=team_of, now=later)
    assert (stats.unchanged, stats.updated) == (2, 0)
    assert dict(Pod.objects.values_list("name", "pending_since")) == {"ran": HOURS_LATER, "waiting": T0 - timedelta(minutes=10)}


# --- the migration ---------------------------------------------------------------------------------

BEFORE = ("pools", "0036_node_cordon_theirs")


@pytest.mark.django_db(transaction=True)
def test_pods_stored_before_wait_from_their_creation_or_from_leaving_their_last_node(actors):
    pool = pool_with_nodes(actors["lead"], nodes=1, node_labels={"pool": "train"})
    node_pk, team_pk = pool.nodes.get().pk, pool.team_id
    executor = MigrationExecutor(connection)
    try:
        executor.migrate([BEFORE])
        state = executor.loader.project_state([BEFORE]).apps
        old, placement = state.get_model("pools", "Pod"), state.get_model("pools", "PodPlacement")
        common = {"namespace": "algorithm", "team_id": team_pk, "submitted_at": T0}
        old.objects.create(name="waiting", **common)
        requeued = old.objects.create(name="requeued", **common)
        running = old.objects.create(name="running", phase="Running", node_id=node_pk, started_at=T0 + timedelta(hours=2), **common)
        placement.objects.create(pod=requeued, node_id=node_pk, started_at=T0, ended_at=T0 + timedelta(hours=1))
        placement.objects.create(pod=requeued, node_id=node_pk, started_at=T0 + timedelta(hours=1), ended_at=HOURS_LATER)
        placement.objects.create(pod=running, node_id=node_pk, started_at=T0, ended_at=T0 + timedelta(hours=1))
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
        assert dict(Pod.objects.values_list("name", "pending_since")) == {"waiting": T0, "requeued": HOURS_LATER, "running": T0}
    finally:
        Pod.objects.all().delete()
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
