"""Watermarks (issue 6 §6; the comparison table's capacity water level): per-minute pool
samples, idempotent per (pool, minute), from a service, a command and a scheduled task."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.core.management import call_command
from django_q.models import Schedule

from monitoring import services, tasks
from monitoring.models import PoolSample
from pools.services import pools as pool_services
from tests.conftest import make_document
from tests.monitoring.conftest import report

NOW = datetime(2026, 11, 30, 6, 30, 42, tzinfo=UTC)


@pytest.fixture
def burst_pool(actors):
    return pool_services.pool_create(user=actors["lead"], document=make_document("burst-pool", nodeCount={"min": 0, "max": 6}))


def test_a_rollup_samples_capacity_memory_and_nodes_by_phase_at_the_minute(burst_pool, make_node, agent):
    node = make_node("b-0", target=burst_pool)
    make_node("b-1", target=burst_pool, phase="Provisioning", billing="on_demand")
    agent(node).post("/api/agent/v1/reports/", {"reports": [report(1, used=61440)]}, format="json")
    services.pool_samples_rollup(now=NOW)
    sample = PoolSample.objects.get(pool=burst_pool)
    assert sample.minute == datetime(2026, 11, 30, 6, 30, tzinfo=UTC)
    assert (sample.capacity_gpus, sample.gpu_memory_used_pct, sample.gpu_util_avg) == (8, 75.0, 75.0)
    assert sample.nodes_by_phase == {"Ready": 1, "Provisioning": 1}
    assert (sample.min_nodes, sample.max_nodes) == (0, 6)
    assert sample.allocated_gpus == 0.0 and sample.pending_pods == 0


def test_a_rollup_samples_allocated_gpus_queued_pods_and_nodes_by_billing(burst_pool, make_node, teams):
    from pools.models.pods import Pod

    node = make_node("b-0", target=burst_pool)
    toleration = [{"key": "pool", "operator": "Equal", "value": "train", "effect": "NoSchedule"}]
    Pod.objects.create(namespace="a", name="whole", team=teams["algorithm"], phase="Running", node=node, gpu_count=2, gpu_milli=1000)
    Pod.objects.create(namespace="a", name="share", team=teams["algorithm"], phase="Running", node=node, gpu_count=1, gpu_milli=460)
    Pod.objects.create(namespace="a", name="queued", team=teams["algorithm"], gpu_count=1, gpu_milli=1000, tolerations=toleration)
    Pod.objects.create(namespace="a", name="untolerated", team=teams["algorithm"], gpu_count=1, gpu_milli=1000)
    Pod.objects.create(namespace="b", name="other-team", team=teams["inference"], gpu_count=1, gpu_milli=1000, tolerations=toleration)
    type(burst_pool).objects.filter(pk=burst_pool.pk).update(node_counts={"monthly": {"desired": 1, "current": 1, "ready": 1}})
    services.pool_samples_rollup(now=NOW)
    sample = PoolSample.objects.get(pool=burst_pool)
    assert sample.allocated_gpus == 2.46  # a share counts its milli / 1000
    assert sample.pending_pods == 1  # only the team's pods that would fit the pool's nodes
    assert sample.node_counts["monthly"] == {"desired": 1, "current": 1, "ready": 1}


def test_rolling_up_the_same_minute_twice_keeps_one_sample(burst_pool, make_node):
    make_node("b-0", target=burst_pool)
    services.pool_samples_rollup(now=NOW)
    make_node("b-1", target=burst_pool)
    services.pool_samples_rollup(now=NOW.replace(second=59))
    assert PoolSample.objects.filter(pool=burst_pool).count() == 1
    assert PoolSample.objects.get(pool=burst_pool).capacity_gpus == 8
    services.pool_samples_rollup(now=NOW.replace(minute=31))
    assert PoolSample.objects.filter(pool=burst_pool).count() == 2


def test_the_rollup_command_runs_once(burst_pool, capsys):
    call_command("rollup", "--once")
    assert "sampled" in capsys.readouterr().out
    assert PoolSample.objects.filter(pool=burst_pool).count() == 1


def test_the_rollup_is_scheduled_every_minute_and_the_task_is_the_service(burst_pool):
    schedule = Schedule.objects.get(name="monitoring.rollup_pool_samples")
    assert (schedule.func, schedule.minutes) == ("monitoring.tasks.rollup_pool_samples", 1)
    assert tasks.rollup_pool_samples() >= 1


def test_raw_reports_past_their_retention_are_pruned_and_the_rest_kept(node, settings):
    from datetime import timedelta

    from django.utils import timezone

    from monitoring.models import NodeReport

    settings.EBCLOUD_AGENT_REPORT_RETENTION_HOURS = 72
    now = timezone.now()
    ages = [100, 90, 80, 73, 71, 10, 1]  # hours; inserted oldest first, as the ingest does
    NodeReport.objects.bulk_create([NodeReport(node=node, seq=i + 1, at=now, received_at=now - timedelta(hours=h)) for i, h in enumerate(ages)])
    assert services.node_reports_prune(now=now) == 4
    assert list(NodeReport.objects.values_list("seq", flat=True)) == [5, 6, 7]
    assert services.node_reports_prune(now=now) == 0


def test_pruning_deletes_a_bounded_chunk_per_call(node):
    from datetime import timedelta

    from django.utils import timezone

    from monitoring.models import NodeReport

    now = timezone.now()
    NodeReport.objects.bulk_create([NodeReport(node=node, seq=i + 1, at=now, received_at=now - timedelta(days=30)) for i in range(10)])
    assert services.node_reports_prune(now=now, max_rows=4) == 4
    assert services.node_reports_prune(now=now, max_rows=4) == 4
    assert services.node_reports_prune(now=now, max_rows=4) == 2


def test_a_notification_that_cannot_be_mailed_stops_neither_the_task_nor_the_pruning(node, teams, settings):
    """Fixed bug: the task sent the due notifications before pruning, and a mail the relay
    refused raised out of it every minute, so raw reports were never pruned again."""
    from datetime import timedelta

    from monitoring.models import NodeReport
    from pools.models import Notification
    from pools.services.notifications import notification_raise
    from tests.pools.mail_helpers import smtp_relay

    settings.EBCLOUD_ALERT_EMAILS, settings.EBCLOUD_ALERT_WEBHOOK_URL = ["gone@example.com"], ""
    NodeReport.objects.bulk_create([NodeReport(node=node, seq=i + 1, at=NOW, received_at=NOW - timedelta(days=30)) for i in range(3)])
    with smtp_relay(settings) as relay:
        relay.refused = {"gone@example.com"}
        notification_raise(team=teams["algorithm"], kind="HighGpuAllocation", message="Pool p is full", key="k", now=NOW)
        for minute in range(3):  # its on-commit delivery never ran: the task's redelivery tries it
            assert tasks.rollup_pool_samples(now=NOW + timedelta(minutes=minute)) == 1
    assert not NodeReport.objects.exists()
    assert PoolSample.objects.filter(pool=node.pool).count() == 3
    told = Notification.objects.get()
    assert (told.attempts, told.delivered_at) == (2, None)  # at 0 and 1 min; the third waits for 3 min
    assert told.last_error == "mail: the mail server refused 1 recipient(s)" and relay.messages == []
