"""FOCUS list prices of partial node-hours (FinOps review, defect A): ListUnitPrice is the public
per-GPU-hour price and ListCost = ListUnitPrice × PricingQuantity, so an on-demand node alive
part of an hour lists what it was billed, in every form of the export."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest

from billing.selectors import CostQuery
from tests.billing.billing_helpers import HOUR, T0, focus_export, meter, node, pod, pool

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("form", ["hourly", "daily", "detail"])
def test_on_demand_node_alive_half_an_hour_lists_what_it_billed(actors, teams, form):
    """An on-demand node at 100.00/h (8 GPUs) created at 10:30 with an 8-GPU pod, metered 10:00
    and 11:00: 50.00 then 100.00 billed, listed at 12.5 per GPU-hour both hours."""
    p = pool(actors["lead"])
    od = node(p, "od-0", billing="on_demand", created=T0 + HOUR * 10 + HOUR / 2)
    pod(teams["algorithm"], od, "batch", gpus=8, started=T0 + HOUR * 10 + HOUR / 2)
    meter(start=T0 + 10 * HOUR, hours=2)
    rows = [
        r for r in focus_export(actors["finance"], CostQuery(start=date(2026, 12, 1), end=date(2026, 12, 1)), form)
        if r["ServiceCategory"] == "Compute"
    ]
    assert rows
    for r in rows:
        assert r["PricingCategory"] == "Standard"
        assert Decimal(r["ListUnitPrice"]) == Decimal("12.5")
        assert Decimal(r["ListCost"]) == Decimal(r["BilledCost"])
        assert Decimal(r["ListCost"]) == (Decimal(r["ListUnitPrice"]) * Decimal(r["PricingQuantity"])).quantize(Decimal("0.01"))
    assert sum(Decimal(r["BilledCost"]) for r in rows) == Decimal("150.00")
    assert sum(Decimal(r["ListCost"]) for r in rows) == Decimal("150.00")
    if form != "daily":
        first = [r for r in rows if r["ChargePeriodStart"].startswith("2026-12-01T10")]
        assert sum(Decimal(r["BilledCost"]) for r in first) == Decimal("50.00")
        assert sum(Decimal(r["ListCost"]) for r in first) == Decimal("50.00")


def test_an_on_demand_day_with_a_price_change_lists_each_row_at_what_it_billed(actors, teams):
    """The price doubles at 11:00; namespace algorithm's pod runs 10:00–11:00, inference's
    11:00–12:00. The day's average list price listed one row above what it billed and the
    other below, a negative saving (found by a QA sweep)."""
    from billing.models import NodePrice

    p = pool(actors["lead"])
    price = NodePrice.objects.filter(node_type=p.node_type, gpu_model=p.gpu_model).latest("effective_from")
    NodePrice.objects.create(node_type=p.node_type, gpu_model=p.gpu_model, monthly_price=price.monthly_price,
                             hourly_price=price.hourly_price * 2, currency=price.currency, effective_from=T0 + 11 * HOUR)  # fmt: skip
    od = node(p, "od-0", billing="on_demand", created=T0 + 10 * HOUR)
    pod(teams["algorithm"], od, "before", gpus=8, started=T0 + 10 * HOUR, finished=T0 + 11 * HOUR, phase="Succeeded")
    pod(teams["inference"], od, "after", namespace="inference", gpus=8, started=T0 + 11 * HOUR)
    meter(start=T0 + 10 * HOUR, hours=2)
    rows = [r for r in focus_export(actors["finance"], CostQuery(start=date(2026, 12, 1), end=date(2026, 12, 1)), "daily") if r["ServiceCategory"] == "Compute"]
    assert len(rows) >= 2
    for r in rows:
        assert Decimal(r["ListCost"]) == Decimal(r["BilledCost"]), r
    assert sum(Decimal(r["BilledCost"]) for r in rows) == price.hourly_price * 3


def test_a_monthly_day_with_a_price_change_lists_each_row_at_its_own_hours_prices(actors, teams):
    """The list price doubles at 11:00; namespace algorithm's pod runs on a leased node 10:00–11:00,
    inference's 11:00–12:00. The day's average list price listed both rows at 1.5 times the old
    price, the first above its hour's and the second below (found by review): each row lists
    its hours at their own price, and together they list what the node-hours list."""
    from billing.models import NodePrice

    p = pool(actors["lead"])
    price = NodePrice.objects.filter(node_type=p.node_type, gpu_model=p.gpu_model).latest("effective_from")
    NodePrice.objects.create(node_type=p.node_type, gpu_model=p.gpu_model, monthly_price=price.monthly_price,
                             hourly_price=price.hourly_price * 2, currency=price.currency, effective_from=T0 + 11 * HOUR)  # fmt: skip
    leased = node(p, "m-0")
    pod(teams["algorithm"], leased, "before", gpus=8, started=T0 + 10 * HOUR, finished=T0 + 11 * HOUR, phase="Succeeded")
    pod(teams["inference"], leased, "after", namespace="inference", gpus=8, started=T0 + 11 * HOUR)
    meter(start=T0 + 10 * HOUR, hours=2)
    rows = [r for r in focus_export(actors["finance"], CostQuery(start=date(2026, 12, 1), end=date(2026, 12, 1)), "daily")
            if r["ServiceCategory"] == "Compute" and r["ChargeCategory"] == "Usage"]  # fmt: skip
    assert sorted(Decimal(r["ListCost"]) for r in rows) == [price.hourly_price, price.hourly_price * 2], rows
