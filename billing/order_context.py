"""What an approver weighs beside each order in the queue (issue 21): the quota room of its
region and GPU model, whether the account's balance covers its quote, and this month's use of
the pool's and the team's budgets.

Reads only: quota room from `pools.selectors.quotas`, budget use as the budget bars show it
(`billing.month_spend.budget_statuses_of`, from the daily rollup), the balance from the account that orders are paid from. A constant number of queries
for a whole page of orders.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.db.models import Q

from billing.models import Account, Budget
from billing.month_spend import BudgetStatus, budget_statuses_of
from pools.models import PoolOrder
from pools.selectors.quotas import OrderQuota, order_quotas


@dataclass(frozen=True)
class OrderFunds:
    """The balance against one order's quote (`need`): `covers` is None when there is no
    account or it holds another currency (nothing to compare)."""

    balance: Decimal | None
    currency: str
    need: Decimal
    covers: bool | None

    @property
    def short_by(self) -> Decimal | None:
        return self.need - self.balance if self.covers is False else None


@dataclass(frozen=True)
class OrderContext:
    quota: OrderQuota
    funds: OrderFunds
    pool_budget: BudgetStatus | None
    team_budget: BudgetStatus | None

    @property
    def budget_rows(self) -> list[tuple[str, BudgetStatus | None]]:
        return [("pool", self.pool_budget), ("team", self.team_budget)]


@dataclass(frozen=True)
class QueueFunds:
    """The account against every pending order shown: each may fit alone and not all together."""

    account: Account | None
    pending_total: Decimal
    pending_count: int

    @property
    def covers_all(self) -> bool | None:
        return None if self.account is None else self.account.balance >= self.pending_total


def payment_account() -> Account | None:
    """The account the simulated cloud debits for orders (`EBCLOUD_SIM_ACCOUNT`); None before
    the first order made one."""
    return Account.objects.filter(name=settings.EBCLOUD_SIM_ACCOUNT).first()


def order_funds(order: PoolOrder, account: Account | None) -> OrderFunds:
    if account is None:
        return OrderFunds(balance=None, currency=order.currency, need=order.amount, covers=None)
    comparable = account.currency == order.currency
    return OrderFunds(balance=account.balance, currency=account.currency, need=order.amount,
                      covers=account.balance >= order.amount if comparable else None)


def order_budgets(*, orders: list[PoolOrder], now: datetime) -> tuple[dict[int, BudgetStatus], dict[int, BudgetStatus]]:
    """This month's status of the orders' pool budgets (by pool id) and team budgets (by team
    id); a pool or team without a budget is absent. Five queries at most."""
    pool_ids = {o.pool_id for o in orders}
    team_ids = {o.pool.team_id for o in orders}
    budgets = Budget.objects.filter(Q(pool_id__in=pool_ids) | Q(pool__isnull=True, team_id__in=team_ids)).select_related("pool", "team")
    statuses = budget_statuses_of(budgets, now=now)
    by_pool = {s.budget.pool_id: s for s in statuses if s.budget.pool_id}
    by_team = {s.budget.team_id: s for s in statuses if not s.budget.pool_id}
    return by_pool, by_team


def order_contexts(*, orders: list[PoolOrder], now: datetime) -> tuple[dict[int, OrderContext], QueueFunds]:
    """Per order id, its quota room, funds and budget use; and the account against all the
    pending orders among them."""
    quotas = order_quotas(orders=orders)
    account = payment_account()
    by_pool, by_team = order_budgets(orders=orders, now=now) if orders else ({}, {})
    contexts = {
        order.pk: OrderContext(
            quota=quotas[order.pk],
            funds=order_funds(order, account),
            pool_budget=by_pool.get(order.pool_id),
            team_budget=by_team.get(order.pool.team_id),
        )
        for order in orders
    }
    pending = [o for o in orders if o.status == PoolOrder.Status.PENDING and (account is None or o.currency == account.currency)]
    queue = QueueFunds(account=account, pending_total=sum((o.amount for o in pending), Decimal(0)), pending_count=len(pending))
    return contexts, queue
