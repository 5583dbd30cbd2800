"""Prometheus /metrics (issue 6 §7; design §4 "pool capacity, allocation, pending pods, node
phases, budget use"; the comparison table's monitoring row): per-pool gauges from a few
aggregate queries; access restricted by EBCLOUD_METRICS_TOKEN or to the loopback."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from billing.budgets import budget_team_set, budgets_sync
from billing.models import CostRecord
from billing.services import cost_day_add
from pools.models import GpuNodePool, Node
from pools.providers.simulated import pod_run
from pools.services import pools as pool_services
from tests.conftest import make_document
from tests.monitoring.conftest import report
from tests.pools.pod_helpers import pool_with_nodes, submit

TRAIN_NODE_LABELS = {"pool": "train", "gpu-class": "a100"}  # what the test pods' node affinity asks for
POOL_LABELS = (("gpu_model", "A100_80G"), ("pool", "train-pool-a"), ("team", "algorithm"), ("zone", "cn-east-2a"))


@pytest.fixture
def burst_pool(actors):
    """A pool with no monthly baseline, so no order and no lifecycle nodes of its own."""
    return pool_services.pool_create(user=actors["lead"], document=make_document("burst-pool", nodeCount={"min": 0, "max": 6}))


def samples(response) -> dict[tuple, float]:
    out = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_show_capacity_and_nodes_by_phase_and_billing(burst_pool, make_node):
    make_node("b-0", target=burst_pool)
    make_node("b-1", target=burst_pool, billing="on_demand")
    make_node("b-2", target=burst_pool, phase="Provisioning", billing="on_demand")
    make_node("b-3", target=burst_pool, phase="Terminated")
    response = Client(REMOTE_ADDR="127.0.0.1").get("/metrics")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
    got = samples(response)
    labels = (("gpu_model", "A100_80G"), ("pool", "burst-pool"), ("team", "algorithm"), ("zone", "cn-east-2a"))
    assert got[("ebcloud_pool_capacity_gpus", labels)] == 16
    assert got[("ebcloud_pool_max_nodes", labels)] == 6 and got[("ebcloud_pool_min_nodes", labels)] == 0
    nodes = {k[1]: v for k, v in got.items() if k[0] == "ebcloud_pool_nodes" and ("pool", "burst-pool") in k[1]}
    assert nodes == {
        (("billing", "monthly"), ("phase", "Ready"), ("pool", "burst-pool")): 1,
        (("billing", "on_demand"), ("phase", "Ready"), ("pool", "burst-pool")): 1,
        (("billing", "on_demand"), ("phase", "Provisioning"), ("pool", "burst-pool")): 1,
    }


def test_metrics_show_heartbeat_age_and_gpu_memory_from_agent_reports(burst_pool, make_node, agent):
    node = make_node("b-0", target=burst_pool)
    agent(node).post("/api/agent/v1/reports/", {"reports": [report(1, used=20480)]}, format="json")
    Node.objects.filter(pk=node.pk).update(last_heartbeat=timezone.now() - timedelta(seconds=90))
    got = samples(Client(REMOTE_ADDR="127.0.0.1").get("/metrics"))
    age = got[("ebcloud_node_heartbeat_age_seconds", (("node", "b-0"), ("pool", "burst-pool")))]
    assert 90 <= age < 120
    assert got[("ebcloud_pool_gpu_memory_used_ratio", (("pool", "burst-pool"),))] == 0.25
    assert got[("ebcloud_pool_gpu_utilization_percent", (("pool", "burst-pool"),))] == 75


def test_metrics_show_allocated_gpus_and_the_pending_pods_that_fit_the_pool(actors):
    """Allocation counts Running pods' GPU requests (a share as milli/1000); pending pods are the
    autoscaler's `queued_pods`: Pending pods of the team that an empty node of the pool fits."""
    pool_with_nodes(actors["lead"], nodes=2, node_labels=TRAIN_NODE_LABELS)
    pod_run(node_name="train-pool-a-0", name="whole", namespace="algorithm")
    share = pod_run(node_name="train-pool-a-1", name="share", namespace="algorithm")
    type(share).objects.filter(pk=share.pk).update(gpu_milli=500)
    submit(actors["member"], "fits-a", gpus=2)
    submit(actors["member"], "fits-b", gpus=8)
    submit(actors["member"], "too-big", gpus=16)  # no 16-GPU node in this pool: not queued for it
    submit(actors["member"], "elsewhere", pool_affinity="infer", tolerate="infer")  # another pool's pod
    got = samples(Client(REMOTE_ADDR="127.0.0.1").get("/metrics"))
    assert got[("ebcloud_pool_allocated_gpus", POOL_LABELS)] == 1.5
    assert got[("ebcloud_pool_pending_pods", POOL_LABELS)] == 2


