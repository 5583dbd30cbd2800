"""Metering an hour split by pool over workers (issue 23 item 3): the parts add up to the hour
metered whole, row for row; the part that completes the hour is the one that checks budgets;
a part is claimed once; a split cannot change in the middle of an hour."""

from __future__ import annotations

import json
import threading
from collections import Counter
from datetime import timedelta
from decimal import Decimal
from functools import partial

import pytest
from django.core.management import CommandError, call_command
from django.db import OperationalError, connection, transaction

from billing import services
from billing.models import BudgetAlert, CostDay, CostRecord, MeterRun, UsageRecord
from pools.claims import Part
from tests.billing.billing_helpers import HOUR, T0, in_thread, node, pod, pool
from tests.race import concurrently

pytestmark = pytest.mark.django_db


def fleet(actors, teams, **first_spec):
    """Five pools of two teams (ids spread over every remainder of 2 and 3), nodes of two
    billing kinds, workloads with labels, another team's pod on a pool (charged to its team)."""
    pools = [pool(actors["lead"], name=f"train-pool-{i}", labels={"project": f"p{i}"}, **(first_spec if i == 0 else {})) for i in range(3)]
    pools += [pool(actors["other_lead"], name=f"infer-pool-{i}", labels={"team": "inference"}) for i in range(2)]
    for i, p in enumerate(pools):
        monthly = node(p, f"{p.name}-n0")
        burst = node(p, f"{p.name}-od", billing="on_demand", created=T0 - HOUR)
        team = teams["algorithm"] if p.team == teams["algorithm"] else teams["inference"]
        namespace = "algorithm" if team == teams["algorithm"] else "inference"
        pod(team, monthly, f"{p.name}-train", namespace=namespace, gpus=2, labels={"app": "train"})
        pod(team, burst, f"{p.name}-half", namespace=namespace, gpus=1, milli=500, started=T0 + timedelta(minutes=10 * i))
    guest_on = pools[3]
    pod(teams["algorithm"], node(guest_on, "guest-node"), "guest", gpus=4, labels={"project": "llm"})
    return pools


def ledger() -> tuple[Counter, Counter, Counter]:
    """Usage, cost and day rows as multisets of their values (ids differ between runs)."""
    usage = Counter(
        UsageRecord.objects.values_list("hour", "kind", "resource", "pool_id", "team_id", "namespace", "pod_count", "quantity", "amount")
    )
    costs = Counter(
        (*row[:-2], json.dumps(row[-2], sort_keys=True), row[-1])
        for row in CostRecord.objects.values_list("hour", "pool_id", "team_id", "namespace", "cost_kind", "component", "labels", "amount")
    )
    days = Counter(
        (*row[:-2], json.dumps(row[-2], sort_keys=True), Decimal(row[-1]))
        for row in CostDay.objects.values_list("day", "pool_id", "team_id", "namespace", "cost_kind", "labels", "amount")
    )
    return usage, costs, days


def test_an_hour_metered_in_parts_writes_what_it_writes_metered_whole(actors, teams):
    fleet(actors, teams)
    with transaction.atomic():
        whole = [services.meter_hour(hour=T0 + i * HOUR) for i in range(2)]
        expected = ledger()
        transaction.set_rollback(True)
    assert all(r.metered and r.complete for r in whole) and len(expected[0]) > 20
    for count in (2, 3):
        with transaction.atomic():
            results = [services.meter_hour(hour=T0 + i * HOUR, part=part) for i in range(2) for part in reversed(Part.all_of(count))]
            assert ledger() == expected
            assert [r.complete for r in results] == [False] * (count - 1) + [True] + [False] * (count - 1) + [True]
            assert sum(r.total for r in results) == sum(r.total for r in whole)
            assert MeterRun.objects.count() == 2 * count
            transaction.set_rollback(True)


def test_a_part_is_metered_once_and_the_split_of_a_started_hour_stays(actors, teams):
    fleet(actors, teams)
    assert services.meter_hour(hour=T0, part=Part(1, 2)).metered
    rerun = services.meter_hour(hour=T0, part=Part(1, 2))
    assert not rerun.metered and not rerun.complete
    before = ledger()
    with pytest.raises(ValueError, match="being metered in 2 parts, not 3"):
        services.meter_hour(hour=T0, part=Part(0, 3))
    with pytest.raises(ValueError, match="being metered in 2 parts, not 1"):
        services.meter_hour(hour=T0)
    assert ledger() == before
    with pytest.raises(ValueError, match="below the count"):
        Part(2, 2)
    # What is left of the hour, in its own split, whatever the caller's split is now.
    assert services.parts_pending(now=T0 + HOUR + timedelta(minutes=2), max_hours=1, parts=3) == [(T0, [Part(0, 2)])]
    [last] = services.meter_pending(now=T0 + HOUR + timedelta(minutes=2), max_hours=1, parts=3)
    assert last.metered and last.complete and last.part == Part(0, 2)
    assert services.parts_pending(now=T0 + HOUR + timedelta(minutes=2), max_hours=1, parts=3) == []


def test_the_command_meters_the_workers_split_and_refuses_another_in_one_line(actors, teams, settings, capsys):
    fleet(actors, teams)
    settings.EBCLOUD_METER_PARTS = 2
    call_command("meter", hour="2026-12-01T00:00")
    out = capsys.readouterr().out
    assert "2026-12-01T00:00Z part 1 of 2 metered" in out and "part 2 of 2 metered" in out
    settings.EBCLOUD_METER_PARTS = 3
    with pytest.raises(CommandError, match="^--hour: 2026-12-01T00:00Z is being metered in 2 parts, not 3$"):
        call_command("meter", hour="2026-12-01T00:00")


