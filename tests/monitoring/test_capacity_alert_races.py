"""Capacity alerts under failures and races (seed T4, O4, T6): an episode opens in one
transaction with its event and its notification, so a worker dying half-way loses neither;
a (pool, rule) has at most one open episode, so two workers either side of a minute boundary
tell the team once; the migration that brought the rule ends the duplicates stored before it."""

from __future__ import annotations

import time
from datetime import timedelta
from functools import partial

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

from monitoring import alerts
from monitoring.models import AlertEpisode, AlertSilence
from pools.models import Notification, PoolEvent
from tests.monitoring.test_capacity_alerts import NOW, make_pool, samples
from tests.race import Race

pytestmark = pytest.mark.django_db


def test_a_worker_dying_before_the_event_leaves_no_episode_and_the_next_run_tells_once(actors, monkeypatch):
    pool = make_pool(actors, allocationHigh={"percent": 75, "for": "10m"})
    samples(pool, minutes=12, at=NOW + timedelta(minutes=1), allocated_gpus=13)
    real, deaths = alerts.event_record, []

    def dies_once(**kwargs):
        if not deaths:
            deaths.append(kwargs["reason"])
            raise SystemExit("worker killed")
        return real(**kwargs)

    monkeypatch.setattr(alerts, "event_record", dies_once)
    with pytest.raises(SystemExit):
        alerts.alerts_evaluate(now=NOW)
    assert deaths == ["HighGpuAllocation"] and not AlertEpisode.objects.exists()
    [event] = alerts.alerts_evaluate(now=NOW + timedelta(seconds=30))  # the task's retry
    assert alerts.alerts_evaluate(now=NOW + timedelta(minutes=1)) == []
    assert event.reason == "HighGpuAllocation" and PoolEvent.objects.filter(pool=pool, reason="HighGpuAllocation").count() == 1
    [notification] = Notification.objects.filter(pool=pool)
    assert notification.kind == "HighGpuAllocation" and AlertEpisode.objects.get().notified_at is not None


def test_an_episode_over_is_ended_when_the_rule_holds_again_and_one_stays_open(actors):
    pool = make_pool(actors)
    samples(pool, minutes=5, not_ready_nodes=1)
    alerts.alerts_evaluate(now=NOW)
    later = NOW + timedelta(minutes=30)
    samples(pool, minutes=5, at=later, not_ready_nodes=1)
    assert len(alerts.alerts_evaluate(now=later)) == 1
    old, new = AlertEpisode.objects.order_by("started_at")
    assert (old.ended_at, new.ended_at) == (NOW, None)
    with pytest.raises(IntegrityError), transaction.atomic():  # the database keeps it at one
        AlertEpisode.objects.create(pool=pool, rule="NodesNotReady", started_at=later + timedelta(minutes=1), last_seen_at=later)


@pytest.mark.django_db(transaction=True)
def test_two_workers_either_side_of_a_minute_open_one_episode_and_tell_once(actors):
    if connection.vendor != "postgresql":
        pytest.skip("two writers at once: PostgreSQL")
    pool = make_pool(actors, allocationHigh={"percent": 75, "for": "10m"})
    samples(pool, minutes=13, at=NOW + timedelta(minutes=1), allocated_gpus=13)
    race = Race(*[partial(alerts.alerts_evaluate, now=NOW + timedelta(seconds=s)) for s in (59.9, 60.1)])
    with transaction.atomic(), connection.cursor() as cursor:
        # Both workers read the open episodes, then wait here for the silences: neither has
        # opened an episode when both go on.
        cursor.execute(f"LOCK TABLE {AlertSilence._meta.db_table} IN ACCESS EXCLUSIVE MODE")
        race.start()
        waiting, deadline = 0, time.monotonic() + 30
        while waiting < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
            cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = %s::regclass", [AlertSilence._meta.db_table])
            waiting = cursor.fetchone()[0]
        assert waiting == 2
    fired = [event for events in race.join() for event in events]  # raises what either worker met
    assert len(fired) == 1 and AlertEpisode.objects.count() == 1
    assert PoolEvent.objects.filter(pool=pool, reason="HighGpuAllocation").count() == 1
    assert Notification.objects.filter(pool=pool).count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_migration_ends_every_episode_but_the_latest_of_its_pool_and_rule(actors):
    pool = make_pool(actors)
    executor = MigrationExecutor(connection)
    try:
        executor.migrate([("monitoring", "0005_alert_episodes_and_silences")])
        Episode = executor.loader.project_state([("monitoring", "0005_alert_episodes_and_silences")]).apps.get_model("monitoring", "AlertEpisode")
        for minutes, rule in ((0, "NodesNotReady"), (1, "NodesNotReady"), (2, "NodesNotReady"), (0, "HighGpuAllocation")):
            at = NOW + timedelta(minutes=minutes)
            Episode.objects.create(pool_id=pool.pk, rule=rule, started_at=at, last_seen_at=at + timedelta(seconds=30))
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    ended = {(e.rule, e.started_at): e.ended_at for e in AlertEpisode.objects.all()}
    assert ended == {
        ("NodesNotReady", NOW): NOW + timedelta(seconds=30),
        ("NodesNotReady", NOW + timedelta(minutes=1)): NOW + timedelta(minutes=1, seconds=30),
        ("NodesNotReady", NOW + timedelta(minutes=2)): None,
        ("HighGpuAllocation", NOW): None,
    }
