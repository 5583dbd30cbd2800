"""Issue 9 §2, metering: two `manage.py meter` workers, one `kill -9`ed mid-hour (seed C1, C2).

Each hour is claimed by its `MeterRun` row, inserted in the transaction that writes the hour's
usage and cost rows. A worker killed inside that transaction leaves nothing: the other worker,
waiting on the claim, meters the hour itself. A catch-up killed between two hours, while another
worker meters the latest hour, leaves earlier hours for the restart to fill: every hour is
metered exactly once, no usage record for a (node, hour) twice, no cost record twice.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db.models import Count, Sum

from billing.models import CostDay, CostRecord, MeterRun, UsageRecord
from tests.billing.billing_helpers import HOUR, T0, node, pod, pool
from tests.chaos.workers import CHAOS, chaos_round, worker_env

pytestmark = CHAOS

NOW = T0 + 4 * HOUR + timedelta(minutes=5)  # the workers' clock: hours T0 .. T0+3h are complete
HOURS = [T0 + i * HOUR for i in range(4)]


@pytest.fixture
def fleet(actors, teams):
    """A monthly and an on-demand node with pods; metering is up to date until T0 - 1h."""
    p = pool(actors["lead"])
    monthly = node(p, "n-0", start=T0 - 24 * HOUR)
    burst = node(p, "od-0", billing="on_demand", created=T0 - HOUR)
    pod(teams["algorithm"], monthly, "llm", gpus=4, labels={"project": "llm"}, started=T0 - HOUR)
    pod(teams["algorithm"], burst, "etl", gpus=8, labels={"project": "etl"}, started=T0 - HOUR)
    MeterRun.objects.create(hour=T0 - HOUR)  # the hourly task ran until then
    return p


@pytest.fixture
def env():
    return worker_env(CHAOS_NOW=NOW.isoformat())


def test_a_worker_killed_inside_the_hours_transaction_leaves_the_hour_to_the_other_once(fleet, env):
    last = HOURS[-1]
    kill = {"target": "billing.services:cost_records_for", "when": "before"}  # usage rows written, not committed
    chaos = chaos_round(["meter", "--once"], kill=kill, env=env)
    assert chaos.normal_blocked, "the other worker waited on the killed worker's claim of the hour"
    assert f"{last:%Y-%m-%dT%H}:00Z metered" in chaos.normal.stdout

    restarted = chaos.restarted.run()
    assert f"{last:%Y-%m-%dT%H}:00Z already metered" in restarted.stdout
    _assert_metered_once([last])


def test_a_catch_up_killed_between_hours_while_another_worker_meters_the_latest_leaves_no_hole(fleet, env):
    kill = {"target": "billing.services:meter_hour", "when": "before", "nth": 2}  # the first hour committed
    chaos = chaos_round(["meter"], kill=kill, env=env, normal_args=["meter", "--once"])
    assert sorted(MeterRun.objects.filter(hour__gte=T0).values_list("hour", flat=True)) == [HOURS[0], HOURS[-1]]

    chaos.restarted.run()  # the killed catch-up restarts
    _assert_metered_once(HOURS)


def _assert_metered_once(hours) -> None:
    runs = {r.hour: r for r in MeterRun.objects.filter(hour__gte=T0)}
    assert sorted(runs) == hours, "every complete hour metered, and only those"
    for hour, run in runs.items():
        usage = UsageRecord.objects.filter(hour=hour)
        assert sorted(usage.filter(kind="node").values_list("resource", flat=True)) == ["n-0", "od-0"], hour
        assert sorted(usage.filter(kind="pod").values_list("resource", flat=True)) == ["algorithm/etl@od-0", "algorithm/llm@n-0"], hour
        assert not usage.values("kind", "resource").annotate(n=Count("id")).filter(n__gt=1).exists()
        costs = CostRecord.objects.filter(hour=hour)
        assert costs.count() == run.cost_records > 0, hour
        assert costs.aggregate(s=Sum("amount"))["s"] == run.total > 0, hour
    total = CostRecord.objects.aggregate(s=Sum("amount"))["s"]
    assert CostDay.objects.aggregate(s=Sum("amount"))["s"] == total == sum((r.total for r in runs.values()), Decimal(0))
