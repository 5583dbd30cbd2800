"""deploy/prometheus-rules.yaml (issue 20 item 3): Prometheus alerting rules equivalent to the
pools' default capacity alerts, and the workers' liveness, over gauges /metrics really exposes.
promtool is not installed here; docs/operator.md tells operators to run `promtool check rules`
on the file."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from pools.core.alerting import RULES
from pools.core.durations import parse_duration
from pools.models.pods import Pod
from tests.monitoring.conftest import report
from tests.monitoring.test_worker_health import ROLLUP, run_schedule
from tests.pools.pod_helpers import pool_with_nodes, submit

RULES_FILE = Path(__file__).resolve().parents[2] / "deploy" / "prometheus-rules.yaml"
METRIC = re.compile(r"\bebcloud_[a-z_]+\b")
TRAIN_NODE_LABELS = {"pool": "train", "gpu-class": "a100"}


CAPACITY, WORKERS = "ebcloud-pool-capacity", "ebcloud-workers"


def rules(group: str = CAPACITY) -> dict[str, dict]:
    document = yaml.safe_load(RULES_FILE.read_text())
    groups = {g["name"]: g for g in document["groups"]}
    assert set(groups) == {CAPACITY, WORKERS}
    return {rule["alert"]: rule for rule in groups[group]["rules"]}


def exposed_metric_names(actors, make_node, agent) -> set[str]:
    """A small fleet: a pool with a reporting node, a lost node and a waiting pod; a periodic
    task the workers ran."""
    pool = pool_with_nodes(actors["lead"], name="watched-pool", nodes=2, node_labels=TRAIN_NODE_LABELS)
    make_node("lost-0", target=pool, phase="Unknown")
    reporting = make_node("reporting-0", target=pool)
    assert agent(reporting).post("/api/agent/v1/reports/", {"reports": [report(1)]}, format="json").status_code == 200
    submit(actors["member"], "waiting", gpus=2)
    assert Pod.objects.filter(phase="Pending").exists()
    run_schedule(ROLLUP)
    response = Client(REMOTE_ADDR="127.0.0.1").get("/metrics")
    assert response.status_code == 200
    return {s.name for family in text_string_to_metric_families(response.content.decode()) for s in family.samples}


def test_there_is_one_prometheus_rule_per_capacity_alert_with_the_same_name():
    assert set(rules()) == {info.reason for info in RULES}


def test_every_metric_a_rule_uses_is_exposed_by_metrics(actors, make_node, agent):
    names = exposed_metric_names(actors, make_node, agent)
    used = {name for group in (CAPACITY, WORKERS) for rule in rules(group).values() for name in METRIC.findall(rule["expr"])}
    assert used and used <= names, used - names


def test_the_rules_use_the_default_thresholds_and_durations():
    by_reason = {info.reason: info.default for info in RULES}
    got = rules()
    high = got["HighGpuAllocation"]
    assert high["expr"].endswith(f"> {by_reason['HighGpuAllocation'].threshold / 100}")
    assert parse_duration(high["for"]) == by_reason["HighGpuAllocation"].window_s
    low = got["LowGpuUtilization"]
    assert low["expr"].endswith(f"< {by_reason['LowGpuUtilization'].threshold}")
    assert parse_duration(low["for"]) == by_reason["LowGpuUtilization"].window_s
    pending = got["PodsPendingTooLong"]
    assert pending["expr"].endswith(f"> {by_reason['PodsPendingTooLong'].window_s}") and "for" not in pending
    not_ready = got["NodesNotReady"]
    assert not_ready["expr"].endswith(f">= {by_reason['NodesNotReady'].threshold}")
    assert parse_duration(not_ready["for"]) == by_reason["NodesNotReady"].window_s
    for rule in got.values():
        assert rule["labels"]["severity"] == "warning" and rule["annotations"]["description"]


def test_the_workers_rules_fire_on_a_stalled_per_minute_task_or_metering_and_a_growing_queue():
    got = rules(WORKERS)
    assert set(got) == {"EbcloudWorkersStalled", "EbcloudTaskQueueGrowing"}
    stalled = got["EbcloudWorkersStalled"]["expr"]
    assert 'ebcloud_task_last_success_timestamp_seconds{every="1m"} > 300' in stalled
    assert 'ebcloud_task_last_success_timestamp_seconds{task="billing.meter_pending"} > 7200' in stalled
    growing = got["EbcloudTaskQueueGrowing"]["expr"]
    assert "ebcloud_task_queue_depth" in growing and parse_duration(got["EbcloudTaskQueueGrowing"]["for"]) == 900
    for rule in got.values():
        assert rule["labels"]["severity"] in ("critical", "warning") and "qcluster" in rule["annotations"]["description"]


def test_metrics_report_the_oldest_pending_pods_wait_and_not_ready_nodes(actors, make_node):
    pool = pool_with_nodes(actors["lead"], name="watched-pool", nodes=2, node_labels=TRAIN_NODE_LABELS)
    make_node("lost-0", target=pool, phase="Unknown")
    make_node("fixing-0", target=pool, phase="Repairing")
    submit(actors["member"], "waiting", gpus=2)
    response = Client(REMOTE_ADDR="127.0.0.1").get("/metrics")
    values = {(s.name, s.labels.get("pool")): s.value for f in text_string_to_metric_families(response.content.decode()) for s in f.samples}
    assert values[("ebcloud_pool_not_ready_nodes", pool.name)] == 2
    assert values[("ebcloud_pool_oldest_pending_pod_age_seconds", pool.name)] > 0  # submitted at a fixed past time
