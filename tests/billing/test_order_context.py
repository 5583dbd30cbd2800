"""What the approver sees beside each order (issue 21 item 11): quota room, the account's
balance against the quote, and this month's use of the pool's and the team's budgets."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing import budgets
from billing.models import Account
from billing.order_context import order_contexts
from pools.selectors.pools import orders_for_user
from pools.services import pools as pool_services
from tests.billing.billing_helpers import HOUR, T0, charge
from tests.conftest import make_document

pytestmark = pytest.mark.django_db
NOW = T0 + 72 * HOUR


@pytest.fixture
def queue(actors, teams):
    """train-pool-a (algorithm, a pool budget of 1000, 72.00 spent) asks 2 nodes; infer
    (inference, no pool budget, a team budget of 500) asks 1."""
    train = pool_services.pool_create(user=actors["lead"], document=make_document("train-pool-a", budget={"monthly": 1000}), now=T0)
    infer = pool_services.pool_create(user=actors["other_lead"], document=make_document("infer", nodeCount={"min": 1, "max": 2}), now=T0)
    budgets.budgets_sync()
    budgets.budget_team_set(user=actors["admin"], team=teams["inference"], monthly_amount=Decimal("500"))
    charge(train, "1.00", hours=72)
    return train.orders.get(), infer.orders.get()


def contexts(actors):
    orders = list(orders_for_user(user=actors["admin"], status=""))
    return order_contexts(orders=orders, now=NOW)


def test_the_balance_covers_an_order_or_says_how_much_is_missing(actors, queue):
    train, infer = queue
    Account.objects.filter(name="default").update(balance=train.amount - Decimal("0.01"))
    by_order, queue_funds = contexts(actors)
    assert by_order[train.pk].funds.covers is False and by_order[train.pk].funds.short_by == Decimal("0.01")
    assert by_order[infer.pk].funds.covers is True and by_order[infer.pk].funds.short_by is None
    # Each order may fit alone and not both together.
    assert queue_funds.pending_total == train.amount + infer.amount and queue_funds.pending_count == 2
    assert queue_funds.covers_all is False


def test_budget_use_of_the_pool_and_the_team_or_none(actors, queue):
    train, infer = queue
    by_order, _ = contexts(actors)
    pool_budget = by_order[train.pk].pool_budget
    assert (pool_budget.spent, pool_budget.budget.monthly_amount, pool_budget.percent) == (Decimal("72.00"), Decimal("1000"), Decimal("7.2"))
    assert by_order[train.pk].team_budget is None
    default = by_order[infer.pk].pool_budget  # a pool without spec.budget has the default budget
    assert (default.budget.source, default.budget.monthly_amount, default.spent) == ("default", Decimal("38250.00"), Decimal("0.00"))
    assert by_order[infer.pk].team_budget.budget.monthly_amount == Decimal("500") and by_order[infer.pk].team_budget.spent == Decimal("0.00")


def test_without_an_account_nothing_is_compared(actors, queue):
    Account.objects.all().delete()
    by_order, queue_funds = contexts(actors)
    assert all(c.funds.balance is None and c.funds.covers is None for c in by_order.values())
    assert queue_funds.covers_all is None


def test_the_queue_shows_quota_balance_and_budget_beside_each_order_to_the_approver(client, actors, queue, time_machine):
    time_machine.move_to(NOW, tick=False)
    train, infer = queue
    Account.objects.filter(name="default").update(balance=train.amount - Decimal("0.01"))
    client.force_login(actors["admin"])
    body = client.get("/orders/").content.decode()
    for header in ("Quota left", "Balance", "Budget this month"):
        assert f'<th scope="col">{header}</th>' in body
    assert "24 of 48 GPUs left in cn-east-2 · A100_80G after this order" in body  # both orders hold 16 + 8 of 48
    assert "short by 0.01 CNY" in body and "covers this order" in body
    assert "pool: <span>72.00 of 1000.00 CNY (7.2%)</span><br>team: no budget" in body
    assert "pool: <span>0.00 of 38250.00 CNY (0.0%)</span><br>team: <span>0.00 of 500.00 CNY (0.0%)</span>" in body
    assert "more than the balance" in body


def test_a_lead_sees_their_orders_without_the_approvers_columns(client, actors, queue):
    client.force_login(actors["lead"])
    body = client.get("/orders/").content.decode()
    assert "train-pool-a" in body and "infer" not in body
    assert "Quota left" not in body and "Account balance" not in body and "covers this order" not in body


def test_the_approvers_queue_takes_the_same_queries_for_more_orders(client, actors, queue, time_machine):
    time_machine.move_to(NOW, tick=False)
    client.force_login(actors["admin"])
    with CaptureQueriesContext(connection) as few:
        client.get("/orders/")
    for i in range(4):
        pool_services.pool_create(user=actors["lead"], document=make_document(f"more-{i}", region="cn-north-1a", gpuModel="T4", nodeCount={"min": 1, "max": 1}), now=T0)
    with CaptureQueriesContext(connection) as many:
        assert len(client.get("/orders/").context["rows"]) == 6
    assert len(many) == len(few)
