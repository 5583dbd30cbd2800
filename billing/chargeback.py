"""Chargeback reads: grouped totals of the metered hours plus the hours still accruing (C4, G3).

Why the accruing hours are here: metering writes an hour once it is complete, at the top of
the next hour, so a pool started at 10:20 has no cost record before 11:0x. Without them finance
would read "No costs in this range" and a header-only CSV for the first hour (issue 21 §3).
The hours metering has not written yet (the current one, and a complete one waiting for the
next run) are priced by the same collection and allocation as `billing.services.meter_hour`,
nothing saved, and come out as rows with `status` `accruing`; once metered, the hour's
`metered` rows replace them (an hour with a `MeterRun` is never projected; of an hour
metered in parts, only the parts not metered yet are).

Every group goes through `billing.allocation.group_key`, so the page, the CSV and the API's
JSON have the same columns whatever the grouping keys: the charged team, the label keys, the
namespace, the billing kind, the kind of cost (allocated, unallocated, idle) and the status
(issue 21 §4). Sums are exact, and per currency: `summarize` and `cost_series` never add one
currency to another (a pool's nodes and fees may be priced in different ones); the page's
totals equal the CSV's to the cent, currency by currency.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal

from django.db.models import Sum
from django.db.models.fields.json import KeyTextTransform

from billing import metering
from billing.allocation import (
    ACCRUING,
    CENT,
    DEFAULT_CURRENCY,
    IDLE,
    METERED,
    GroupTotal,
    group_key,
)
from billing.costing import cost_records_for
from billing.hours import HOUR, floor_hour
from billing.models import CostRecord
from billing.selectors import CostQuery, days_for_user
from pools import roles
from pools.claims import Part

# The current hour and the one just completed, which metering writes a few minutes past the
# top of the hour (`billing.hours.METER_RUN_OFFSET`). Older unmetered hours mean metering is
# behind (its catch-up writes them); they are not projected: each projected hour is a full
# collection of the fleet on every page view.
ACCRUING_HOURS = 2


def accruing_hours(*, query: CostQuery, now: datetime) -> list[tuple[datetime, list[Part]]]:
    """The hours up to `now`'s not wholly metered, within the query's days, each with its parts
    not metered yet (an hour metered in parts by several workers is whole when all are in)."""
    current = floor_hour(now)
    hours = [current - i * HOUR for i in reversed(range(ACCRUING_HOURS))]
    if query.start:
        hours = [h for h in hours if h >= datetime.combine(query.start, time(), tzinfo=UTC)]
    if query.end:
        end = datetime.combine(query.end + timedelta(days=1), time(), tzinfo=UTC)
        hours = [h for h in hours if h < end]
    if not hours:
        return []
    return metering.parts_unmetered(hours)


def accruing_costs(*, user, query: CostQuery, now: datetime) -> list[CostRecord]:
    """Unsaved cost records of the unmetered hours, as metering will write them if nothing
    changes; only the teams the user may see, narrowed by the query's filters (the pool by its
    ledger name, as `billing.selectors.ledger_pool_q` selects the metered ones)."""
    all_teams = roles.sees_all_teams(user)
    visible = None if all_teams else roles.team_ids(user)
    if not all_teams and not visible:
        return []
    out = []
    projected = (
        record
        for hour, parts in accruing_hours(query=query, now=now)
        for part in parts
        for record in cost_records_for(metering.usage_collect(hour=hour, part=part).records)
    )
    for record in projected:
        if visible is not None and record.team_id not in visible:
            continue
        if query.team and record.team.slug != query.team:
            continue
        if query.pool and metering.ledger_pool_name(record.pool) != query.pool:  # as `ledger_pool_q`
            continue
        if query.billing and record.billing_kind != query.billing:
            continue
        out.append(record)
    return out


def chargeback(*, user, query: CostQuery, accruing: list[CostRecord] = ()) -> list[GroupTotal]:
    """Grouped totals, sorted as asked: the metered days (sums done by the database, from the
    daily rollup `CostDay`, exact) and the `accruing` records (`accruing_costs`: the caller
    reads them once for the table and the chart)."""
    names = {key: f"label_{i}" for i, key in enumerate(query.by)}
    fields = [*names.values(), "cost_kind", "billing_kind", "currency", "namespace", "team__slug"]
    rows = (
        days_for_user(user=user, query=query)
        .annotate(**{name: KeyTextTransform(key, "labels") for key, name in names.items()})
        .values(*fields)
        .annotate(total=Sum("amount"))
        .order_by()
    )
    totals: dict[tuple, Decimal] = defaultdict(Decimal)
    for row in rows:
        key, kind = _key(query, row["team__slug"], {k: row[n] for k, n in names.items()}, row)
        totals[(key, kind, METERED, row["currency"])] += row["total"]
    for record in accruing:
        fields_of = {"namespace": record.namespace, "billing_kind": record.billing_kind, "cost_kind": record.cost_kind}
        key, kind = _key(query, record.team.slug, record.labels, fields_of)
        totals[(key, kind, ACCRUING, record.currency)] += record.amount
    groups = [
        GroupTotal(key=k, kind=kind, status=status, amount=Decimal(amount).quantize(CENT), currency=cur)
        for (k, kind, status, cur), amount in totals.items()
    ]
    return _sorted(groups, query.sort)


def _key(query: CostQuery, team: str, labels, row) -> tuple[tuple, str]:
    return group_key(
        charged_team=team, labels=labels, namespace=row["namespace"], billing_kind=row["billing_kind"],
        cost_kind=row["cost_kind"], by_labels=query.by, include_namespace=query.include_namespace,
    )  # fmt: skip


def _sorted(groups: list[GroupTotal], sort: str) -> list[GroupTotal]:
    column = sort.lstrip("-")
    reverse = sort.startswith("-")

    def sort_key(group: GroupTotal):
        if column == "amount":
            return (group.amount, group.key, group.status)
        row = group.as_dict()
        return (row.get(column, ""), group.key, group.status)

    return sorted(groups, key=sort_key, reverse=reverse)


NO_MONEY = Decimal("0.00")  # with the two decimals every amount has


@dataclass(frozen=True)
class CurrencyTotal:
    """The rows' totals in one currency. Why per currency: a pool's nodes and its fees may be
    priced in different currencies, and 200.00 CNY plus 20.00 USD is not 220.00 of anything;
    like the budgets (`billing.month_spend`), every total is of one currency."""

    currency: str
    total: Decimal
    idle: Decimal
    accruing: Decimal
    accrues: bool = False  # some of its rows are accruing (their sum may still be zero)

    @property
    def idle_share(self) -> Decimal:
        if not self.total:
            return Decimal("0.0")
        return (self.idle / self.total * 100).quantize(Decimal("0.1"))


@dataclass(frozen=True)
class Summary:
    """The totals of the rows, one `CurrencyTotal` per currency charged (by currency code;
    none without rows). `total`, `idle`, `accruing`, `idle_share` and `currency` are the one
    currency's, zero in the default currency without rows, and None when there are several:
    no single number is honest then."""

    by_currency: tuple[CurrencyTotal, ...] = ()

    @property
    def currencies(self) -> tuple[str, ...]:
        return tuple(t.currency for t in self.by_currency)

    @property
    def several(self) -> bool:
        return len(self.by_currency) > 1

    @property
    def lines(self) -> tuple[CurrencyTotal, ...]:
        """One total line per currency; the zero of the default currency without rows."""
        return self.by_currency or (CurrencyTotal(DEFAULT_CURRENCY, NO_MONEY, NO_MONEY, NO_MONEY),)

    @property
    def accruing_lines(self) -> tuple[CurrencyTotal, ...]:
        return tuple(t for t in self.by_currency if t.accrues)

    def _single(self, name: str):
        return None if self.several else getattr(self.lines[0], name)

    @property
    def total(self) -> Decimal | None:
        return self._single("total")

    @property
    def idle(self) -> Decimal | None:
        return self._single("idle")

    @property
    def accruing(self) -> Decimal | None:
        return self._single("accruing")

    @property
    def idle_share(self) -> Decimal | None:
        return self._single("idle_share")

    @property
    def currency(self) -> str | None:
        return self._single("currency")


def summarize(groups: list[GroupTotal]) -> Summary:
    """Totals of the rows in each currency: all of them, the idle ones, the accruing ones."""
    by_currency: dict[str, list[GroupTotal]] = defaultdict(list)
    for group in groups:
        by_currency[group.currency].append(group)
    return Summary(tuple(_currency_total(currency, by_currency[currency]) for currency in sorted(by_currency)))


def _currency_total(currency: str, groups: list[GroupTotal]) -> CurrencyTotal:
    accruing = [g.amount for g in groups if g.status == ACCRUING]
    return CurrencyTotal(
        currency=currency,
        total=sum((g.amount for g in groups), Decimal(0)),
        idle=sum((g.amount for g in groups if g.idle), Decimal(0)),
        accruing=sum(accruing, Decimal(0)),
        accrues=bool(accruing),
    )


def group_dicts(groups: list[GroupTotal]) -> Iterator[dict[str, str]]:
    for group in groups:
        yield group.as_dict()


def accruing_by_team(groups: list[GroupTotal]) -> list[tuple[str, Decimal, str]]:
    """The accruing rows' amounts per charged team and currency, for the line above the
    table: (team, amount, currency), by team then currency."""
    totals: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for group in groups:
        if group.status == ACCRUING:
            totals[(dict(group.key)["charged_team"], group.currency)] += group.amount
    return [(team, amount, currency) for (team, currency), amount in sorted(totals.items())]


def cost_series(
    *, user, query: CostQuery, accruing: list[CostRecord] = ()
) -> dict[str, dict[tuple[str, str], dict]]:
    """Daily totals for the chart per currency (never summed across currencies: each is a
    panel of its own), stacked by the first grouping key: one series per (kind, value) where
    kind is `allocated`, `unallocated` (no value for the key), `idle` (by the pool owner when
    stacking by team) or `accruing`; `billing.cost_chart` names them."""
    key = query.by[0] if query.by else "team"
    rows = (
        days_for_user(user=user, query=query)
        .annotate(series=KeyTextTransform(key, "labels"))
        .values("day", "series", "cost_kind", "team__slug", "currency")
        .annotate(total=Sum("amount"))
        .order_by("day")
    )
    series: dict[str, dict[tuple[str, str], dict]] = defaultdict(lambda: defaultdict(lambda: defaultdict(Decimal)))
    for row in rows:
        value = row["team__slug"] if key == "team" else row["series"] or ""
        if row["cost_kind"] == IDLE:
            name = (IDLE, row["team__slug"] if key == "team" else "")
        else:
            name = ("allocated" if value else "unallocated", value)
        series[row["currency"]][name][row["day"]] += Decimal(row["total"]).quantize(CENT)
    for record in accruing:
        series[record.currency][(ACCRUING, "")][record.hour.date()] += record.amount
    return {
        currency: {name: dict(sorted(days.items())) for name, days in sorted(series[currency].items())}
        for currency in sorted(series)
    }
