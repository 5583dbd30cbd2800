"""The forecast runs to the last metered hour, not to the pool's last costed hour: a pool that
scaled to zero after a burst is not forecast at its burst rate for the rest of the month (the
pool list, the budget bar and the budget's forecast alerts alike), while a pool created in the
middle of the month is still forecast from its first costed hour."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from billing import budgets, selectors
from billing.models import Budget, BudgetAlert
from billing.month_spend import MonthSpend, month_spend
from tests.billing.billing_helpers import HOUR, T0, charge, meter, node, pool

pytestmark = pytest.mark.django_db

DEC_20 = T0 + timedelta(days=19)  # Dec 20 00:00: hours to Dec 19 23:00 metered


def burst_then_zero(actors, monthly="20000"):
    """An on-demand burst node Dec 1..Dec 4 (100.00 an hour: 7200.00), then no node at all;
    metering has run every hour since, the last one Dec 19 23:00 (nothing to bill)."""
    p = pool(actors["lead"], budget={"monthly": monthly})
    node(p, "od-0", billing="on_demand", created=T0, terminated=T0 + timedelta(days=3))
    charge(p, "100.00", hours=72)  # what metering wrote for the burst's hours
    meter(start=DEC_20 - HOUR)
    return p


def test_a_pool_scaled_to_zero_is_forecast_from_the_hours_metered_since(actors):
    p = burst_then_zero(actors)
    [spend] = month_spend(scope="pool_id", ids=[p.pk], now=DEC_20)[p.pk]
    # 7200.00 over Dec 1 00:00 .. Dec 19 23:00 (456 hours) carried on to 744: not 74400.00.
    assert spend == MonthSpend(spent=Decimal("7200.00"), forecast=Decimal("11747.37"), currency="CNY")
    budgets.budgets_sync()
    status = selectors.budget_status(budget=Budget.objects.get(pool=p), now=DEC_20)
    assert (status.spent, status.forecast) == (spend.spent, spend.forecast)


def test_a_pool_scaled_to_zero_raises_no_forecast_alert_at_its_burst_rate(actors):
    burst_then_zero(actors, monthly="20000")  # 80%: 16000, the burst rate would say 74400
    budgets.budgets_sync()
    budgets.budgets_evaluate(now=DEC_20)
    assert not BudgetAlert.objects.filter(basis="forecast").exists()


def test_a_pool_created_mid_month_is_forecast_from_its_first_costed_hour(actors):
    p = pool(actors["lead"], name="young")
    charge(p, "1.00", hours=96, start=DEC_20 - 96 * HOUR)  # Dec 16 .. Dec 19 23:00
    meter(start=DEC_20 - HOUR)
    [spend] = month_spend(scope="pool_id", ids=[p.pk], now=DEC_20)[p.pk]
    assert spend.forecast == Decimal("384.00")  # 1.00 an hour from Dec 16 00:00, not from Dec 1


def test_hours_metered_after_now_are_not_counted(actors):
    p = pool(actors["lead"])
    charge(p, "1.00", hours=72)
    meter(start=DEC_20)  # an hour later than `now` asks about
    [spend] = month_spend(scope="pool_id", ids=[p.pk], now=T0 + 72 * HOUR)[p.pk]
    assert spend.forecast == Decimal("744.00")
