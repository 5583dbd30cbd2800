"""Billing reads: the cost query, cost records and daily rollups in range, detail rows,
budgets (design §6, C4); the grouped chargeback is `billing.chargeback`.

Every selector starts from `CostRecord.objects.for_user(user)` (or `CostDay`'s): finance and
admins see every team's costs, leads and members only the costs charged to their teams.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

from django.db.models import Max, Min, QuerySet, Sum, TextField
from django.db.models.functions import Cast

from billing.allocation import (
    CENT,
    CHARGED_TEAM,
    DEFAULT_GROUP_LABELS,
    group_columns,
)
from billing.lease_costs import add_months
from billing.models import Budget, BudgetAlert, CostDay, CostRecord
from pools.core.errors import FieldError, ValidationError

LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
MAX_GROUP_KEYS = 8


@dataclass(frozen=True)
class CostQuery:
    """What to group and over which days (`start`..`end` inclusive, UTC)."""

    by: tuple[str, ...] = DEFAULT_GROUP_LABELS
    start: date | None = None
    end: date | None = None
    team: str = ""
    pool: str = ""
    billing: str = ""
    include_namespace: bool = True
    sort: str = "-amount"

    @property
    def columns(self) -> tuple[str, ...]:
        return group_columns(self.by, self.include_namespace)


def cost_query_parse(
    params, *, default_start: date | None = None, default_end: date | None = None
) -> CostQuery:
    """A CostQuery from query-string parameters (`by`, `from`, `to`, `team`, `pool`, `billing`,
    `namespace=0`, `sort`); invalid values raise ValidationError with the parameter as field."""
    errors = []
    by_text = params.get("by") or ",".join(DEFAULT_GROUP_LABELS)
    by = tuple(k.strip() for k in by_text.split(",") if k.strip())
    include_namespace = params.get("namespace", "1") not in ("0", "false", "no")
    if "namespace" in by:
        by = tuple(k for k in by if k != "namespace")
        include_namespace = True
    if len(by) > MAX_GROUP_KEYS or len(set(by)) != len(by):
        errors.append(("by", f"at most {MAX_GROUP_KEYS} distinct label keys"))
    for key in by:
        if len(key) > 317 or not LABEL_KEY.match(key):
            errors.append(("by", f"{key!r} is not a label key"))
        elif key == CHARGED_TEAM:
            errors.append(("by", f"{key} is always a column; group by team for the team label"))
    start = _date(params.get("from"), "from", errors) or default_start
    end = _date(params.get("to"), "to", errors) or default_end
    if start and end and end < start:
        errors.append(("to", "must not be before from"))
    for key in ("team", "pool"):
        if "\x00" in params.get(key, ""):
            errors.append((key, "null characters are not allowed"))
    billing = params.get("billing", "")
    if billing and billing not in ("monthly", "on_demand", "preemptible"):
        errors.append(("billing", "must be monthly, on_demand or preemptible"))
    sort = params.get("sort") or "-amount"
    columns = group_columns(by, include_namespace)
    if sort.lstrip("-") not in columns:
        errors.append(("sort", f"must be one of {', '.join(columns)} (prefix - for descending)"))
    if errors:
        raise ValidationError([FieldError(field, message) for field, message in errors])
    return CostQuery(
        by=by, start=start, end=end, team=params.get("team", ""), pool=params.get("pool", ""),
        billing=billing, include_namespace=include_namespace, sort=sort,
    )  # fmt: skip


def _date(value: str | None, field: str, errors: list) -> date | None:
    if not value:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        errors.append((field, "must be a date such as 2026-12-01"))
        return None


def _scoped(rows: QuerySet, query: CostQuery) -> QuerySet:
    """The query's team, pool and billing kind filters, shared by records and daily rollups."""
    if query.team:
        rows = rows.filter(team__slug=query.team)
    if query.pool:
        rows = rows.filter(pool__name=query.pool)
    if query.billing:
        rows = rows.filter(billing_kind=query.billing)
    return rows


def costs_for_user(*, user, query: CostQuery) -> QuerySet[CostRecord]:
    costs = CostRecord.objects.for_user(user)
    if query.start:
        costs = costs.filter(hour__gte=datetime.combine(query.start, time(), tzinfo=UTC))
    if query.end:
        costs = costs.filter(
            hour__lt=datetime.combine(query.end + timedelta(days=1), time(), tzinfo=UTC)
        )
    return _scoped(costs, query)


def days_for_user(*, user, query: CostQuery) -> QuerySet[CostDay]:
    """The daily rollup rows in the range (ranges are whole days, so the rollup is exact)."""
    days = CostDay.objects.for_user(user)
    if query.start:
        days = days.filter(day__gte=query.start)
    if query.end:
        days = days.filter(day__lte=query.end)
    return _scoped(days, query)


def budgets_for_user(*, user) -> QuerySet[Budget]:
    return Budget.objects.for_user(user).select_related("pool", "team")


# --------------------------------------------------------------------------- detail
# (the FOCUS export: billing.focus_selectors)