def test_metrics_show_desired_nodes_per_billing_kind(actors):
    """Monthly baseline, on-demand burst and preemptible nodes are told apart (seed G4, D3)."""
    pool = pool_with_nodes(actors["lead"], nodes=1)
    GpuNodePool.objects.filter(pk=pool.pk).update(node_counts={
        "monthly": {"desired": 2, "current": 1, "ready": 1}, "on_demand": {"desired": 3, "current": 0, "ready": 0}})
    Node.objects.create(pool=pool, name="train-pool-a-s-0", zone=pool.zone, gpu_count=8, phase="Ready", billing="preemptible")
    got = samples(Client(REMOTE_ADDR="127.0.0.1").get("/metrics"))
    assert got[("ebcloud_pool_desired_nodes", (("billing", "monthly"), ("pool", "train-pool-a")))] == 2
    assert got[("ebcloud_pool_desired_nodes", (("billing", "on_demand"), ("pool", "train-pool-a")))] == 3
    assert got[("ebcloud_pool_nodes", (("billing", "preemptible"), ("phase", "Ready"), ("pool", "train-pool-a")))] == 1


def _cost(pool, amount, *, when=None):
    """A metered hour's cost record of the pool, added to its day's rollup as metering adds it."""
    when = (when or timezone.now()).replace(minute=0, second=0, microsecond=0)
    record = CostRecord.objects.create(hour=when, pool=pool, team=pool.team, billing_kind="monthly", cost_kind="usage", amount=Decimal(amount))
    cost_day_add(day=when.date(), costs=[record])
    return record


def test_metrics_show_budget_use_per_pool_budget_and_team_budget(actors, teams):
    """Budget use (seed T6, O1): this month's spend over the pool's `spec.budget` and over the
    team budget, with the limit itself; last month's spend does not count."""
    pool = pool_with_nodes(actors["lead"], nodes=0, budget={"monthly": 1000, "currency": "CNY"})
    budgets_sync()
    budget_team_set(user=actors["admin"], team=teams["algorithm"], monthly_amount=Decimal("5000"))
    _cost(pool, "250.00")
    _cost(pool, "100.00")
    _cost(pool, "999.00", when=timezone.now() - timedelta(days=40))
    got = samples(Client(REMOTE_ADDR="127.0.0.1").get("/metrics"))
    pool_budget = (("currency", "CNY"), ("pool", "train-pool-a"), ("scope", "pool"), ("team", "algorithm"))
    team_budget = (("currency", "CNY"), ("pool", ""), ("scope", "team"), ("team", "algorithm"))
    assert got[("ebcloud_budget_limit", pool_budget)] == 1000 and got[("ebcloud_budget_spent", pool_budget)] == 350
    assert got[("ebcloud_budget_used_ratio", pool_budget)] == 0.35
    assert got[("ebcloud_budget_limit", team_budget)] == 5000 and got[("ebcloud_budget_used_ratio", team_budget)] == 0.07