def test_the_hourly_task_fans_out_parts_and_each_checks_its_pools_budgets(actors, teams, settings, monkeypatch):
    """With `EBCLOUD_METER_PARTS` the hourly task queues one task per part (run inline in
    tests). Each part checks its own pools' budgets once its part of the hour is in (a pool's
    costs are all in its part); team budgets are checked once each hour is whole."""
    from billing import budgets, tasks

    fleet(actors, teams, budget={"monthly": "50"})
    budgets.budget_team_set(user=actors["admin"], team=teams["algorithm"], monthly_amount=Decimal("20"))
    settings.EBCLOUD_METER_PARTS = 2
    monkeypatch.setattr(tasks.timezone, "now", lambda: T0 + timedelta(hours=2, minutes=2))
    checked = []
    real = budgets.budgets_evaluate

    def evaluate(*, now, part, teams):
        runs = set(MeterRun.objects.values_list("hour", "part"))
        checked.append((part, teams, runs))
        return real(now=now, part=part, teams=teams)

    monkeypatch.setattr(budgets, "budgets_evaluate", evaluate)
    result = tasks.meter_pending()
    assert result == {"hours": services.MAX_CATCH_UP_HOURS, "parts": 2 * services.MAX_CATCH_UP_HOURS}
    assert len(checked) == 2 * services.MAX_CATCH_UP_HOURS  # once per part
    for part, teams_too, runs in checked:
        hours = {hour for hour, _ in runs}
        assert all((hour, part.index) in runs for hour in hours)  # its own part is in for every hour started
        assert teams_too == all((hour, other) in runs for hour in hours for other in range(2))  # the last part, the teams'
    assert sum(teams_too for _, teams_too, _ in checked) == services.MAX_CATCH_UP_HOURS
    # The small budgets fired: the first pool's in its part, the team's with the whole hour.
    fired = set(BudgetAlert.objects.values_list("budget__pool__name", "budget__team__slug"))
    assert fired == {("train-pool-0", "algorithm"), (None, "algorithm")}
    assert tasks.meter_pending() == {"hours": 0, "parts": 0}


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent parts need PostgreSQL (SQLite serialises writers)")
def test_two_workers_metering_two_parts_at_once_complete_the_hour_once(actors, teams):
    fleet(actors, teams)
    results = concurrently(*[partial(services.meter_hour, hour=T0, part=part) for part in Part.all_of(2)])
    assert sorted(r.complete for r in results) == [False, True]
    days = sum(CostDay.objects.values_list("amount", flat=True), Decimal(0))
    assert days == sum(CostRecord.objects.values_list("amount", flat=True), Decimal(0)) == sum(r.total for r in results) > 0


def test_chargeback_projects_only_the_parts_of_an_hour_not_metered_yet(actors, teams):
    """Between two parts of an hour, finance sees the metered part's rows and the other part's
    projected ones: the hour counted once, not twice and not half."""
    from billing import chargeback
    from billing.selectors import CostQuery

    fleet(actors, teams)
    query, now = CostQuery(start=T0.date(), end=T0.date()), T0 + timedelta(minutes=70)
    with transaction.atomic():
        whole = sum((r.amount for r in chargeback.accruing_costs(user=actors["finance"], query=query, now=now) if r.hour == T0), Decimal(0))
        transaction.set_rollback(True)
    first = services.meter_hour(hour=T0, part=Part(1, 2))
    projected = [r for r in chargeback.accruing_costs(user=actors["finance"], query=query, now=now) if r.hour == T0]
    assert projected and {r.pool_id % 2 for r in projected} == {0}
    assert first.total + sum((r.amount for r in projected), Decimal(0)) == whole > 0
    services.meter_hour(hour=T0, part=Part(0, 2))
    assert not [r for r in chargeback.accruing_costs(user=actors["finance"], query=query, now=now) if r.hour == T0]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="row and advisory locks are PostgreSQL's; SQLite has one writer")
@pytest.mark.django_db(transaction=True)
def test_the_other_parts_add_to_the_day_while_a_part_holds_its_pools_rows():
    """A part adding its hour to the day's rollup holds its own pools' rows of the day to its
    commit (that part's next hour of the day waits, and so does a rebuild), not the day: the
    other parts of the hour add theirs at the same time and wait for its commit only to count
    the hour's parts (issue 23: the second part waited for the first's whole rollup)."""
    day = T0.date()
    held, release = threading.Event(), threading.Event()

    def first_part():
        with transaction.atomic():
            services.cost_day_add(day=day, costs=[], part=Part(0, 2))
            held.set()
            release.wait(10)

    thread = in_thread(first_part)
    try:
        assert held.wait(10)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '300ms'")
            with transaction.atomic():
                assert services.cost_day_add(day=day, costs=[], part=Part(1, 2)) == 0  # not kept waiting
            for blocked in (lambda: services.cost_day_add(day=day, costs=[], part=Part(0, 2)), lambda: services.cost_day_rebuild(day=day)):
                with pytest.raises(OperationalError, match="lock timeout"), transaction.atomic():
                    blocked()
            cursor.execute("RESET lock_timeout")
    finally:
        release.set()
        thread.join()
    assert services.cost_day_rebuild(day=day) == 0  # free once the first part has committed
