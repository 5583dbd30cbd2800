"""Billing reads: chargeback grouped by label keys, cost over time, budgets (design §6, C4).

Every selector starts from `CostRecord.objects.for_user(user)`: finance and admins see every
team's costs, leads and members only the costs charged to their teams. The grouping rules are
`billing.allocation.group_rows`' rules, applied to sums the database computed: label keys are
verbatim (`gpu-class`), usage without a label is `__unallocated__`, idle is its own rows
(namespace `__idle__`, team = the pool's owner), and every row carries its billing kind, so a
preemptible pool is its own cost line. The page, the CSV and the API all use `chargeback`, so
their totals are equal to the cent.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

from django.db.models import Max, Min, QuerySet, Sum, TextField
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast

from billing import metering
from billing.allocation import (
    CENT,
    DEFAULT_GROUP_LABELS,
    IDLE,
    IDLE_LABEL,
    UNALLOCATED_LABEL,
    GroupTotal,
    group_columns,
)
from billing.costing import cost_records_for
from billing.forecast import month_forecast
from billing.hours import floor_hour
from billing.lease_costs import add_months
from billing.models import Budget, BudgetAlert, CostDay, CostRecord
from pools.core.errors import FieldError, ValidationError
from pools.selectors.pools import teams_visible_to

LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
MAX_GROUP_KEYS = 8
ALLOCATED = "allocated"
SORTABLE = ("amount", "cost")


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


def chargeback(*, user, query: CostQuery) -> list[GroupTotal]:
    """Grouped totals, sorted as asked; sums are done by the database, grouping rules here.

    Read from the daily rollup (`CostDay`), whose sums are the cost records' sums exactly."""
    costs = days_for_user(user=user, query=query)
    names = {key: f"label_{i}" for i, key in enumerate(query.by)}
    fields = [*names.values(), "cost_kind", "billing_kind", "currency"]
    if query.include_namespace:
        fields.append("namespace")
    if "team" in query.by:
        fields.append("team__slug")
    rows = (
        costs.annotate(**{name: KeyTextTransform(key, "labels") for key, name in names.items()})
        .values(*fields)
        .annotate(total=Sum("amount"))
        .order_by()
    )
    totals: dict[tuple, Decimal] = defaultdict(Decimal)
    for row in rows:
        idle = row["cost_kind"] == IDLE
        key: list[tuple[str, str]] = [(k, _value(row, k, names[k], idle)) for k in query.by]
        if query.include_namespace:
            key.append(("namespace", IDLE_LABEL if idle else row["namespace"] or UNALLOCATED_LABEL))
        if "billing" not in query.by:
            key.append(("billing", row["billing_kind"]))
        totals[(tuple(key), idle, row["currency"])] += row["total"]
    groups = [
        GroupTotal(key=k, idle=idle, amount=Decimal(amount).quantize(CENT), currency=cur)
        for (k, idle, cur), amount in totals.items()
    ]
    return _sorted(groups, query.sort)


def _value(row: dict, key: str, name: str, idle: bool) -> str:
    if idle and key == "team":
        return row["team__slug"]
    value = row[name]
    if value:
        return str(value)
    if key == "billing":
        return row["billing_kind"]
    return IDLE_LABEL if idle else UNALLOCATED_LABEL


def _sorted(groups: list[GroupTotal], sort: str) -> list[GroupTotal]:
    column = sort.lstrip("-")
    reverse = sort.startswith("-")

    def sort_key(group: GroupTotal):
        if column == "amount":
            return (group.amount, group.key)
        if column == "cost":
            return (group.idle, group.key)
        return (dict(group.key).get(column, ""), group.key)

    return sorted(groups, key=sort_key, reverse=reverse)


@dataclass(frozen=True)
class Summary:
    total: Decimal
    idle: Decimal
    currency: str

    @property
    def idle_share(self) -> Decimal:
        if not self.total:
            return Decimal(0)
        return (self.idle / self.total * 100).quantize(Decimal("0.1"))


def summarize(groups: list[GroupTotal]) -> Summary:
    total = sum((g.amount for g in groups), Decimal(0))
    idle = sum((g.amount for g in groups if g.idle), Decimal(0))
    currencies = sorted({g.currency for g in groups})
    return Summary(total=total, idle=idle, currency="/".join(currencies) or "CNY")


def cost_series(*, user, query: CostQuery) -> dict[str, list[tuple[date, Decimal]]]:
    """Daily totals stacked by the first grouping key (idle as its own series), for the chart."""
    costs = days_for_user(user=user, query=query)
    key = query.by[0] if query.by else "team"
    rows = (
        costs.annotate(series=KeyTextTransform(key, "labels"))
        .values("day", "series", "cost_kind", "team__slug")
        .annotate(total=Sum("amount"))
        .order_by("day")
    )
    series: dict[str, dict[date, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for row in rows:
        if row["cost_kind"] == IDLE:
            name = f"{IDLE_LABEL} ({row['team__slug']})" if key == "team" else IDLE_LABEL
        else:
            name = row["series"] or UNALLOCATED_LABEL
        series[name][row["day"]] += Decimal(row["total"]).quantize(CENT)
    return {name: sorted(days.items()) for name, days in sorted(series.items())}


def group_dicts(groups: list[GroupTotal]) -> Iterator[dict[str, str]]:
    for group in groups:
        yield group.as_dict()


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
        forecast = None if row is None else month_forecast(spent=spent, first=row["first"], last=row["last"], end=end)
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


@dataclass(frozen=True)
class HourProjection:
    """The hour in progress, priced as metering will price it if nothing changes before its
    end: what is accruing now, before the hourly run writes it (the costs page's live line)."""

    hour: datetime
    by_team: list[tuple[str, Decimal]]
    total: Decimal
    currency: str


def current_hour_projection(*, user, now: datetime) -> HourProjection | None:
    """Same collection and allocation as `billing.services.meter_hour`, nothing saved; the
    teams the user may see. None when nothing is running."""

    hour = floor_hour(now)
    rows = cost_records_for(metering.usage_collect(hour=hour).records)
    visible = set(teams_visible_to(user=user).values_list("pk", flat=True))
    totals: dict[str, Decimal] = {}
    for row in rows:
        if row.team_id in visible:
            totals[row.team.name] = totals.get(row.team.name, Decimal("0")) + row.amount
    if not totals:
        return None
    return HourProjection(hour=hour, by_team=sorted(totals.items()), total=sum(totals.values(), Decimal("0")),
                          currency=rows[0].currency)
