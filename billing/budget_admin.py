"""Budgets finance sets (issue 21): a pool's budget over its spec and its default, and a team's
monthly budget. Finance and platform admins may; everyone else is refused (a lead of another
team does not even find the pool: the views look it up through `for_user`). Every change is an
AuditEntry, like the other admin writes, with the budget before and after.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from billing.budget_sync import budget_sync_pool
from billing.models import Budget, CostDay, NodePrice, PriceBookEntry
from billing.month_spend import period_bounds
from pools import roles
from pools.core.errors import ValidationError, listed_twice, repeats
from pools.core.spec import MAX_MONTHLY_BUDGET
from pools.models import GpuNodePool, Team
from pools.services.audit import audit_record, snapshot
from pools.services.events import event_record

CURRENCY_LENGTH = 3
CENT = Decimal("0.01")


def may_set_budgets(user) -> bool:
    """Finance and platform admins set budgets; leads plan theirs in the pool's spec."""
    return roles.is_admin(user) or roles.is_finance(user)


def _check_amount(amount: Decimal | None, field: str) -> None:
    if amount is None:
        return
    if amount <= 0:
        raise ValidationError("must be a positive amount", field=field)
    if amount > MAX_MONTHLY_BUDGET:
        raise ValidationError(f"must be at most {MAX_MONTHLY_BUDGET}", field=field)
    if amount != amount.quantize(CENT):
        raise ValidationError("must have at most 2 decimals", field=field)


def _check_thresholds(thresholds) -> list[int]:
    """The thresholds, sorted; one given twice is refused (as in a pool's spec.budget), not
    stored once in silence."""
    given = [int(t) for t in thresholds]
    if again := repeats(given):
        raise ValidationError(listed_twice(again[0][1]), field="thresholds")
    values = sorted(given)
    if not values or any(not 1 <= t <= 1000 for t in values):
        raise ValidationError("must be percentages between 1 and 1000", field="thresholds")
    return values


def _state(budget: Budget | None) -> dict | None:
    return None if budget is None else snapshot(budget, exclude=("created_at", "updated_at", "default_note"))


def _in_force(rows, key, now: datetime) -> dict:
    """key -> the currency of the versioned price row in force at `now` for that key."""
    latest: dict = {}
    for row in rows.filter(effective_from__lte=now).order_by("-effective_from"):
        latest.setdefault(key(row), row.currency)
    return latest


def team_charge_currencies(*, team: Team, now: datetime) -> set[str]:
    """The currencies `team` is charged in: those of its costs since last month began and of
    the prices in force for its live pools (their nodes' and the per-pool fees'); for a team
    with neither yet, the price book's. A team budget counts only the spend in its own
    currency, so one in any other would show nothing spent and never alert. Empty only when
    the price book is."""
    since = (period_bounds(now)[0] - timedelta(days=1)).replace(day=1).date()
    found = set(CostDay.objects.filter(team=team, day__gte=since).values_list("currency", flat=True).distinct())
    shapes = set(GpuNodePool.objects.filter(team=team, deleted_at=None).values_list("node_type_id", "gpu_model_id"))
    fees = set(_in_force(PriceBookEntry.objects.all(), lambda entry: entry.kind, now).values())
    nodes = _in_force(NodePrice.objects.all(), lambda price: (price.node_type_id, price.gpu_model_id), now)
    if shapes:
        found |= fees | {currency for shape, currency in nodes.items() if shape in shapes}
    return found or fees | set(nodes.values())


@transaction.atomic
def budget_pool_set(*, user, pool: GpuNodePool, monthly_amount: Decimal | None, now: datetime | None = None) -> Budget | None:
    """Finance's budget for the pool; None removes it, so the spec's or the default applies again."""
    if not may_set_budgets(user):
        raise PermissionDenied("only finance and platform admins set budgets")
    _check_amount(monthly_amount, "monthly")
    now = now or timezone.now()
    pool = GpuNodePool.objects.get(pk=pool.pk)  # its spec as it is now: the budget follows it
    budget = Budget.objects.select_for_update().filter(pool=pool).order_by("pk").first()  # no join to the ordering's tables: PostgreSQL locks no outer join
    before = _state(budget)
    if budget is None:
        if monthly_amount is None:
            return budget_sync_pool(pool=pool, now=now)
        budget = Budget(pool=pool, team_id=pool.team_id, monthly_amount=monthly_amount, created_at=now)
    budget.override_amount = None if monthly_amount is None else monthly_amount.quantize(CENT)
    budget.save()
    budget = budget_sync_pool(pool=pool, now=now, budget=budget)
    if budget is not None:
        event_record(pool=pool, reason="BudgetSet", actor=user, now=now, message=(
            f"Monthly budget set to {budget.monthly_amount} {budget.currency} by {user.get_username()}" if monthly_amount is not None
            else f"Monthly budget reset by {user.get_username()}: {budget.monthly_amount} {budget.currency} ({budget.get_source_display().lower()})"
        ))  # fmt: skip
    audit_record(actor=user, action="budget.pool.set" if monthly_amount is not None else "budget.pool.clear",
                 obj=budget if budget is not None else pool, before=before, after=_state(budget))  # fmt: skip
    return budget


@transaction.atomic
def budget_team_set(
    *, user, team: Team, monthly_amount: Decimal, currency: str = "CNY", thresholds=(80, 100), now: datetime | None = None
) -> Budget:
    """A team-wide monthly budget over everything the team is charged (finance and admins)."""
    if not may_set_budgets(user):
        raise PermissionDenied("only finance and platform admins set team budgets")
    if monthly_amount is None:
        raise ValidationError("is required", field="monthly")
    _check_amount(monthly_amount, "monthly")
    if len(currency) != CURRENCY_LENGTH or not (currency.isascii() and currency.isalpha() and currency.isupper()):
        raise ValidationError("must be an ISO 4217 code such as CNY or USD", field="currency")
    values = _check_thresholds(thresholds)
    now = now or timezone.now()
    charged = team_charge_currencies(team=team, now=now)
    if charged and currency not in charged:
        raise ValidationError(
            f"must be {' or '.join(sorted(charged))}: team {team.name} is charged in "
            f"{'that currency' if len(charged) == 1 else 'those currencies'}, and a budget in "
            f"another would count none of its spend", field="currency",
        )  # fmt: skip
    budget = Budget.objects.select_for_update().filter(team=team, pool=None).order_by("pk").first()
    before = _state(budget)
    if budget is None:
        budget = Budget(team=team, pool=None, created_at=now)
    budget.monthly_amount = monthly_amount.quantize(CENT)
    budget.currency = currency
    budget.thresholds = values
    budget.source = Budget.Source.FINANCE
    budget.updated_at = now
    budget.save()
    audit_record(actor=user, action="budget.team.set", obj=budget, before=before, after=_state(budget))
    return budget


@transaction.atomic
def budget_team_delete(*, user, budget: Budget) -> None:
    """Remove a team's budget (its alerts go with it)."""
    if not may_set_budgets(user):
        raise PermissionDenied("only finance and platform admins remove team budgets")
    audit_record(actor=user, action="budget.team.delete", obj=budget, before=_state(budget))
    budget.delete()
