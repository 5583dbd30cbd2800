"""Capacity alerts per pool (issue 20 item 3; seed G comparison table "capacity water-level
alerts", T4, O4): each rule fires at the pool's own threshold and duration from `spec.alerts`,
not before; the defaults hold when the spec says nothing; one lasting condition is one event and
one notification; a silence keeps the event and tells nobody."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from django.core import mail
from django.db import connection
from django.test.utils import CaptureQueriesContext

from monitoring.alerts import alerts_evaluate
from monitoring.models import AlertEpisode, AlertSilence, PoolSample
from monitoring.services import pool_samples_rollup
from pools.core.alerting import RULES
from pools.models import Notification, PoolEvent
from pools.models.pods import Pod
from pools.services import pools as pool_services
from tests.conftest import make_document
from tests.pools.pod_helpers import pool_with_nodes, submit

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
TRAIN_NODE_LABELS = {"pool": "train", "gpu-class": "a100"}
REQUIREMENT_ID = re.compile(r"\b[PGDOCT]\d+\b")


def make_pool(actors, name="burst-pool", **alerts):
    spec = {"nodeCount": {"min": 0, "max": 6}}
    if alerts:
        spec["alerts"] = alerts
    return pool_services.pool_create(user=actors["lead"], document=make_document(name, **spec))


def samples(pool, *, minutes: int, at: datetime = NOW, every: int = 1, **fields):
    """One sample a minute (or every `every`) from `minutes` before `at` up to `at`."""
    values = {"capacity_gpus": 16, "min_nodes": 0, "max_nodes": 6, **fields}
    PoolSample.objects.bulk_create(
        [PoolSample(pool=pool, minute=at - timedelta(minutes=m), **values) for m in range(0, minutes + 1, every)],
        ignore_conflicts=True,
    )


def reasons(events):
    return [(e.pool.name, e.reason) for e in events]


def test_every_rule_has_a_database_choice():
    from monitoring.models import ALERT_RULE_CHOICES

    assert [r for r, _ in ALERT_RULE_CHOICES] == [info.reason for info in RULES]


# --- thresholds and durations from the spec -------------------------------------------------


def test_allocation_fires_above_the_pools_percent_after_its_duration_not_before(actors):
    pool = make_pool(actors, allocationHigh={"percent": 75, "for": "20m"})
    samples(pool, minutes=19, allocated_gpus=13)  # 81% for 19 minutes
    assert alerts_evaluate(now=NOW) == []
    samples(pool, minutes=20, allocated_gpus=13)
    [event] = alerts_evaluate(now=NOW)
    assert (event.type, event.reason) == ("Warning", "HighGpuAllocation")
    assert "above 75% of capacity for 20m" in event.message and "81%" in event.message


def test_the_advice_on_capacity_follows_whether_the_pool_bursts(actors):
    """Raising nodeCount.max adds no node to a pool that does not burst: its advice is the
    baseline or burst; a bursting pool's is the max (as Diagnose's)."""
    fixed = make_pool(actors, name="fixed-pool", allocationHigh={"percent": 75, "for": "10m"})
    bursting = pool_services.pool_create(user=actors["lead"], document=make_document(
        "bursting-pool", nodeCount={"min": 0, "max": 6}, burst={"enabled": True}, alerts={"allocationHigh": {"percent": 75, "for": "10m"}}))
    assert (fixed.bursts, bursting.bursts) == (False, True)
    for pool in (fixed, bursting):
        samples(pool, minutes=10, allocated_gpus=13)
    messages = {e.pool.name: e.message for e in alerts_evaluate(now=NOW)}
    assert "the pool does not burst: raise nodeCount.min for more monthly nodes, or enable burst" in messages["fixed-pool"]
    assert "raise nodeCount.max so the autoscaler may add burst nodes" in messages["bursting-pool"]
    capped = pool_services.pool_create(user=actors["lead"], document=make_document(
        "capped-pool", nodeCount={"min": 0, "max": 6}, burst={"enabled": True, "maxNodes": 2}, alerts={"allocationHigh": {"percent": 75, "for": "10m"}}))
    samples(capped, minutes=10, allocated_gpus=13)
    [event] = [e for e in alerts_evaluate(now=NOW + timedelta(minutes=1)) if e.pool_id == capped.pk]
    assert "raise nodeCount.max (and spec.burst.maxNodes, which holds it to 2 burst node(s)) so the autoscaler" in event.message


def test_allocation_at_exactly_the_percent_is_not_above_it(actors):
    pool = make_pool(actors, allocationHigh={"percent": 75, "for": "10m"})
    samples(pool, minutes=10, allocated_gpus=12)  # 75%
    assert alerts_evaluate(now=NOW) == []


def test_the_default_allocation_rule_is_90_percent_for_10_minutes(actors):
    pool = make_pool(actors)
    samples(pool, minutes=9, allocated_gpus=15)  # 94%
    assert alerts_evaluate(now=NOW) == []
    samples(pool, minutes=10, allocated_gpus=15)
    assert reasons(alerts_evaluate(now=NOW)) == [("burst-pool", "HighGpuAllocation")]


def test_low_utilisation_follows_the_pools_percent_and_window(actors):
    pool = make_pool(actors, utilizationLow={"percent": 50, "for": "2h"})
    samples(pool, minutes=119, gpu_util_avg=45.0)
    assert alerts_evaluate(now=NOW) == []
    samples(pool, minutes=120, gpu_util_avg=45.0)
    [event] = alerts_evaluate(now=NOW)
    assert event.reason == "LowGpuUtilization" and "below 50% for 2h" in event.message
    assert "IO-bound data loading" in event.message  # the article's advice for low utilisation


def test_the_default_low_utilisation_rule_is_30_percent_for_a_day(actors):
    pool = make_pool(actors)
    samples(pool, minutes=24 * 60, every=10, gpu_util_avg=31.0)
    assert alerts_evaluate(now=NOW) == []
    PoolSample.objects.filter(pool=pool).update(gpu_util_avg=29.0)
    assert reasons(alerts_evaluate(now=NOW)) == [("burst-pool", "LowGpuUtilization")]


def test_nodes_not_ready_fire_after_the_pools_duration_and_count(actors):
    pool = make_pool(actors, nodesNotReady={"count": 2, "for": "3m"})
    samples(pool, minutes=10, not_ready_nodes=1)
    assert alerts_evaluate(now=NOW) == []  # one node, the pool asks about two
    PoolSample.objects.filter(pool=pool).delete()
    samples(pool, minutes=2, not_ready_nodes=2)
    assert alerts_evaluate(now=NOW) == []
    samples(pool, minutes=3, not_ready_nodes=2)
    [event] = alerts_evaluate(now=NOW)
    assert event.reason == "NodesNotReady" and "2 or more nodes not ready for 3m" in event.message


def test_the_default_not_ready_rule_is_any_node_for_5_minutes(actors):
    pool = make_pool(actors)
    samples(pool, minutes=4, not_ready_nodes=1)
    assert alerts_evaluate(now=NOW) == []
    samples(pool, minutes=5, not_ready_nodes=1)
    assert reasons(alerts_evaluate(now=NOW)) == [("burst-pool", "NodesNotReady")]


def test_the_rollup_counts_lost_and_repairing_nodes_as_not_ready(actors, make_node):
    pool = make_pool(actors)
    make_node("b-0", target=pool)
    make_node("b-1", target=pool, phase="Unknown")
    make_node("b-2", target=pool, phase="Repairing")
    make_node("b-3", target=pool, phase="Cordoned")  # chosen, not a fault
    pool_samples_rollup(now=NOW)
    assert PoolSample.objects.get(pool=pool).not_ready_nodes == 2


def test_a_pod_that_fits_the_pool_and_waited_past_15_minutes_is_an_alert(actors):
    pool_with_nodes(actors["lead"], nodes=1, node_labels=TRAIN_NODE_LABELS)
    pod = submit(actors["member"], "waiting", gpus=2)
    submit(actors["member"], "elsewhere", pool_affinity="infer", tolerate="infer")  # another pool's pod
    Pod.objects.filter(pk=pod.pk).update(submitted_at=NOW - timedelta(minutes=14), pending_since=NOW - timedelta(minutes=14))
    Pod.objects.exclude(pk=pod.pk).update(submitted_at=NOW - timedelta(hours=3), pending_since=NOW - timedelta(hours=3))
    assert alerts_evaluate(now=NOW) == []
    [event] = alerts_evaluate(now=NOW + timedelta(minutes=2))
    assert event.reason == "PodsPendingTooLong" and "more than 15m" in event.message
    assert "algorithm/waiting, for 16m" in event.message
    # The pool does not burst: waiting brings no node, and stock or prewarming is not the advice.
    assert "the pool does not burst, so no node is added for them; raise nodeCount.min" in event.message


def test_pending_follows_the_pools_older_than(actors):
    pool_with_nodes(actors["lead"], nodes=1, node_labels=TRAIN_NODE_LABELS, alerts={"pendingPods": {"olderThan": "45m"}})
    pod = submit(actors["member"], "waiting", gpus=2)
    Pod.objects.filter(pk=pod.pk).update(submitted_at=NOW - timedelta(minutes=44), pending_since=NOW - timedelta(minutes=44))
    assert alerts_evaluate(now=NOW) == []
    assert reasons(alerts_evaluate(now=NOW + timedelta(minutes=1))) == [("train-pool-a", "PodsPendingTooLong")]


def test_a_disabled_rule_stays_quiet(actors):
    pool = make_pool(actors, allocationHigh={"enabled": False}, nodesNotReady={"enabled": False})
    samples(pool, minutes=30, allocated_gpus=16, not_ready_nodes=3)
    assert alerts_evaluate(now=NOW) == []


def test_each_pool_has_its_own_thresholds_in_one_evaluation(actors):
    strict = make_pool(actors, "strict-pool", allocationHigh={"percent": 50, "for": "5m"})
    default = make_pool(actors, "default-pool")
    for pool in (strict, default):
        samples(pool, minutes=6, allocated_gpus=10)  # 62%
    assert reasons(alerts_evaluate(now=NOW)) == [("strict-pool", "HighGpuAllocation")]


# --- once per episode, delivery, silences ---------------------------------------------------


def test_a_lasting_condition_is_one_event_and_one_notification_mailed_to_the_leads(actors, django_capture_on_commit_callbacks):
    actors["lead"].email = "lead@example.com"
    actors["lead"].save()
    pool = make_pool(actors)
    samples(pool, minutes=60, at=NOW + timedelta(minutes=30), not_ready_nodes=1)
    with django_capture_on_commit_callbacks(execute=True):
        fired = [alerts_evaluate(now=NOW + timedelta(minutes=m)) for m in range(0, 30, 3)]
    assert [len(f) for f in fired] == [1] + [0] * 9
    assert PoolEvent.objects.filter(pool=pool, reason="NodesNotReady").count() == 1
    [notification] = Notification.objects.filter(pool=pool)
    assert notification.kind == "NodesNotReady" and notification.delivered_at is not None
    assert notification.message.startswith("Pool burst-pool: a node not ready for 5m")
    assert not REQUIREMENT_ID.search(notification.message)
    assert notification.payload["rule"] == "nodesNotReady" and notification.payload["window"] == "5m"
    assert [m.to for m in mail.outbox] == [["lead@example.com"]]
    assert AlertEpisode.objects.get(pool=pool).last_seen_at == NOW + timedelta(minutes=27)


def test_the_condition_coming_back_after_it_ended_is_a_new_episode(actors):
    pool = make_pool(actors)
    samples(pool, minutes=5, not_ready_nodes=1)
    assert len(alerts_evaluate(now=NOW)) == 1
    samples(pool, minutes=0, at=NOW + timedelta(minutes=1), not_ready_nodes=0)  # recovered
    assert alerts_evaluate(now=NOW + timedelta(minutes=1)) == []
    later = NOW + timedelta(minutes=30)
    samples(pool, minutes=5, at=later, not_ready_nodes=1)
    assert len(alerts_evaluate(now=later)) == 1
    assert Notification.objects.filter(pool=pool, kind="NodesNotReady").count() == 2


def test_a_silence_keeps_the_event_and_tells_nobody_until_it_ends(actors, django_capture_on_commit_callbacks):
    actors["lead"].email = "lead@example.com"
    actors["lead"].save()
    pool = make_pool(actors)
    AlertSilence.objects.create(pool=pool, rule="NodesNotReady", until=NOW + timedelta(minutes=10), reason="rack move", created_by=actors["lead"])
    samples(pool, minutes=40, at=NOW + timedelta(minutes=20), not_ready_nodes=1)
    with django_capture_on_commit_callbacks(execute=True):
        [event] = alerts_evaluate(now=NOW)
        for minute in range(1, 10):  # every minute, as the rollup task runs
            assert alerts_evaluate(now=NOW + timedelta(minutes=minute)) == []
    assert event.reason == "NodesNotReady"
    assert not Notification.objects.exists() and mail.outbox == []
    assert AlertEpisode.objects.get().notified_at is None
    with django_capture_on_commit_callbacks(execute=True):
        for minute in range(10, 13):  # the silence is over at minute 10 and it still holds
            alerts_evaluate(now=NOW + timedelta(minutes=minute))
    [notification] = Notification.objects.all()
    assert "still holding after a silence ended" in notification.message and len(mail.outbox) == 1
    assert PoolEvent.objects.filter(pool=pool, reason="NodesNotReady").count() == 1


def test_a_silence_of_one_rule_leaves_the_others_told(actors):
    pool = make_pool(actors)
    AlertSilence.objects.create(pool=pool, rule="LowGpuUtilization", until=NOW + timedelta(days=1), reason="quiet week", created_by=actors["lead"])
    samples(pool, minutes=10, not_ready_nodes=1, allocated_gpus=16)
    assert sorted(reasons(alerts_evaluate(now=NOW))) == [("burst-pool", "HighGpuAllocation"), ("burst-pool", "NodesNotReady")]
    assert Notification.objects.count() == 2


def test_the_teams_lead_acknowledges_a_capacity_alert_on_the_alerts_page(actors, browser):
    pool = make_pool(actors)
    samples(pool, minutes=10, allocated_gpus=16)
    alerts_evaluate(now=NOW)
    notification = Notification.objects.get(kind="HighGpuAllocation")
    page = browser("lead").get("/notifications/")
    assert f"/pools/{pool.name}/alerts/" in page.content.decode()
    assert browser("member").post(f"/notifications/{notification.pk}/acknowledge/").status_code == 403
    assert browser("lead").post(f"/notifications/{notification.pk}/acknowledge/").status_code == 302
    notification.refresh_from_db()
    assert notification.acknowledged_by == actors["lead"]


# --- statements independent of the pool count -----------------------------------------------


def fleet(actors, names, **fields):
    for name in names:
        samples(make_pool(actors, name), minutes=15, at=NOW + timedelta(minutes=2), **fields)


def statements(now):
    with CaptureQueriesContext(connection) as captured:
        alerts_evaluate(now=now)
    return len(captured.captured_queries)


def test_a_quiet_fleet_costs_the_same_statements_whatever_its_size(actors):
    quiet = {"allocated_gpus": 2.0, "gpu_util_avg": 80.0, "not_ready_nodes": 0}
    fleet(actors, ["pool-0", "pool-1"], **quiet)
    small = statements(NOW)
    fleet(actors, [f"more-{i}" for i in range(6)], **quiet)
    assert statements(NOW) == small


def test_lasting_alerts_cost_the_same_statements_whatever_the_fleet_size(actors):
    fleet(actors, ["pool-0", "pool-1"], allocated_gpus=16.0, not_ready_nodes=1)
    alerts_evaluate(now=NOW)
    small = statements(NOW + timedelta(minutes=1))
    fleet(actors, [f"more-{i}" for i in range(6)], allocated_gpus=16.0, not_ready_nodes=1)
    alerts_evaluate(now=NOW + timedelta(minutes=1))  # the new pools' episodes open
    assert statements(NOW + timedelta(minutes=2)) == small
    assert AlertEpisode.objects.count() == 16
