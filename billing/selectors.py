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

from django.db.models import Case, F, Q, QuerySet, TextField, Value, When
from django.db.models.functions import Cast, Concat

from billing.allocation import (
    CHARGED_TEAM,
    DEFAULT_GROUP_LABELS,
    FIXED_COLUMNS,
    group_columns,
)
from billing.budget_sync import budgets_in_force_q
from billing.models import Budget, BudgetAlert, CostDay, CostRecord
from billing.month_spend import BudgetStatus, budget_statuses_of
from pools import roles
from pools.core.errors import FieldError, ValidationError, query_flag
from pools.models import GpuNodePool, Notification, Team

LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
MAX_GROUP_KEYS = 8
# The days a cost query may name. Python's dates end at 9999-12-31, and every range is read as
# half-open hours (`to` + 1 day) and drawn with half a day of margin, so the calendar's first
# and last days overflowed (a 500); no cost is older than the product or centuries ahead.
FIRST_DAY = date(2000, 1, 1)
LAST_DAY = date(2999, 12, 31)
# A deleted pool's id in its ledger name `name#id`: a positive id that fits a bigint.
MAX_POOL_ID_DIGITS = 18


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


def _shown(key: str, limit: int = 60) -> str:
    """A refused key as the message names it: cut short (a 10,000-character key was echoed whole)."""
    return repr(key if len(key) <= limit else key[:limit] + "…")


def cost_query_parse(
    params, *, default_start: date | None = None, default_end: date | None = None
) -> CostQuery:
    """A CostQuery from query-string parameters (`by`, `from`, `to`, `team`, `pool`, `billing`,
    `namespace=0`, `sort`); invalid values raise ValidationError with the parameter as field."""
    errors = []
    by_text = params.get("by") or ",".join(DEFAULT_GROUP_LABELS)
    by = tuple(k.strip() for k in by_text.split(",") if k.strip())
    try:
        include_namespace = query_flag(params, "namespace", default=True)
    except ValidationError as exc:
        errors.extend((e.field, e.message) for e in exc.errors)
        include_namespace = True
    if "namespace" in by:
        by = tuple(k for k in by if k != "namespace")
        include_namespace = True
    named = by  # the keys each error names: none of thousands
    if len(set(by)) > MAX_GROUP_KEYS:
        errors.append(("by", f"at most {MAX_GROUP_KEYS} label keys"))
        named = ()
    for key in dict.fromkeys(k for k in named if named.count(k) > 1):
        errors.append(("by", f"{_shown(key)} is given twice"))
    for key in dict.fromkeys(named):
        if len(key) > 317 or not LABEL_KEY.match(key):
            errors.append(("by", f"{_shown(key)} is not a label key"))
        elif key == CHARGED_TEAM:
            errors.append(("by", f"{key} is always a column; group by team for the team label"))
        elif key in FIXED_COLUMNS:
            errors.append(("by", f"{key} is always a column (the kind of cost, metered or accruing, the amount and its currency); it cannot be a label key"))
    dated = len(errors)
    given_start, given_end = _date(params.get("from"), "from", errors), _date(params.get("to"), "to", errors)
    start, end = given_start or default_start, given_end or default_end
    if start and end and end < start and len(errors) == dated:  # a day refused as such is not also out of order
        # Name what was given, not a default (`billing.api.parse_query`'s: this month to
        # today): a `from` alone after today is a day in the future, not a `to` never given (QA).
        if given_end is None:
            errors.append(("from", f"{start} is after today ({end}, UTC): give a day up to today, or a to as well"))
        elif given_start is None:
            errors.append(("to", f"{end} is before the 1st of this month ({start}, UTC), where the costs start when from is not given: give a from as well"))
        else:
            errors.append(("to", "must not be before from"))
    for key in ("team", "pool"):
        if "\x00" in params.get(key, ""):
            errors.append((key, "null characters are not allowed"))
    try:
        ledger_pool_split(params.get("pool", ""))
    except ValueError as exc:
        errors.append(("pool", str(exc)))
    billing = params.get("billing", "")
    if billing and billing not in ("monthly", "on_demand", "preemptible"):
        errors.append(("billing", "must be monthly, on_demand or preemptible"))
    sort = params.get("sort") or "-amount"
    columns = group_columns(by, include_namespace)
    if sort.removeprefix("-") not in columns:  # one dash: `---team` is no column
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
        day = date.fromisoformat(value)
    except ValueError:
        errors.append((field, "must be a date such as 2026-12-01"))
        return None
    if not FIRST_DAY <= day <= LAST_DAY:
        errors.append((field, f"must be between {FIRST_DAY} and {LAST_DAY}: no costs are kept outside those years"))
        return None
    return day


# --------------------------------------------------------------------------- pools by ledger name
# A report names a pool as the hour's ledger does (`GpuNodePool.ledger_name`): a live
# pool by its name, a deleted one by `name#id`. A new pool may take a deleted pool's name while
# the deleted one's leases are still billed: `?pool=train-pool-a` is the live pool alone (the
# pool list's figure), `?pool=train-pool-a#12` the deleted one, and no row merges the two.


