"""FOCUS 1.2 exports for a user and a cost query (issue 7 §5, issue 20 item 6): from the cost
records (`focus_csv_for_user`, daily or hourly rows: what `?format=focus` streams) and per node
and workload from the usage records (`focus_rows_for_user`, `detail=1`). Leads get the pools
their teams own, finance and admins every pool."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

from django.db import connection
from django.db.models import Count, Max, Min, QuerySet, Sum, TextField, Value
from django.db.models.functions import Cast, Coalesce

from billing.allocation import CENT
from billing.costing import inputs_by_currency
from billing.focus import FocusAccount, iter_focus_rows
from billing.focus_commitments import ledger_commitments, node_commitment
from billing.focus_records import (
    DAILY,
    HOURLY,
    RECORD_FIELDS,
    PoolFacts,
    focus_csv_from_records,
    list_unit_price,
    pool_commitment,
)
from billing.hours import HOUR, QUANTITY, floor_hour
from billing.models import CostRecord, UsageRecord
from billing.selectors import CostQuery
from pools import roles
from pools.models import GpuNodePool, Node, Team

FOCUS_ACCOUNT = FocusAccount(
    billing_account_id="ebcloud", billing_account_name="EBCloud GPU node pools"
)


@dataclass(frozen=True)
class FocusScope:
    """What a FOCUS export covers: the half-open hour range and the pools (leads get the pools
    their teams own, finance and admins every pool), applied to usage or cost records."""

    start: datetime | None
    end: datetime | None
    team_ids: list[int] | None
    pool: str
    team: str

    @classmethod
    def of(cls, user, query: CostQuery) -> FocusScope:
        return cls(
            start=datetime.combine(query.start, time(), tzinfo=UTC) if query.start else None,
            end=datetime.combine(query.end + timedelta(days=1), time(), tzinfo=UTC) if query.end else None,
            team_ids=None if roles.sees_all_teams(user) else list(roles.team_ids(user)),
            pool=query.pool,
            team=query.team,
        )  # fmt: skip

    def pools(self, pools: QuerySet[GpuNodePool]) -> QuerySet[GpuNodePool]:
        return self._owned(pools, "")

    def filter(self, records: QuerySet) -> QuerySet:
        if self.start:
            records = records.filter(hour__gte=self.start)
        if self.end:
            records = records.filter(hour__lt=self.end)
        return self._owned(records, "pool__")

    def _owned(self, rows: QuerySet, pool: str) -> QuerySet:
        """Pools (``pool`` = "") or rows of pools (``pool`` = "pool__") in scope."""
        wanted = {"team__in": self.team_ids, "name": self.pool or None, "team__slug": self.team or None}
        return rows.filter(**{pool + lookup: value for lookup, value in wanted.items() if value is not None})


def focus_rows_for_user(*, user, query: CostQuery, account=None) -> Iterator[dict[str, object]]:
    """FOCUS 1.2 rows per node and workload, hour by hour from the stored usage records (the
    export's ``detail`` form: which node and which pods a cent came from).

    The allocation is recomputed by the same pure core from the same records metering used,
    so FOCUS totals equal the stored cost records. ~3,000 rows a second: the monthly export
    of a large fleet is `focus_csv_for_user`, from the cost records.
    """
    if not user.is_authenticated:
        return
    scope = FocusScope.of(user, query)
    records = scope.filter(UsageRecord.objects.select_related("pool", "team", "label_set"))
    leases = _leases(records)
    hours = records.order_by("hour").values_list("hour", flat=True).distinct()

    def batches():
        for hour in hours.iterator():
            yield from inputs_by_currency(list(records.filter(hour=hour)))

    for row in iter_focus_rows(batches(), account or FOCUS_ACCOUNT, leases):
        if row["ChargeCategory"] == "Purchase":
            period = row["ChargePeriodStart"]
            if (scope.start and period < scope.start) or (scope.end and period >= scope.end):
                continue
        yield row


FOCUS_GRANULARITIES = ("daily", "hourly")


def focus_csv_for_user(
    *, user, query: CostQuery, granularity: str = "daily", account=None, chunk_size: int = 5000
) -> Iterator[str]:
    """The FOCUS 1.2 CSV of the range from the stored cost records (issue 20 item 6): ``hourly``
    one usage row per cost record, ``daily`` the cost records of a day summed in the database
    per everything else they are kept by (a month of a 10,000-pod fleet is 300,000 rows, not
    7.2 M). Rows stream from a server-side cursor in period order and are written by
    `billing.focus_records` without recomputing the allocation, so the usage totals are the
    cost records' totals. Purchases are the leases' months, as in the node-level export."""
    if not user.is_authenticated:
        return iter(())
    scope = FocusScope.of(user, query)
    costs = scope.filter(CostRecord.objects.all())
    pools = {  # every pool in scope: reading which ones have records would scan them all
        p.pk: PoolFacts(p.name, p.team.slug, p.zone.name, p.node_type.gpu_count)
        for p in scope.pools(GpuNodePool.objects.select_related("team", "zone", "node_type"))
    }
    teams = dict(Team.objects.values_list("pk", "slug"))
    usage = scope.filter(UsageRecord.objects.all())
    costs = costs.annotate(labels_text=Cast("labels", TextField()))
    if granularity == "daily":
        rows = _daily_cost_sums(costs)
    else:
        rows = (
            costs.annotate(hours=Value(1)).order_by("hour", "id")
            .values_list(*RECORD_FIELDS).iterator(chunk_size=chunk_size)
        )  # fmt: skip
    return focus_csv_from_records(
        rows, pools=pools, teams=teams,
        account=account or FOCUS_ACCOUNT, leases=_leases(usage, pooled=True),
        purchases_from=scope.start, purchases_to=scope.end,
        list_prices=_ListPrices(usage, daily=granularity == "daily"),
        period=DAILY if granularity == "daily" else HOURLY,
    )  # fmt: skip


# Enough for the database to hash a day's groups of a 10,000-pod fleet (~10,000 groups out of
# ~240,000 records) instead of sorting every record by its text keys: 2 s a day, not 8.
DAILY_SUMS_WORK_MEM = "64MB"
_DAILY_FIELDS = ("pool_id", "team_id", "namespace", "labels_text", "gpu_class", "billing_kind",
                 "cost_kind", "component", "currency")  # fmt: skip


def _daily_cost_sums(costs: QuerySet[CostRecord]) -> Iterator[tuple]:
    """Cost records summed per day and everything else they are kept by, a day per query (the
    first rows leave after one day's work, and the database's memory is one day's groups),
    in `billing.focus_records.RECORD_FIELDS` order; a day's groups by their first record."""
    bounds = costs.aggregate(first=Min("hour"), last=Max("hour"))
    if bounds["first"] is None:
        return
    day = floor_hour(bounds["first"]).replace(hour=0)
    sums = (
        costs.values(*_DAILY_FIELDS)
        .annotate(gpu_hours_sum=Sum("gpu_hours"), amount_sum=Sum("amount"), hours=Count("id"), first=Min("id"))
        .order_by("first")
        .values_list(*_DAILY_FIELDS[:-1], "gpu_hours_sum", "amount_sum", "currency", "hours")
    )
    with _work_mem(DAILY_SUMS_WORK_MEM):
        while day <= bounds["last"]:
            # Fetched whole (a day's groups), not through a server-side cursor, whose plans
            # favour the first rows (sorting every record) over the whole result (hashing).
            for *keys, gpu_hours, amount, currency, hours in sums.filter(
                hour__gte=day, hour__lt=day + timedelta(days=1)
            ):
                # Exact sums of exact decimals (SQLite's come back as floats: back to the digits)
                yield (day, *keys, gpu_hours.quantize(QUANTITY), amount.quantize(CENT), currency, hours)
            day += timedelta(days=1)


@contextmanager
def _work_mem(size: str):
    """PostgreSQL's memory for one query's hashes and sorts, raised while the block runs."""
    if connection.vendor != "postgresql":
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute(f"SET work_mem = '{size}'")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET work_mem")


class _ListPrices:
    """The on-demand list price per GPU-hour of each pool and billing kind over each charge
    period (Σ list price of its node-hours / Σ their GPUs), read from the node usage records
    one day at a time (one query per day of the export)."""

    def __init__(self, usage: QuerySet[UsageRecord], *, daily: bool) -> None:
        self.usage = usage.filter(kind=UsageRecord.Kind.NODE)
        self.daily = daily
        self.day: date | None = None
        self.prices: dict[datetime, dict[tuple[int, str], Decimal]] = {}

    def __call__(self, start: datetime) -> dict[tuple[int, str], Decimal]:
        day = start.astimezone(UTC).date()
        if day != self.day:
            self.day, self.prices = day, defaultdict(dict)
            midnight = datetime.combine(day, time(), tzinfo=UTC)
            keys = ("pool_id", "billing_kind") if self.daily else ("hour", "pool_id", "billing_kind")
            sums = (
                self.usage.filter(hour__gte=midnight, hour__lt=midnight + timedelta(days=1))
                .values(*keys)
                .order_by()
                .annotate(listed=Sum(Coalesce("list_amount", "amount")), gpus=Sum("gpu_count"))
            )
            for s in sums:
                if s["gpus"]:
                    at = midnight if self.daily else s["hour"]
                    key = (s["pool_id"], s["billing_kind"])
                    self.prices[at][key] = list_unit_price(s["listed"], s["gpus"])
        return self.prices.get(start, {})


def _leases(records, *, pooled: bool = False) -> list:
    """The leases of the nodes the usage records bill. Node by node (``pooled`` False, the
    ``detail`` export) a node on the lease ledger has its own commitments (monthly or
    preemptible: `billing.focus_commitments`); ``pooled``: each monthly lease is part of its
    pool's commitment (the export from cost records, which sees pools, not nodes)."""
    kinds = ("monthly",) if pooled else ("monthly", "preemptible")
    billed = records.filter(kind="node", billing_kind__in=kinds).values_list("node_name", "node_names").order_by().distinct()
    names = {name for columns in billed for name in UsageRecord.names_billed(*columns)}
    nodes = Node.objects.filter(name__in=sorted(names)).select_related("pool__team", "pool__gpu_model", "pool__zone", "order")
    held = {} if pooled else ledger_commitments(nodes)
    leases = []
    for node in nodes.order_by("name"):
        if node.pk in held:
            leases.extend(held[node.pk])
            continue
        if node.lease_start is None or node.lease_end is None or node.billing != "monthly":
            continue
        start = floor_hour(node.lease_start)
        lease = node_commitment(node, f"lease/{node.name}/{start:%Y%m%dT%H}", start, start + -(-(node.lease_end - start) // HOUR) * HOUR)
        leases.append(replace(lease, commitment=pool_commitment(node.pool.name)) if pooled else lease)
    return leases