def test_a_deleted_pools_budget_in_force_is_exported_under_its_ledger_name(actors, time_machine):
    """A deleted pool's budget stays in force while its leases are charged this month, as on
    the budgets page and in the hourly check: exported as `name#id`, beside the new pool that
    took its name. One charged only last month is exported no more."""
    time_machine.move_to(datetime(2026, 12, 10, 12, 30, tzinfo=UTC), tick=False)
    old = pool_with_nodes(actors["lead"], nodes=0, budget={"monthly": 1000})
    _cost(old, "300.00")
    gone = pool_with_nodes(actors["lead"], name="infer-pool", nodes=0, budget={"monthly": 100})
    _cost(gone, "50.00", when=timezone.now() - timedelta(days=20))
    for deleted in (old, gone):
        pool_services.pool_delete(user=actors["lead"], pool=deleted, now=timezone.now())
    new = pool_with_nodes(actors["lead"], nodes=0, budget={"monthly": 2000})
    _cost(new, "500.00")
    got = samples(Client(REMOTE_ADDR="127.0.0.1").get("/metrics"))
    spent = {dict(labels)["pool"]: value for (name, labels), value in got.items() if name == "ebcloud_budget_spent"}
    assert spent == {"train-pool-a": 500, f"train-pool-a#{old.pk}": 300}
    labels = (("currency", "CNY"), ("pool", f"train-pool-a#{old.pk}"), ("scope", "pool"), ("team", "algorithm"))
    assert got[("ebcloud_budget_limit", labels)] == 1000 and got[("ebcloud_budget_used_ratio", labels)] == 0.3


def test_the_scrape_costs_the_same_queries_for_few_objects_or_many(actors, teams, burst_pool, make_node):
    """Every list endpoint asserts its query count (design §6): more pools, nodes, pods and
    budgets cost no more queries."""
    make_node("b-0", target=burst_pool)
    client = Client(REMOTE_ADDR="127.0.0.1")
    with CaptureQueriesContext(connection) as few:
        client.get("/metrics")
    for i in range(1, 6):
        make_node(f"b-{i}", target=burst_pool, billing="on_demand" if i % 2 else "monthly")
    pool = pool_with_nodes(actors["lead"], name="train-pool-q", nodes=3, node_labels=TRAIN_NODE_LABELS, budget={"monthly": 1000})
    pool_with_nodes(actors["other_lead"], name="infer-pool", nodes=2)
    for i in range(3):
        pod_run(node_name=f"train-pool-q-{i}", name=f"run-{i}", namespace="algorithm")
        submit(actors["member"], f"wait-{i}")
    deleted = pool_with_nodes(actors["lead"], name="old-pool", nodes=0, budget={"monthly": 100})
    _cost(deleted, "5.00")
    pool_services.pool_delete(user=actors["lead"], pool=deleted, now=timezone.now())  # its budget still in force
    budgets_sync()
    budget_team_set(user=actors["admin"], team=teams["inference"], monthly_amount=Decimal("100"))
    _cost(pool, "10.00")
    with CaptureQueriesContext(connection) as many:
        response = client.get("/metrics")
    got = samples(response)
    labels = (("gpu_model", "A100_80G"), ("pool", "train-pool-q"), ("team", "algorithm"), ("zone", "cn-east-2a"))
    assert got[("ebcloud_pool_pending_pods", labels)] == 3 and got[("ebcloud_pool_allocated_gpus", labels)] == 3
    assert got[("ebcloud_budget_spent", (("currency", "CNY"), ("pool", f"old-pool#{deleted.pk}"), ("scope", "pool"), ("team", "algorithm")))] == 5
    assert len(few) <= len(many) <= 17, [q["sql"][:80] for q in many.captured_queries]  # 2 of them the workers
    assert len(many) - len(few) <= 4  # only the budgets' month appears once budgets exist: two reads per scope


def test_without_a_token_only_the_loopback_may_scrape(db, settings):
    settings.EBCLOUD_METRICS_TOKEN = ""
    assert Client(REMOTE_ADDR="10.0.0.5").get("/metrics").status_code == 403
    assert Client(REMOTE_ADDR="::1").get("/metrics").status_code == 200


def test_with_a_token_every_scrape_must_bring_it_even_from_the_loopback(db, settings):
    settings.EBCLOUD_METRICS_TOKEN = "s3cret"
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 403
    assert Client(REMOTE_ADDR="10.0.0.5").get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    assert Client(REMOTE_ADDR="10.0.0.5").get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200
