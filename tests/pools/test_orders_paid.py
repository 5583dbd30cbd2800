"""When each order was debited, and the orders debited in a period (finance reconciles the
account's statement with them; seed C1). `GET /api/v1/orders/?from=` was answered with every
order, the parameter ignored, and no order said when it was paid."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pools.models import PoolOrder
from pools.models.cloud import SimPayment
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import T0, approved_pool, reconcile

pytestmark = pytest.mark.django_db


def test_a_paid_order_says_when_and_the_list_keeps_the_orders_paid_in_the_days_asked(api, actors):
    first = approved_pool(actors, make_document("paid-first", nodeCount={"min": 1, "max": 1}), now=T0)
    reconcile(first, T0)
    later = T0 + timedelta(days=3)
    second = approved_pool(actors, make_document("paid-later", nodeCount={"min": 1, "max": 1}), now=later)
    reconcile(second, later)
    approved_pool(actors, make_document("unpaid", nodeCount={"min": 1, "max": 1}), now=later)  # approved, never paid
    paid = PoolOrder.objects.get(pool=first)
    assert paid.status == "Paid" and paid.paid_at == SimPayment.objects.get(order=paid).paid_at == T0
    finance = api("finance")
    listed = finance.get("/api/v1/orders/", {"from": "2026-12-01", "to": "2026-12-01"}).json()
    assert [(o["pool"], o["paidAt"]) for o in listed] == [("paid-first", "2026-12-01T08:00:00Z")]
    assert [o["pool"] for o in finance.get("/api/v1/orders/", {"from": "2026-12-02"}).json()] == ["paid-later"]
    assert len(finance.get("/api/v1/orders/").json()) == 3  # without a period, every order, unpaid ones too
    assert [o["pool"] for o in finance.get("/api/v1/orders/", {"to": "9999-12-31"}).json()] == ["paid-later", "paid-first"]


@pytest.mark.parametrize(
    ("params", "field", "says"),
    [
        ({"from": "2026-13-01"}, "from", "must be a date such as 2026-12-01"),
        ({"to": "٢٠٢٦-12-01"}, "to", "must be a date such as 2026-12-01"),
        ({"from": "20261201"}, "from", "must be a date such as 2026-12-01"),
        ({"from": "2026-12-02", "to": "2026-12-01"}, "to", "must not be before from"),
    ],
)
def test_a_period_that_is_no_period_is_a_400_naming_its_parameter(api, params, field, says):
    response = api("finance").get("/api/v1/orders/", params)
    assert response.status_code == 400
    assert response.json()["errors"] == [{"field": field, "message": says}]


@pytest.mark.django_db(transaction=True)
def test_orders_paid_before_the_column_get_their_time_from_the_payment(actors, catalog):
    """Migration 0035 backfills `paid_at` from the simulated cloud's payment records."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    pool = approved_pool(actors, make_document("paid-before", nodeCount={"min": 1, "max": 1}), now=T0)
    reconcile(pool, T0)
    order = PoolOrder.objects.get(pool=pool)
    executor = MigrationExecutor(connection)
    try:
        executor.migrate([("pools", "0034_node_fault_held_at")])
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    order.refresh_from_db()
    assert order.paid_at == SimPayment.objects.get(order=order).paid_at == T0