DETAIL_COLUMNS = (
    "hour", "pool", "team", "namespace", "gpu_class", "billing", "cost", "component",
    "gpu_hours", "amount", "currency", "labels",
)  # fmt: skip


def cost_detail_rows(
    *, user, query: CostQuery, chunk_size: int = 5000
) -> Iterator[dict[str, object]]:
    """Every cost record in the range, streamed from a server-side cursor (constant memory).

    Labels come out of the database as JSON text (never decoded and re-encoded here)."""
    rows = (
        costs_for_user(user=user, query=query)
        .order_by("hour", "id")
        .annotate(labels_text=Cast("labels", TextField()))
        .values_list(
            "hour",
            "pool__name",
            "team__slug",
            "namespace",
            "gpu_class",
            "billing_kind",
            "cost_kind",
            "component",
            "gpu_hours",
            "amount",
            "currency",
            "labels_text",
        )  # fmt: skip
    )
    for values in rows.iterator(chunk_size=chunk_size):
        yield dict(zip(DETAIL_COLUMNS, values, strict=True))


# --------------------------------------------------------------------------- budgets

FORECAST_MIN_DATA = timedelta(days=3)


@dataclass(frozen=True)
class BudgetStatus:
    budget: Budget
    period: date
    spent: Decimal
    forecast: Decimal | None

    @property
    def percent(self) -> Decimal:
        return _percent(self.spent, self.budget.monthly_amount)

    @property
    def forecast_percent(self) -> Decimal | None:
        return (
            None if self.forecast is None else _percent(self.forecast, self.budget.monthly_amount)
        )

    @property
    def bar_percent(self) -> Decimal:
        return min(self.percent, Decimal(100))

    @property
    def level(self) -> str:
        return (
            "over"
            if self.percent >= 100
            else "warn"
            if self.percent >= min(self.budget.thresholds or [80])
            else "ok"
        )


def _percent(amount: Decimal, of: Decimal) -> Decimal:
    return (Decimal(amount) / Decimal(of) * 100).quantize(Decimal("0.1")) if of else Decimal(0)


def period_bounds(now: datetime) -> tuple[datetime, datetime]:
    start = now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return start, add_months(start, 1)


def budget_costs(budget: Budget) -> QuerySet[CostRecord]:
    """A pool budget covers everything its pool costs; a team budget what its team is charged."""
    if budget.pool_id:
        return CostRecord.objects.filter(pool_id=budget.pool_id)
    return CostRecord.objects.filter(team_id=budget.team_id)


def budget_status(*, budget: Budget, now: datetime) -> BudgetStatus:
    """Spend this month and, after 3 days of data, a linear run-rate forecast for the month."""
    return budget_statuses_of([budget], now=now)[0]


def budget_statuses_of(budgets, *, now: datetime) -> list[BudgetStatus]:
    """Statuses of many budgets in two queries (one for pool budgets, one for team budgets)."""
    budgets = list(budgets)
    start, end = period_bounds(now)
    month = CostRecord.objects.filter(hour__gte=start, hour__lt=end)
    sums: dict[tuple[str, int, str], dict] = {}
    for scope, ids in (
        ("pool_id", {b.pool_id for b in budgets if b.pool_id}),
        ("team_id", {b.team_id for b in budgets if not b.pool_id}),
    ):
        if not ids:
            continue
        rows = (
            month.filter(**{f"{scope}__in": ids})
            .values(scope, "currency")
            .annotate(spent=Sum("amount"), first=Min("hour"), last=Max("hour"))
            .order_by()
        )
        for row in rows:
            sums[(scope, row[scope], row["currency"])] = row
    out = []
    for budget in budgets:
        key = ("pool_id", budget.pool_id) if budget.pool_id else ("team_id", budget.team_id)
        row = sums.get((*key, budget.currency))
        spent = Decimal(row["spent"] if row else 0).quantize(CENT)
        forecast = None
        if row is not None:
            elapsed = min(row["last"] + timedelta(hours=1), end) - row["first"]
            if elapsed >= FORECAST_MIN_DATA:
                rate = spent / Decimal(elapsed / timedelta(hours=1))
                forecast = (rate * Decimal((end - row["first"]) / timedelta(hours=1))).quantize(
                    CENT
                )
        out.append(BudgetStatus(budget=budget, period=start.date(), spent=spent, forecast=forecast))
    return out


def budget_statuses(*, user, now: datetime) -> list[BudgetStatus]:
    return budget_statuses_of(budgets_for_user(user=user), now=now)


def pool_budget_status(*, pool, now: datetime) -> BudgetStatus | None:
    """The pool's budget this month, for the budget bar on the pool page (None: no budget)."""
    budget = Budget.objects.filter(pool=pool).select_related("pool", "team").first()
    return None if budget is None else budget_status(budget=budget, now=now)


def budget_alerts_for_user(*, user, limit: int = 50):
    budgets = budgets_for_user(user=user)
    return (
        BudgetAlert.objects.filter(budget__in=budgets)
        .select_related("budget__pool", "budget__team")
        .order_by("-created_at", "-id")[:limit]
    )
