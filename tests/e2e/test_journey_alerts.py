"""Journey, issue 20 item 3 in the browser: a pool stays full, the capacity alert reaches the
lead's Alerts page; the lead opens the pool's alert rules from it, silences the not-ready rule
for a maintenance window with the form, sees the silence listed, and acknowledges the alert.
Every page is checked with axe on the way (conftest's `browse`)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from monitoring.alerts import alerts_evaluate
from monitoring.models import AlertSilence, PoolSample
from pools.models import Notification
from tests.pools.pod_helpers import pool_with_nodes

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def test_a_lead_finds_a_capacity_alert_silences_a_rule_and_acknowledges_it(browse, actors):
    pool = pool_with_nodes(actors["lead"], nodes=2, alerts={"allocationHigh": {"percent": 80, "for": "10m"}})
    now = timezone.now().replace(second=0, microsecond=0)
    PoolSample.objects.bulk_create([
        PoolSample(pool=pool, minute=now - timedelta(minutes=m), capacity_gpus=16, allocated_gpus=15, min_nodes=0, max_nodes=6)
        for m in range(11)
    ])  # fmt: skip
    assert [e.reason for e in alerts_evaluate(now=now + timedelta(seconds=30))] == ["HighGpuAllocation"]

    lead = browse("lead")
    lead.goto("/notifications/")
    assert "allocated GPUs above 80% of capacity for 10m" in lead.page.inner_text("main tbody")
    lead.follow("main a:has-text('Rules and silences')")
    assert lead.page.url.endswith(f"/pools/{pool.name}/alerts/")
    assert "allocated GPUs above 80% of capacity for 10m" in lead.page.inner_text("#alert-rules")
    assert "GPU allocation high" in lead.page.inner_text("#alert-episodes")

    lead.page.select_option("#id_rule", "NodesNotReady")
    lead.page.fill("#id_until", (timezone.now() + timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M"))
    lead.page.fill("#id_reason", "switch firmware upgrade")
    lead.follow("#silence-form button:has-text('Silence')")
    assert "silenced until" in lead.page.inner_text("main .messages")
    assert "switch firmware upgrade" in lead.page.inner_text("#alert-silences")
    assert AlertSilence.objects.get().rule == "NodesNotReady"

    lead.goto("/notifications/")
    lead.follow("main button:has-text('Acknowledge')")
    assert Notification.objects.get().acknowledged_by == actors["lead"]
