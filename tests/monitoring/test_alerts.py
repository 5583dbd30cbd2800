"""Watermark alert rules (issue 6 §6; seed T4): sustained conditions over per-minute samples
become one Warning event per window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from monitoring.alerts import alerts_evaluate
from monitoring.models import PoolSample
from pools.services import pools as pool_services
from tests.conftest import make_document

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture
def burst_pool(actors):
    return pool_services.pool_create(user=actors["lead"], document=make_document("burst-pool", nodeCount={"min": 0, "max": 6}))


def samples(pool, *, minutes: int, util=None, allocated=None, capacity: int = 16, every: int = 1):
    PoolSample.objects.bulk_create([
        PoolSample(pool=pool, minute=NOW - timedelta(minutes=m), capacity_gpus=capacity, allocated_gpus=allocated,
                   gpu_util_avg=util, min_nodes=0, max_nodes=6)
        for m in range(0, minutes + 1, every)
    ])


def test_utilisation_below_30_percent_for_24_hours_gives_the_t4_hint_once(burst_pool):
    samples(burst_pool, minutes=24 * 60, util=12.0, every=10)
    [event] = alerts_evaluate(now=NOW)
    assert (event.type, event.reason) == ("Warning", "LowGpuUtilization")
    assert "IO-bound data loading" in event.message and "fragmentation report" in event.message
    assert alerts_evaluate(now=NOW + timedelta(minutes=1)) == []  # not again within the window


def test_low_utilisation_for_less_than_24_hours_is_not_an_alert(burst_pool):
    samples(burst_pool, minutes=20 * 60, util=12.0, every=10)
    assert alerts_evaluate(now=NOW) == []


def test_one_busy_sample_in_the_day_keeps_the_alert_quiet(burst_pool):
    samples(burst_pool, minutes=24 * 60, util=12.0, every=10)
    PoolSample.objects.filter(pool=burst_pool, minute=NOW - timedelta(hours=5)).update(gpu_util_avg=80.0)
    assert alerts_evaluate(now=NOW) == []


def test_allocation_above_90_percent_for_10_minutes_is_an_alert(burst_pool):
    samples(burst_pool, minutes=10, allocated=15, capacity=16)
    [event] = alerts_evaluate(now=NOW)
    assert event.reason == "HighGpuAllocation" and "94%" in event.message


def test_allocation_alerts_wait_for_allocation_data(burst_pool):
    samples(burst_pool, minutes=30, allocated=None)
    assert alerts_evaluate(now=NOW) == []
