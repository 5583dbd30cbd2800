"""Costs from the first minute (issue 21 §3; seed G3, C4): the hours metering has not written
yet are in the table, the CSV and the JSON as `accruing` rows, priced by the metering core, and
the metered rows replace them; metering runs at the top of each hour."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django_q.models import Schedule

from billing import chargeback, services
from billing.hours import METER_RUN_OFFSET, next_meter_run
from billing.models import Budget, CostRecord
from billing.selectors import CostQuery
from tests.billing.billing_helpers import HOUR, T0, node, pod, pool

pytestmark = pytest.mark.django_db

TEN = T0 + 10 * HOUR  # the pool's first node comes at 10:20
RANGE = "from=2026-12-01&to=2026-12-31"


def first_node(actors, teams):
    p = pool(actors["lead"])
    n = node(p, "od-0", billing="on_demand", created=TEN + timedelta(minutes=20))
    pod(teams["algorithm"], n, "train-0", gpus=2, labels={"project": "llm"}, started=TEN + timedelta(minutes=20))
    return p


def csv_of(client, query=RANGE) -> list[dict]:
    response = client.get(f"/api/v1/costs/?{query}&format=csv")
    assert response.status_code == 200
    return list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))


def as_finance(actors) -> Client:
    client = Client()
    client.force_login(actors["finance"])
    return client


def test_the_first_minutes_of_a_pool_are_shown_and_exported_as_accruing(actors, teams, time_machine):
    first_node(actors, teams)
    time_machine.move_to(TEN + timedelta(minutes=21), tick=False)
    client = as_finance(actors)
    html = client.get(f"/costs/?{RANGE}").content.decode()
    assert "No costs in this range." not in html and 'id="cost-chart"' in html
    assert "Accruing now:" in html and '<tr class="allocated accruing">' in html
    # the budgets, which count metered hours only, say so, so that "0.00 spent" beside a total does not puzzle
    Budget.objects.create(team=teams["algorithm"], pool=None, monthly_amount=Decimal("1000.00"), source=Budget.Source.FINANCE)
    html = client.get(f"/costs/?{RANGE}").content.decode()
    assert "Spent (metered hours)" in html
    assert "Budgets count the metered hours: the " in html and "accruing since 10:00 UTC counts once its hour is metered" in html
    rows = csv_of(client)
    assert rows and {r["status"] for r in rows} == {"accruing"}
    assert {r["charged_team"] for r in rows} == {"algorithm"}
    assert {r["kind"] for r in rows} == {"allocated", "idle"}
    data = client.get(f"/api/v1/costs/?{RANGE}").json()
    assert Decimal(data["accruing"]) == Decimal(data["total"]) == sum(Decimal(r["amount"]) for r in rows) > 0
    assert not CostRecord.objects.exists()  # shown, not written


def test_metered_figures_replace_the_accruing_ones(actors, teams, time_machine):
    """The accruing hour is what metering then writes (same core); once metered it is a
    metered row, and the hour in progress is the accruing one."""
    first_node(actors, teams)
    query = CostQuery(start=T0.date(), end=T0.date())
    before = chargeback.accruing_costs(user=actors["finance"], query=query, now=TEN + timedelta(minutes=50))
    assert {r.hour for r in before} == {TEN}
    # 11:01: metering has not run yet (it runs at 11:02); 10:00 and 11:00 both accrue.
    waiting = chargeback.accruing_costs(user=actors["finance"], query=query, now=TEN + HOUR + timedelta(minutes=1))
    assert {r.hour for r in waiting} == {TEN, TEN + HOUR}
    services.meter_hour(hour=TEN)
    metered = sum(CostRecord.objects.filter(hour=TEN).values_list("amount", flat=True))
    assert metered == sum(r.amount for r in before)
    now = TEN + HOUR + timedelta(minutes=5)
    after = chargeback.accruing_costs(user=actors["finance"], query=query, now=now)
    assert {r.hour for r in after} == {TEN + HOUR}
    groups = chargeback.chargeback(user=actors["finance"], query=query, accruing=after)
    by_status = {s: sum(g.amount for g in groups if g.status == s) for s in ("metered", "accruing")}
    assert by_status == {"metered": metered, "accruing": sum(r.amount for r in after)}
    assert chargeback.summarize(groups).accruing == by_status["accruing"]


def test_accruing_rows_follow_the_users_teams_and_the_filters(actors, teams):
    first_node(actors, teams)
    now = TEN + timedelta(minutes=30)
    query = CostQuery(start=T0.date(), end=T0.date())
    assert chargeback.accruing_costs(user=actors["lead"], query=query, now=now)
    assert chargeback.accruing_costs(user=actors["other_lead"], query=query, now=now) == []
    assert chargeback.accruing_costs(user=actors["finance"], query=CostQuery(start=T0.date(), end=T0.date(), team="inference"), now=now) == []
    assert chargeback.accruing_costs(user=actors["finance"], query=CostQuery(start=T0.date(), end=T0.date(), billing="monthly"), now=now) == []
    # A range that ends before the hour holds nothing accruing.
    yesterday = (T0 - HOUR).date()
    assert chargeback.accruing_costs(user=actors["finance"], query=CostQuery(start=yesterday, end=yesterday), now=now) == []


def test_metering_runs_at_the_top_of_each_hour():
    """The schedule's next run is the next :00 plus the small offset for late samples, and
    django-q2 keeps that minute (it adds whole hours)."""
    schedule = Schedule.objects.get(name="billing.meter_pending")
    assert schedule.schedule_type == Schedule.HOURLY and schedule.func == "billing.tasks.meter_pending"
    run = schedule.next_run.astimezone(UTC)
    assert (run.minute, run.second, run.microsecond) == (METER_RUN_OFFSET.seconds // 60, 0, 0)
    assert schedule.calculate_next_run(run).minute == run.minute
    at = datetime(2026, 12, 1, 10, 20, 7, tzinfo=UTC)
    assert next_meter_run(at) == datetime(2026, 12, 1, 11, 2, tzinfo=UTC)
    assert next_meter_run(datetime(2026, 12, 1, 10, 1, tzinfo=UTC)) == datetime(2026, 12, 1, 10, 2, tzinfo=UTC)
    assert next_meter_run(datetime(2026, 12, 1, 10, 2, tzinfo=UTC)) == datetime(2026, 12, 1, 11, 2, tzinfo=UTC)
