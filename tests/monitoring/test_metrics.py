"""Prometheus /metrics (issue 6 §7; the comparison table's monitoring row): per-pool gauges from
a few aggregate queries; access restricted by EBCLOUD_METRICS_TOKEN or to the loopback."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from pools import services as pool_services
from pools.models import Node
from tests.conftest import make_document
from tests.monitoring.conftest import report


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


def test_the_scrape_costs_the_same_queries_for_one_node_or_many(burst_pool, make_node):
    make_node("b-0", target=burst_pool)
    client = Client(REMOTE_ADDR="127.0.0.1")
    with CaptureQueriesContext(connection) as few:
        client.get("/metrics")
    for i in range(1, 6):
        make_node(f"b-{i}", target=burst_pool, billing="on_demand" if i % 2 else "monthly")
    with CaptureQueriesContext(connection) as many:
        client.get("/metrics")
    assert len(few) == len(many) <= 4


def test_without_a_token_only_the_loopback_may_scrape(db, settings):
    settings.EBCLOUD_METRICS_TOKEN = ""
    assert Client(REMOTE_ADDR="10.0.0.5").get("/metrics").status_code == 403
    assert Client(REMOTE_ADDR="::1").get("/metrics").status_code == 200


def test_with_a_token_every_scrape_must_bring_it_even_from_the_loopback(db, settings):
    settings.EBCLOUD_METRICS_TOKEN = "s3cret"
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 403
    assert Client(REMOTE_ADDR="10.0.0.5").get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    assert Client(REMOTE_ADDR="10.0.0.5").get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200
