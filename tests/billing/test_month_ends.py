"""Metering at the edges of time: the last hour of a month, metered after midnight, counts
against that month's budget; an hour is metered only once it is over, and `manage.py meter`
refuses one that is not (or a date the calendar cannot hold) in one line; a node of an order
paid before the lease ledger, leased from the middle of an hour, is charged back exactly what
its lease was paid."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command

from billing import month_spend, services, tasks
from billing.lease_costs import lease_payment
from billing.models import BudgetAlert, CostRecord, MeterRun, UsageRecord
from billing.node_prices import monthly_price, node_price
from billing.selectors import cost_query_parse
from pools.claims import Part
from pools.models import Notification
from tests.billing.billing_helpers import HOUR, T0, charge, focus_export, node, pod, pool

pytestmark = pytest.mark.django_db

LAST_HOUR = datetime(2026, 12, 31, 23, tzinfo=UTC)  # metered at 00:02 on New Year's Day
NEW_YEAR_RUN = datetime(2027, 1, 1, 0, 2, tzinfo=UTC)


def december_at_the_brink(actors):
    """A pool with a budget of 1000 that spent 850 on Dec 1 and has an on-demand node (100 an
    hour) since Dec 31 22:30: 900 once the 22:00 hour is metered, 1000 with the last hour."""
    p = pool(actors["lead"], budget={"monthly": "1000"})
    charge(p, "850", hours=1, start=T0)
    node(p, "od-0", billing="on_demand", created=LAST_HOUR - timedelta(minutes=30))
    return p


def alerts():
    return sorted(BudgetAlert.objects.values_list("period", "threshold", "basis"))


def test_the_last_hour_of_a_month_is_checked_against_that_months_budget(actors, monkeypatch):
    """The hourly task meters Dec 31 23:00 at 00:02 on Jan 1: the hour is December's, so its
    spend is checked against December's budget (at 100% now), not January's (empty)."""
    december_at_the_brink(actors)
    services.meter_hour(hour=LAST_HOUR - HOUR)
    monkeypatch.setattr(tasks.timezone, "now", lambda: LAST_HOUR + timedelta(minutes=2))
    tasks.meter_pending()  # nothing pending: checks December at 900
    assert alerts() == [(date(2026, 12, 1), 80, "actual"), (date(2026, 12, 1), 80, "forecast")]
    monkeypatch.setattr(tasks.timezone, "now", lambda: NEW_YEAR_RUN)
    result = tasks.meter_pending()
    assert result == {"hours": 1, "alerts": 2}
    assert alerts() == [
        (date(2026, 12, 1), 80, "actual"), (date(2026, 12, 1), 80, "forecast"),
        (date(2026, 12, 1), 100, "actual"), (date(2026, 12, 1), 100, "forecast"),
    ]  # fmt: skip
    message = Notification.objects.get(kind="BudgetThresholdReached", payload__threshold=100, payload__basis="actual").message
    assert message.startswith("Pool train-pool-a spend 10") and message.endswith("reached 100% of its monthly budget 1000.00 CNY (2026-12)")
    # The next runs check both months again and fire nothing twice.
    assert tasks.meter_pending() == {"hours": 0, "alerts": 0}


def test_a_catch_up_across_a_month_end_checks_each_month_it_metered(actors, monkeypatch):
    """A worker down over midnight: the catch-up meters December's last hours and January's
    first; December is checked on its own spend, then January."""
    december_at_the_brink(actors)
    services.meter_hour(hour=LAST_HOUR - 2 * HOUR)
    monkeypatch.setattr(tasks.timezone, "now", lambda: NEW_YEAR_RUN + 2 * HOUR)
    assert tasks.meter_pending()["hours"] == 4  # Dec 31 22:00 and 23:00, Jan 1 00:00 and 01:00
    assert (date(2026, 12, 1), 100, "actual") in alerts()
    assert not [a for a in alerts() if a[0] != date(2026, 12, 1)]  # January's 200 is 20% of its budget


def test_a_part_of_the_last_hour_of_a_month_checks_that_months_budget(actors, settings, monkeypatch):
    """With the hour metered in parts, the part of Dec 31 23:00 metered on Jan 1 checks its
    pools' December budgets, and the part that completes the hour the teams' December budgets."""
    from billing import budgets

    p = december_at_the_brink(actors)
    budgets.budget_team_set(user=actors["admin"], team=p.team, monthly_amount=Decimal("1000"))
    settings.EBCLOUD_METER_PARTS = 2
    for part in Part.all_of(2):
        services.meter_hour(hour=LAST_HOUR - HOUR, part=part)
    monkeypatch.setattr(tasks.timezone, "now", lambda: NEW_YEAR_RUN)
    assert tasks.meter_pending() == {"hours": 1, "parts": 2}
    fired = set(BudgetAlert.objects.values_list("budget__pool__name", "period", "threshold", "basis"))
    assert {(p.name, date(2026, 12, 1), 100, "actual"), (None, date(2026, 12, 1), 100, "actual")} <= fired
    assert {period for _, period, _, _ in fired} == {date(2026, 12, 1)}


def test_months_metered_gives_each_earlier_month_the_last_instant_of_its_last_metered_hour():
    hours = [datetime(2026, 11, 30, 22, tzinfo=UTC), datetime(2026, 11, 30, 23, tzinfo=UTC), LAST_HOUR, NEW_YEAR_RUN.replace(minute=0)]
    assert month_spend.months_metered(hours, now=NEW_YEAR_RUN) == [
        datetime(2026, 11, 30, 23, 59, 59, 999999, tzinfo=UTC), datetime(2026, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    ]  # fmt: skip
    assert month_spend.months_metered([LAST_HOUR - HOUR], now=LAST_HOUR + timedelta(minutes=2)) == []  # this month's: `now`


# --------------------------------------------------------------------------- hours not over yet


def test_an_hour_not_over_yet_is_refused_and_metered_whole_once_it_is(actors, teams, time_machine):
    """`meter --hour` in the middle of the hour it names would meter it once and for all, and a
    pod that starts later in it would never be charged: the hour is refused, in one line, and
    the regular run after the hour meters it with that pod."""
    p = pool(actors["lead"])
    hour = datetime(2026, 12, 31, 8, tzinfo=UTC)
    od = node(p, "od-0", billing="on_demand", created=hour - HOUR)
    time_machine.move_to(hour + timedelta(minutes=30), tick=False)
    with pytest.raises(CommandError, match=r"^--hour: 2026-12-31T08:00Z is not over yet: the last complete hour is 2026-12-31T07:00Z$"):
        call_command("meter", "--hour", "2026-12-31T08:00")
    with pytest.raises(ValueError, match="not over yet"):
        services.meter_hour(hour=hour, now=hour + timedelta(minutes=59, seconds=59))
    assert not MeterRun.objects.filter(hour=hour).exists()
    pod(teams["algorithm"], od, "late", gpus=8, started=hour + timedelta(minutes=45))
    services.meter_pending(now=hour + timedelta(hours=1, minutes=2))
    costs = dict(CostRecord.objects.filter(hour=hour).exclude(cost_kind="fee").values_list("cost_kind", "amount"))
    assert costs == {"usage": Decimal("25.00"), "idle": Decimal("75.00")}  # the pod: the last quarter of the hour, all 8 GPUs


def test_an_hour_is_metered_from_the_moment_it_is_over(actors, time_machine, capsys):
    p = pool(actors["lead"])
    node(p, "n-0")
    assert services.meter_hour(hour=T0, now=T0 + HOUR).metered
    time_machine.move_to(T0 + 2 * HOUR, tick=False)
    call_command("meter", "--hour", "2026-12-01T01:00")
    assert capsys.readouterr().out.startswith("2026-12-01T01:00Z metered: ")


@pytest.mark.parametrize(
    "value, says",
    [
        ("2999-12-31T23:00", "--hour: 2999-12-31T23:00Z is not over yet"),
        # the costs API's years (billing/selectors.py), as `moment_utc` (pools/management/arguments.py) says them
        ("9999-12-31T23:00", "Error: argument --hour: must be between 2000-01-01 and 2999-12-31"),
        ("0001-01-01T00:00+01:00", "Error: argument --hour: must be between 2000-01-01 and 2999-12-31"),  # before the calendar, in UTC
        ("2026-02-30T00:00", "Error: argument --hour: must be an ISO 8601 moment"),
    ],
)
def test_an_hour_the_calendar_cannot_hold_is_refused_in_one_line(time_machine, value, says):
    time_machine.move_to(T0 + timedelta(minutes=2), tick=False)
    with pytest.raises(CommandError, match=f"^{says}"):
        call_command("meter", "--hour", value)
    assert not MeterRun.objects.exists()


# --------------------------------------------------------------------------- leases off the ledger


@pytest.mark.parametrize("months", [1, 3])
def test_an_off_ledger_lease_bought_mid_hour_is_charged_back_what_was_paid(actors, months):
    """A node of an order paid before the lease ledger, leased from 13:27 on Jan 31 of a leap
    year (to 13:27 on Feb 29, or Apr 30): its order paid its monthly price times its months from
    that moment, and its hours, from the one it began in to the one it ends in, add up to that
    to the cent, not to 745/744 of it."""
    p = pool(actors["lead"])
    bought = datetime(2028, 1, 31, 13, 27, tzinfo=UTC)
    n = node(p, "n-0", start=bought, months=months)
    paid = lease_payment(monthly_price(n).price, n.lease_start, n.lease_end)
    assert paid == monthly_price(n).price * months
    hour, costs = datetime(2028, 1, 31, 10, tzinfo=UTC), {}
    while hour < n.lease_end + 3 * HOUR:
        priced = node_price(n, hour)
        if priced is not None:
            costs[hour] = priced[1]
        hour += HOUR
    assert min(costs) == datetime(2028, 1, 31, 13, tzinfo=UTC) and max(costs) == n.lease_end.replace(minute=0)
    assert sum(costs.values()) == paid
    # Metering bills the hours at these prices: the first, one inside, the last and the one after.
    for hour in (min(costs), min(costs) + 100 * HOUR, max(costs), max(costs) + HOUR):
        services.meter_hour(hour=hour)
        metered = UsageRecord.objects.filter(kind="node", hour=hour).values_list("amount", flat=True)
        assert list(metered) == ([costs[hour]] if hour in costs else [])


@pytest.mark.parametrize("form", ["daily", "detail"])
def test_an_off_ledger_lease_bought_mid_hour_is_bought_in_focus_for_what_was_paid(actors, form):
    """The FOCUS purchases of that lease add up to what was paid, as its hours do (they were
    priced on the hour-rounded span, 745/744 of a month)."""
    p = pool(actors["lead"])
    n = node(p, "n-0", start=datetime(2028, 1, 31, 13, 27, tzinfo=UTC), months=1)
    paid = lease_payment(monthly_price(n).price, n.lease_start, n.lease_end)
    services.meter_hour(hour=datetime(2028, 1, 31, 13, tzinfo=UTC))
    services.meter_hour(hour=datetime(2028, 2, 29, 13, tzinfo=UTC))
    rows = focus_export(actors["finance"], cost_query_parse({"from": "2028-01-01", "to": "2028-02-29"}), form)
    purchases = [r for r in rows if r["ChargeCategory"] == "Purchase"]
    assert purchases and sum(Decimal(r["BilledCost"]) for r in purchases) == paid
