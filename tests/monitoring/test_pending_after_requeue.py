"""A pod that ran for hours and is put back to Pending (its node lost, evicted, preempted) has
waited only since then: the PodsPendingTooLong alert, the oldest-Pending gauge and Diagnose's
Pending-pods check count its wait from `Pod.pending_since`, not from its creation."""

from __future__ import annotations

from datetime import timedelta

from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from monitoring.alerts import alerts_evaluate
from pools.controllers.scheduler import scheduler_pass
from pools.models import Node
from pools.models.pods import Pod
from pools.providers.simulated_cluster import SimulatedCluster
from pools.selectors.diagnose import pool_diagnose
from tests.pools.pod_helpers import T0, pool_with_nodes, submit

TRAIN_NODE_LABELS = {"pool": "train", "gpu-class": "a100"}
REQUEUED = T0 + timedelta(hours=3)


def requeued_after_three_hours(actors) -> tuple[object, Pod]:
    """A pod submitted and bound at T0, requeued at REQUEUED when its only node left."""
    pool = pool_with_nodes(actors["lead"], nodes=1, node_labels=TRAIN_NODE_LABELS)
    pod = submit(actors["member"], "trainer", gpus=8)
    scheduler_pass(now=T0)
    pod.refresh_from_db()
    assert pod.phase == "Running"
    Node.objects.filter(pk=pod.node_id).update(phase=Node.Phase.TERMINATED)
    assert scheduler_pass(now=REQUEUED).requeued == [pod.key]
    return pool, pod


def test_a_pod_requeued_after_running_three_hours_fires_only_after_waiting_past_the_rule(actors):
    requeued_after_three_hours(actors)
    assert alerts_evaluate(now=REQUEUED + timedelta(minutes=5)) == []
    [event] = alerts_evaluate(now=REQUEUED + timedelta(minutes=16))
    assert event.reason == "PodsPendingTooLong"
    assert "algorithm/trainer, for 16m" in event.message


def test_a_pod_a_drain_evicted_waits_from_its_eviction(actors):
    pool_with_nodes(actors["lead"], nodes=1, node_labels=TRAIN_NODE_LABELS)
    submit(actors["member"], "trainer", gpus=8)
    scheduler_pass(now=T0)
    SimulatedCluster().evict_pods(pods=[("algorithm", "trainer")], reason="drain", now=REQUEUED)
    Node.objects.update(unschedulable=True)  # cordoned by the drain: nowhere to go
    assert alerts_evaluate(now=REQUEUED + timedelta(minutes=10)) == []
    [event] = alerts_evaluate(now=REQUEUED + timedelta(minutes=20))
    assert "algorithm/trainer, for 20m" in event.message


def test_the_longest_waiting_pod_is_named_not_the_oldest_created(actors):
    requeued_after_three_hours(actors)
    other = submit(actors["member"], "newer", gpus=8)
    Pod.objects.filter(pk=other.pk).update(submitted_at=T0 + timedelta(hours=1), pending_since=T0 + timedelta(hours=1))
    [event] = alerts_evaluate(now=REQUEUED + timedelta(minutes=5))
    assert "1 waiting; the oldest, algorithm/newer, for 2h5m" in event.message


def test_the_oldest_pending_gauge_counts_from_the_requeue(actors, time_machine):
    pool, _ = requeued_after_three_hours(actors)
    time_machine.move_to(REQUEUED + timedelta(minutes=5), tick=False)
    response = Client(REMOTE_ADDR="127.0.0.1").get("/metrics")
    values = {(s.name, s.labels.get("pool")): s.value for f in text_string_to_metric_families(response.content.decode()) for s in f.samples}
    assert values[("ebcloud_pool_oldest_pending_pod_age_seconds", pool.name)] == 300


def test_diagnose_reports_the_wait_since_the_requeue(actors):
    pool, _ = requeued_after_three_hours(actors)
    check = next(c for c in pool_diagnose(pool=pool, now=REQUEUED + timedelta(minutes=5)).checks if c.id == "pods-pending")
    assert "0 of them for over 15m; oldest algorithm/trainer for 5m0s." in check.found and check.status == "ok"
    assert check.details[0].startswith("algorithm/trainer: Pending 5m0s,")
