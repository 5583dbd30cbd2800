"""Utilisation trends per pool on the capacity page (issue 21 item 11): hourly averages of the
per-minute samples over the last day, a sparkline per pool with its figures in words, and an
empty state in words where nothing was measured."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from monitoring.models import PoolSample
from monitoring.trends import TREND_HOURS, pool_trends, trend_start
from pools.services import pools as pool_services
from tests.conftest import make_document

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 12, 3, 12, 30, tzinfo=UTC)


def sample(pool, minute: datetime, *, capacity=16, allocated=None, util=None):
    PoolSample.objects.create(pool=pool, minute=minute, capacity_gpus=capacity, allocated_gpus=allocated, gpu_util_avg=util,
                              min_nodes=2, max_nodes=6)  # fmt: skip


@pytest.fixture
def pools(actors):
    mine = pool_services.pool_create(user=actors["lead"], document=make_document("train-pool-a", nodeCount={"min": 0, "max": 4}))
    theirs = pool_services.pool_create(user=actors["other_lead"], document=make_document("infer", nodeCount={"min": 0, "max": 4}))
    return mine, theirs


def test_each_hour_is_the_average_of_its_minutes_and_the_current_hour_is_the_last_slot(pools):
    mine, _ = pools
    hour = NOW.replace(minute=0)
    sample(mine, hour, allocated=4, util=20.0)  # 4 of 16 and 12 of 16: 16 of 32 GPUs, 50 %
    sample(mine, hour + timedelta(minutes=1), allocated=12, util=40.0)
    sample(mine, hour + timedelta(minutes=2), allocated=None, util=None)  # no figures: not counted
    sample(mine, hour - timedelta(hours=5), allocated=16, util=90.0)
    sample(mine, trend_start(NOW) - timedelta(minutes=1), allocated=0, util=0.0)  # before the window
    trend = pool_trends(pool_ids=[mine.pk], now=NOW)[mine.pk]
    assert trend.allocated.slots == TREND_HOURS and trend.allocated.measured == 2
    assert (trend.allocated.latest, trend.allocated.peak, trend.allocated.average) == (50.0, 100.0, 75.0)
    assert (trend.utilisation.latest, trend.utilisation.peak, trend.utilisation.average) == (30.0, 90.0, 60.0)


def test_a_pool_without_samples_has_empty_trends(pools):
    mine, theirs = pools
    sample(mine, NOW.replace(minute=0), allocated=8)
    trends = pool_trends(pool_ids=[mine.pk, theirs.pk], now=NOW)
    assert trends[theirs.pk].allocated.empty and trends[theirs.pk].utilisation.empty
    assert not trends[mine.pk].allocated.empty and trends[mine.pk].utilisation.empty  # no agent reports


def test_the_capacity_page_loads_its_trends_after_it_shows(client, actors, pools):
    client.force_login(actors["lead"])
    body = client.get("/monitoring/").content.decode()
    assert 'hx-get="/monitoring/trends/" hx-trigger="load"' in body and "Loading the trends" in body


def test_the_trends_fragment_draws_my_pools_and_states_their_figures(client, actors, pools, time_machine):
    mine, theirs = pools
    time_machine.move_to(NOW, tick=False)
    sample(mine, NOW.replace(minute=0), allocated=8, util=35.0)
    sample(theirs, NOW.replace(minute=0), allocated=16, util=99.0)
    client.force_login(actors["lead"])
    response = client.get("/monitoring/trends/", headers={"HX-Request": "true"})
    body = response.content.decode()
    assert response.status_code == 200 and "<h1>" not in body  # the fragment alone
    assert 'aria-label="GPUs allocated, hourly, last 24 hours: average 50.0%, peak 50.0%, latest 50.0%"' in body
    assert "average 35.0% · peak 35.0% · latest 35.0%" in body
    assert "Hourly averages of the last 24 hours" in body
    assert "infer" not in body and "99.0" not in body  # another team's pool


def test_the_trends_say_so_in_words_when_nothing_was_measured(client, actors, pools, time_machine):
    time_machine.move_to(NOW, tick=False)
    client.force_login(actors["lead"])
    body = client.get("/monitoring/trends/", headers={"HX-Request": "true"}).content.decode()
    assert "no capacity measured in this window" in body and "no agent reports in this window" in body and "<svg" not in body


def test_the_trends_take_the_same_queries_for_more_pools(client, actors, pools, time_machine):
    time_machine.move_to(NOW, tick=False)
    client.force_login(actors["admin"])
    with CaptureQueriesContext(connection) as few:
        client.get("/monitoring/trends/", headers={"HX-Request": "true"})
    for i in range(4):
        extra = pool_services.pool_create(user=actors["lead"], document=make_document(f"more-{i}", nodeCount={"min": 0, "max": 2}))
        sample(extra, NOW.replace(minute=0), allocated=1, util=10.0)
    with CaptureQueriesContext(connection) as many:
        client.get("/monitoring/trends/", headers={"HX-Request": "true"})
    assert len(many) == len(few)
