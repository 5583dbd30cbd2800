"""Cost this month and forecast per pool in the pool list (issue 21 item 11): the budgets' own
spend and run-rate rule, for a page of pools in two queries."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing import budgets, selectors
from billing.models import Budget, CostRecord
from billing.pool_spend import PoolSpend, pool_month_spend
from billing.services import cost_day_add
from tests.billing.billing_helpers import HOUR, T0, pool

pytestmark = pytest.mark.django_db


def spend(p, per_hour: str, *, hours: int, start=T0, currency="CNY"):
    """Hourly cost records of the pool and, as metering adds them, their days' rollup."""
    records = CostRecord.objects.bulk_create(
        CostRecord(hour=start + i * HOUR, pool=p, team=p.team, billing_kind="monthly", cost_kind="idle",
                   amount=Decimal(per_hour), currency=currency)
        for i in range(hours)
    )  # fmt: skip
    for record in records:
        cost_day_add(day=record.hour.date(), costs=[record])


@pytest.fixture
def pools(actors):
    """train-pool-a: 1.00 an hour for three days of December (and a November it must not
    count); young: two hours of December; quiet: nothing this month."""
    train = pool(actors["lead"], budget={"monthly": "1000"})
    young = pool(actors["lead"], name="young")
    quiet = pool(actors["lead"], name="quiet")
    spend(train, "1.00", hours=72)
    spend(train, "5.00", hours=10, start=T0 - 10 * HOUR)
    spend(young, "2.50", hours=2, start=T0 + 70 * HOUR)
    spend(quiet, "9.00", hours=1, start=T0 - HOUR)
    return train, young, quiet


def test_each_pool_has_its_month_so_far_and_a_forecast_after_three_days(pools):
    train, young, quiet = pools
    spent = pool_month_spend(pool_ids=[p.pk for p in pools], now=T0 + 72 * HOUR)
    assert spent[train.pk] == [PoolSpend(spent=Decimal("72.00"), forecast=Decimal("744.00"), currency="CNY")]
    assert spent[young.pk] == [PoolSpend(spent=Decimal("5.00"), forecast=None, currency="CNY")]
    assert quiet.pk not in spent  # November's cost is last month's


def test_a_page_of_pools_takes_two_queries(pools, django_assert_num_queries):
    with django_assert_num_queries(2):
        pool_month_spend(pool_ids=[p.pk for p in pools], now=T0 + 72 * HOUR)


def test_the_pool_list_and_the_budget_bar_tell_the_same_forecast(pools):
    train, _, _ = pools
    budgets.budgets_sync()
    status = selectors.budget_status(budget=Budget.objects.get(pool=train), now=T0 + 72 * HOUR)
    [listed] = pool_month_spend(pool_ids=[train.pk], now=T0 + 72 * HOUR)[train.pk]
    assert (listed.spent, listed.forecast) == (status.spent, status.forecast)


def test_a_pool_charged_in_two_currencies_shows_each(pools):
    train, _, _ = pools
    spend(train, "0.10", hours=1, start=T0 + 3 * HOUR, currency="USD")
    assert [s.currency for s in pool_month_spend(pool_ids=[train.pk], now=T0 + 72 * HOUR)[train.pk]] == ["CNY", "USD"]


def test_the_pool_list_shows_cost_this_month_and_forecast_in_the_same_queries_for_more_pools(client, actors, pools, time_machine):
    time_machine.move_to(T0 + 72 * HOUR, tick=False)
    client.force_login(actors["lead"])
    with CaptureQueriesContext(connection) as few:
        body = client.get("/pools/").content.decode()
    assert "<th scope=\"col\">Cost this month</th><th scope=\"col\">Forecast for the month</th>" in body
    assert "72.00 CNY</td>" in body and "744.00 CNY</td>" in body  # train-pool-a
    assert "5.00 CNY</td>" in body and "after 3 days of costs" in body  # young
    assert "nothing yet</td>" in body  # quiet
    for i in range(4):
        spend(pool(actors["lead"], name=f"more-{i}"), "1.00", hours=2)
    with CaptureQueriesContext(connection) as many:
        client.get("/pools/")
    assert len(many) == len(few)


def test_a_lead_sees_no_cost_of_another_teams_pool(client, actors, pools, time_machine):
    time_machine.move_to(T0 + 72 * HOUR, tick=False)
    other = pool(actors["other_lead"], name="infer")
    spend(other, "123.45", hours=1)
    client.force_login(actors["lead"])
    body = client.get("/pools/").content.decode()
    assert "infer" not in body and "123.45" not in body
