"""Cost this month and forecast per pool in the pool list (issue 21 item 11) and every budget's
month (the bars, the hourly check, /metrics: issue 23): read from the daily rollup, equal to the
cost records' own sums and run-rate rule, in two queries per scope."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing import budgets, selectors
from billing.forecast import month_forecast
from billing.models import Budget, CostRecord
from billing.month_spend import MonthSpend, budget_statuses_of, month_spend, period_bounds
from tests.billing.billing_helpers import HOUR, T0, charge, pool

pytestmark = pytest.mark.django_db


def spend(p, per_hour: str, *, hours: int, start=T0, currency="CNY"):
    charge(p, per_hour, hours=hours, start=start, currency=currency)


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
    spent = month_spend(scope="pool_id", ids=[p.pk for p in pools], now=T0 + 72 * HOUR)
    assert spent[train.pk] == [MonthSpend(spent=Decimal("72.00"), forecast=Decimal("744.00"), currency="CNY")]
    assert spent[young.pk] == [MonthSpend(spent=Decimal("5.00"), forecast=None, currency="CNY")]
    assert quiet.pk not in spent  # November's cost is last month's


def from_records(budget, now):
    """A budget's spend and forecast summed from its month's cost records themselves (what the
    rollup must equal): a pool budget covers its pool, a team budget its team's charges."""
    start, end = period_bounds(now)
    scope = {"pool_id": budget.pool_id} if budget.pool_id else {"team_id": budget.team_id}
    hours = list(CostRecord.objects.filter(**scope, hour__gte=start, hour__lt=end, currency=budget.currency).values_list("hour", "amount"))
    spent = sum((amount for _, amount in hours), Decimal("0.00"))
    forecast = month_forecast(spent=spent, first=min(h for h, _ in hours), last=max(h for h, _ in hours), end=end) if hours else None
    return spent, forecast


def test_budget_statuses_from_the_rollup_are_the_records_own_sums(actors, teams, pools):
    train, young, _ = pools
    budgets.budgets_sync()
    budgets.budget_team_set(user=actors["admin"], team=teams["algorithm"], monthly_amount=Decimal("2000"))
    charge(train, "3.00", hours=5, start=T0 + 10 * HOUR, team=teams["inference"])  # inference used algorithm's pool
    every = list(Budget.objects.select_related("pool", "team"))
    now = T0 + 72 * HOUR
    statuses = budget_statuses_of(every, now=now)
    assert [(s.spent, s.forecast) for s in statuses] == [from_records(b, now) for b in every]
    spent = {"pool" if s.budget.pool_id else "team": s.spent for s in statuses if s.budget.pool_id in (None, train.pk)}
    assert spent == {"pool": Decimal("87.00"), "team": Decimal("77.00")}  # the pool's every user; the team's every pool


def test_budget_statuses_take_four_queries_whatever_the_number_of_budgets(actors, teams, pools, django_assert_num_queries):
    budgets.budgets_sync()
    budgets.budget_team_set(user=actors["admin"], team=teams["algorithm"], monthly_amount=Decimal("2000"))
    every = list(Budget.objects.select_related("pool", "team"))
    assert len(every) > 2
    with django_assert_num_queries(4):
        budget_statuses_of(every, now=T0 + 72 * HOUR)


def test_a_page_of_pools_takes_two_queries(pools, django_assert_num_queries):
    with django_assert_num_queries(2):
        month_spend(scope="pool_id", ids=[p.pk for p in pools], now=T0 + 72 * HOUR)


def test_the_pool_list_and_the_budget_bar_tell_the_same_forecast(pools):
    train, _, _ = pools
    budgets.budgets_sync()
    status = selectors.budget_status(budget=Budget.objects.get(pool=train), now=T0 + 72 * HOUR)
    [listed] = month_spend(scope="pool_id", ids=[train.pk], now=T0 + 72 * HOUR)[train.pk]
    assert (listed.spent, listed.forecast) == (status.spent, status.forecast)


def test_a_pool_charged_in_two_currencies_shows_each(pools):
    train, _, _ = pools
    spend(train, "0.10", hours=1, start=T0 + 3 * HOUR, currency="USD")
    assert [s.currency for s in month_spend(scope="pool_id", ids=[train.pk], now=T0 + 72 * HOUR)[train.pk]] == ["CNY", "USD"]


def test_the_pool_list_shows_cost_this_month_and_forecast_in_the_same_queries_for_more_pools(client, actors, pools, time_machine):
    time_machine.move_to(T0 + 72 * HOUR, tick=False)
    client.force_login(actors["lead"])
    with CaptureQueriesContext(connection) as few:
        body = client.get("/pools/").content.decode()
    assert "<th scope=\"col\">Cost this month</th><th scope=\"col\">Forecast for the month</th>" in body
    assert "72.00 CNY</td>" in body and "744.00 CNY</td>" in body  # train-pool-a
    assert "5.00 CNY</td>" in body and "after 3 days of costs" in body  # young
    assert "nothing metered yet</td>" in body  # quiet
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
