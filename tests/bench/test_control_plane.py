"""The control-plane benchmark's regression guard (issue 9 item 1): one full pass of reconcile +
autoscale + metering costs the same number of SQL statements over 5 pools as over 20 of the
same shape. The loops load every pool's state in a fixed number of queries and write in bulk;
a change that brings back a query per pool (or per node, or per pod) fails here long before
anyone runs bench/control_plane.py at 1,000 pools."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from django.db import connection, transaction
from django.db.models import Sum

from bench.control_plane import measure_pass
from bench.control_plane_fleet import NOW, Shape, build, costs_history
from billing.hours import HOUR, last_complete_hour
from billing.models import CostDay, CostRecord, MeterRun, UsageRecord
from pools.models import GpuNodePool, Node, Pod, PoolEvent

# The bench's per-pool shape, scaled down so that 20 pools build and meter in seconds.
SMALL = Shape(pools=5, teams=2, monthly_ready=3, provisioning=1, burst_ready=1, pods_per_node=4, pending_per_pool=2,
              draining=0, events_per_pool=2, sample_minutes=3)  # fmt: skip


def one_pass(shape: Shape) -> tuple[dict[str, int], dict[str, int]]:
    """Statements per step of one pass over a fresh fleet, and what the pass did; rolled back."""
    with transaction.atomic():
        fleet = build(shape)
        assert (fleet.pools, fleet.nodes) == (shape.pools, shape.pools * shape.nodes_per_pool)
        events = PoolEvent.objects.count()
        steps = measure_pass(now=NOW, hour=last_complete_hour(NOW))
        done = {
            "events": PoolEvent.objects.count() - events,
            "usage": UsageRecord.objects.count(),
            "workloads": UsageRecord.objects.filter(kind="pod").count(),
            "pods": sum(UsageRecord.objects.filter(kind="pod").values_list("pod_count", flat=True)),
            "costs": CostRecord.objects.count(),
            "phases": len(set(GpuNodePool.objects.values_list("phase", flat=True))),
        }
        transaction.set_rollback(True)
    return {s.name: s.queries for s in steps}, done


@pytest.mark.django_db
def test_a_steady_pass_costs_the_same_statements_at_5_and_at_20_pools():
    few, did_few = one_pass(SMALL)
    many, did_many = one_pass(replace(SMALL, pools=20))
    assert few == many, (few, many)
    # The pass did its work at both sizes: every node and pod metered, nothing else changed.
    pods = SMALL.monthly_ready + SMALL.burst_ready
    for size, did in ((5, did_few), (20, did_many)):
        # One workload per pool: one record per node it runs on, standing for its pods there.
        assert (did["workloads"], did["pods"]) == (size * pods, size * pods * SMALL.pods_per_node)
        assert did["usage"] > size * (SMALL.nodes_per_pool - SMALL.provisioning + pods)
        assert did["costs"] >= size * 4 and did["events"] == 0  # usage, idle, fees per pool
    assert many["pass total"] < 120  # a fixed budget, whatever the fleet


@pytest.mark.django_db
def test_the_same_activity_costs_the_same_statements_whatever_the_number_of_pools():
    """Two draining nodes (pods evicted, the autoscaler ordering burst nodes for them) in a
    fleet of 5 pools and in one of 20: the statements are those of the changes, not of pools."""
    busy = replace(SMALL, draining=2)
    few, did_few = one_pass(busy)
    many, did_many = one_pass(replace(busy, pools=20))
    assert few == many, (few, many)
    assert did_few["events"] == did_many["events"] > 0
    assert Node.objects.count() == Pod.objects.count() == 0  # rolled back


@pytest.mark.django_db
def test_the_report_says_how_fast_the_machine_was(capsys):
    """Runs on a shared machine differ by a factor of two with the same code: the table carries
    the machine's speed before and after, measured the same way each time."""
    from bench.control_plane import machine_speed, report

    speed = machine_speed(adds=100_000, trips=3, times=2)
    assert re.fullmatch(r"machine speed: 0.1 M-add Python loop \d+ ms, `SELECT 1` round trip \d+ µs \(\d+ CPUs\)", speed), speed
    report([], requests=5, speeds=(speed, speed))
    assert capsys.readouterr().out.splitlines()[1:] == [f"before the runs, {speed}", f"after the runs, {speed}"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="worker processes share the database: PostgreSQL (the bench's)")
def test_the_pass_as_two_queue_workers_run_it_meters_the_hour_whole_in_parts():
    """`--workers 2` (issue 23 item 3): the two loops at once, each split in two parts that the
    two processes take from one queue, then the hour's metering in two parts at once; every
    pool is reconciled once, and the parts add up to the hour, as one worker would meter it."""
    from bench.control_plane import QueueWorkers, measure_pass_workers

    build(SMALL)
    hour = last_complete_hour(NOW)
    written = costs_history(now=NOW, days=2)  # the metered hours before, back to two days ago
    assert written == CostRecord.objects.count() == 47 * CostRecord.objects.filter(hour=hour - HOUR).count()
    assert MeterRun.objects.filter(hour__lt=hour).count() == 47 and CostDay.objects.filter(day=(hour - 47 * HOUR).date()).exists()
    assert CostDay.objects.aggregate(s=Sum("amount"))["s"] == CostRecord.objects.aggregate(s=Sum("amount"))["s"] > 0  # the rollup is the records' sum
    workers = QueueWorkers(2)
    try:
        steps = {s.name: s for s in measure_pass_workers(now=NOW, hour=hour, workers=workers)}
    finally:
        workers.close()
    assert list(steps) == ["reconcile", "autoscale", "reconcile + autoscale", "meter", "pass total"]
    assert steps["reconcile + autoscale"].queries == steps["reconcile"].queries + steps["autoscale"].queries
    claimed = [int(note.split()[0]) for note in steps["reconcile"].note.split(": ", 1)[1].split("; ")]
    assert len(claimed) == 2 and sum(claimed) == SMALL.pools
    assert sorted(MeterRun.objects.filter(hour=hour).values_list("part", "parts")) == [(0, 2), (1, 2)]
    pods = SMALL.monthly_ready + SMALL.burst_ready
    counted = sum(UsageRecord.objects.filter(kind="pod", hour=hour).values_list("pod_count", flat=True))
    assert counted == SMALL.pools * pods * SMALL.pods_per_node
    assert "completed the hour: " in steps["meter"].note and steps["meter"].note.count("'complete': 1") == 1  # exactly one part