def ledger_pool_split(ledger_name: str) -> tuple[str, int | None]:
    """A pool's ledger name as (name, id of a deleted pool or None); ValueError if malformed."""
    if "#" not in ledger_name:
        return ledger_name, None
    name, _, digits = ledger_name.rpartition("#")
    # One spelling per id: `#05` found pool 5 but matched none of its rows, named `#5` (QA).
    if not (name and digits.isascii() and digits.isdigit() and len(digits) <= MAX_POOL_ID_DIGITS and digits[0] != "0"):
        raise ValueError("must be a pool's name or, for a deleted pool, its name#id such as train-pool-a#12")
    return name, int(digits)


def ledger_pool_q(ledger_name: str, path: str = "pool__") -> Q:
    """The pool whose ledger name is `ledger_name`, from rows that reach it by `path` ("" for
    the pools themselves): the live pool of that name, or the deleted pool of `name#id`."""
    name, pk = ledger_pool_split(ledger_name)
    if pk is None:
        return Q(**{f"{path}name": name, f"{path}deleted_at__isnull": True})
    return Q(**{f"{path}pk": pk, f"{path}name": name, f"{path}deleted_at__isnull": False})


def cost_pool_known(*, user, ledger_name: str) -> bool:
    """Whether `user` may filter costs by the pool of `ledger_name`: one of their teams' pools
    (any pool for finance and admins), one lent to their team (`spec.sharedWith`), or one their
    teams were charged on. Another team's pool is refused exactly as a pool that does not exist
    is: the answer never tells which (teams are isolated)."""
    pools = list(GpuNodePool.objects.filter(ledger_pool_q(ledger_name, "")).only("id", "team_id", "document"))
    if not pools or not user.is_authenticated:
        return False
    if roles.sees_all_teams(user):
        return True
    team_ids = roles.team_ids(user)
    slugs = set(Team.objects.filter(pk__in=team_ids).values_list("slug", flat=True))
    if any(p.team_id in team_ids or slugs.intersection(p.shared_with) for p in pools):
        return True
    return CostRecord.objects.filter(pool__in=pools, team_id__in=team_ids).exists()


def cost_pool_require(*, user, query: CostQuery) -> None:
    """The query's pool refused as unknown (a form error) when `user` may not filter by it: no
    costs would read as the pool's costs being nil (QA)."""
    if query.pool and not cost_pool_known(user=user, ledger_name=query.pool):
        raise ValidationError(f"unknown pool {_shown(query.pool)} (a deleted pool is named as the reports name it, such as train-pool-a#12)", field="pool")


def ledger_pool_name_of(path: str = "pool__"):
    """The database expression of the rows' pool's ledger name (`ledger_pool_q` selects by it):
    `GpuNodePool.ledger_name` in SQL, so that a report sorts and groups by it in the query."""
    return Case(
        When(**{f"{path}deleted_at__isnull": True}, then=F(f"{path}name")),
        default=Concat(F(f"{path}name"), Value("#"), Cast(f"{path}id", TextField()), output_field=TextField()),
        output_field=TextField(),
    )


def _scoped(rows: QuerySet, query: CostQuery) -> QuerySet:
    """The query's team, pool and billing kind filters, shared by records and daily rollups."""
    if query.team:
        rows = rows.filter(team__slug=query.team)
    if query.pool:
        rows = rows.filter(ledger_pool_q(query.pool))
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

    Labels come out of the database as JSON text (never decoded and re-encoded here); the pool
    is its ledger name (a deleted pool's `name#id`)."""
    rows = (
        costs_for_user(user=user, query=query)
        .order_by("hour", "id")
        .annotate(labels_text=Cast("labels", TextField()), pool_ledger_name=ledger_pool_name_of())
        .values_list(
            "hour",
            "pool_ledger_name",
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


def budget_status(*, budget: Budget, now: datetime) -> BudgetStatus:
    """Spend this month and, after 3 days of data, a linear run-rate forecast for the month."""
    return budget_statuses_of([budget], now=now)[0]


def budget_statuses(*, user, now: datetime) -> list[BudgetStatus]:
    """This month's budgets the user may see: the teams', the live pools' and those of the
    deleted pools still charged this month (`billing.budget_sync`: a deleted pool's budget is
    kept, its alerts stay listed, but it is this month's only while the pool costs)."""
    return budget_statuses_of(budgets_for_user(user=user).filter(budgets_in_force_q(now)), now=now)


def pool_budget_status(*, pool, now: datetime) -> BudgetStatus | None:
    """The pool's budget this month, for the budget bar on the pool page (None: no budget)."""
    budget = Budget.objects.filter(pool=pool).select_related("pool", "team").first()
    return None if budget is None else budget_status(budget=budget, now=now)


def budget_alerts_for_user(*, user, limit: int = 50) -> list[BudgetAlert]:
    """The latest alerts of the budgets the user may see, each with its `notification` (how
    far its mail and webhook got; None if it was never raised): two queries."""
    budgets = budgets_for_user(user=user)
    alerts = list(
        BudgetAlert.objects.filter(budget__in=budgets)
        .select_related("budget__pool", "budget__team")
        .order_by("-created_at", "-id")[:limit]
    )
    keys = {alert.notification_key: alert for alert in alerts}
    for alert in alerts:
        alert.notification = None
    for notification in Notification.objects.filter(key__in=list(keys)):
        keys[notification.key].notification = notification
    return alerts
