"""FOCUS 1.2 exports for a user and a cost query (issue 7 §5, issue 20 item 6): from the cost
records (`focus_csv_for_user`, daily or hourly rows: what `?format=focus` streams) and per node
and workload from the usage records (`focus_rows_for_user`, `detail=1`). A user gets what the
chargeback shows them (the costs charged to their teams; finance and admins every team's), and
the purchases of the leases their teams paid for."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.db import connection
from django.db.models import (
    Case,
    Count,
    DecimalField,
    Exists,
    ExpressionWrapper,
    F,
    Max,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Sum,
    TextField,
    Value,
    When,
)
from django.db.models.functions import Cast, Coalesce, Length, Replace

from billing import node_prices
from billing.allocation import CENT, MONTHLY, ON_DEMAND, PREEMPTIBLE, AllocationRow, allocate_hour
from billing.costing import inputs_by_currency
from billing.focus import FocusAccount, Lease, purchase_rows, usage_rows
from billing.focus_commitments import correction_rows, ledger_commitments, node_commitment
from billing.focus_records import (
    DAILY,
    HOURLY,
    RECORD_FIELDS,
    PoolFacts,
    focus_csv_from_records,
    list_unit_price,
    pool_commitment,
)
from billing.hours import QUANTITY, ceil_hour, floor_hour
from billing.metering import ledger_pool_name
from billing.models import CostRecord, MeterRun, NodePrice, UsageRecord
from billing.selectors import CostQuery, costs_for_user, ledger_pool_q
from pools import roles
from pools.models import GpuNodePool, Node, Team

FOCUS_ACCOUNT = FocusAccount(
    billing_account_id="ebcloud", billing_account_name="EBCloud GPU node pools"
)


@dataclass(frozen=True)
class FocusScope:
    """What a FOCUS export covers: the half-open hour range and, as in the chargeback
    (`billing.selectors.costs_for_user`), the costs *charged* to the teams the user may see
    (a lead's teams; every team for finance and admins), narrowed by the query's charged team,
    pool and billing kind. Why the charged team and not the pool's owner: a pod of a team a
    pool is lent to is that team's cost (the owner's lead must not see it, and the guest's lead
    must), while the pool's idle capacity is charged to its owner. The leases' purchases are
    what the pool's owner paid: they are in scope where the owning team is (`pays`)."""

    user: Any
    query: CostQuery
    start: datetime | None
    end: datetime | None
    team_ids: frozenset[int] | None
    pool: str
    team: str
    billing: str

    @classmethod
    def of(cls, user, query: CostQuery) -> FocusScope:
        return cls(
            user=user,
            query=query,
            start=datetime.combine(query.start, time(), tzinfo=UTC) if query.start else None,
            end=datetime.combine(query.end + timedelta(days=1), time(), tzinfo=UTC) if query.end else None,
            team_ids=None if roles.sees_all_teams(user) else frozenset(roles.team_ids(user)),
            pool=query.pool,
            team=query.team,
            billing=query.billing,
        )  # fmt: skip

    @property
    def by_team(self) -> bool:
        """Whether the scope is some teams' costs rather than every team's."""
        return self.team_ids is not None or bool(self.team)

    def hours(self, records: QuerySet) -> QuerySet:
        """Usage or cost records of the range and the pool asked for, whoever is charged."""
        if self.start:
            records = records.filter(hour__gte=self.start)
        if self.end:
            records = records.filter(hour__lt=self.end)
        return records.filter(ledger_pool_q(self.pool)) if self.pool else records

    def charged(self) -> QuerySet[CostRecord]:
        """The cost records in scope: the chargeback's own (`costs_for_user`), so that who may
        see which cost is decided in one place."""
        return costs_for_user(user=self.user, query=self.query)

    def charged_pools(self) -> list[int] | None:
        """The pools any cost in scope is charged on (None: every pool): a team's own and those
        lent to it. Read from the (team, hour) index, only when the scope is some teams'."""
        if not self.by_team:
            return None
        return list(self.charged().order_by().values_list("pool_id", flat=True).distinct())

    def owned(self, pools: QuerySet[GpuNodePool], path: str = "") -> QuerySet:
        """Pools (or rows of pools, `path` "pool__") whose owner is in scope: who paid their leases."""
        wanted = {"team__in": self.team_ids, "team__slug": self.team or None}
        pools = pools.filter(**{path + lookup: value for lookup, value in wanted.items() if value is not None})
        return pools.filter(ledger_pool_q(self.pool, path)) if self.pool else pools

    def pays(self, node: Node) -> bool:
        """Whether the node's lease purchases are in scope (its pool's owner and its billing)."""
        team = node.pool.team
        return (
            (self.team_ids is None or team.pk in self.team_ids)
            and (not self.team or team.slug == self.team)
            and (not self.billing or node.billing == self.billing)
        )

    def keeps(self, row: AllocationRow, slugs: frozenset[str] | None) -> bool:
        """Whether an allocation row (charged to `row.team`, a slug) is in scope; `slugs`: those
        of `team_ids`."""
        return (
            (slugs is None or row.team in slugs)
            and (not self.team or row.team == self.team)
            and (not self.billing or row.billing_kind == self.billing)
        )


def focus_rows_for_user(*, user, query: CostQuery, account=None) -> Iterator[dict[str, object]]:
    """FOCUS 1.2 rows per node and workload, hour by hour from the stored usage records (the
    export's ``detail`` form: which node and which pods a cent came from).

    The allocation is recomputed by the same pure core from the same records metering used,
    so FOCUS totals equal the stored cost records; it runs over every record of the pools the
    scope is charged on (a node's cost splits over all its pods) and keeps the rows charged in
    scope. ~3,000 rows a second: the monthly export of a large fleet is `focus_csv_for_user`,
    from the cost records.
    """
    if not user.is_authenticated:
        return
    account = account or FOCUS_ACCOUNT
    scope = FocusScope.of(user, query)
    records = scope.hours(UsageRecord.objects.select_related("pool", "team", "label_set"))
    pools = scope.charged_pools()
    if pools is not None:
        records = records.filter(pool_id__in=pools)
    slugs = None if scope.team_ids is None else frozenset(Team.objects.filter(pk__in=scope.team_ids).values_list("slug", flat=True))
    leases, bought = _leases(records, scope)
    by_id = {lease.commitment_id: lease for lease in leases}
    for lease in bought:
        for row in purchase_rows(lease, account):
            period = row["ChargePeriodStart"]
            if not ((scope.start and period < scope.start) or (scope.end and period >= scope.end)):
                yield row
    by_use = _guest_fees_by_use(scope.start, scope.end)
    for hour in records.order_by("hour").values_list("hour", flat=True).distinct().iterator():
        hour_records = list(records.filter(hour=hour))
        parts = by_use.get(hour, ())  # the hour's parts metered before guests paid fees by capacity
        old = frozenset(r.pool.ledger_name for r in hour_records if any(r.pool_id % count == part for part, count in parts))
        for currency, nodes, pods, fees in inputs_by_currency(hour_records):
            rows = [row for row in allocate_hour(nodes, pods, fees, currency=currency, guest_fees_by_use=old) if scope.keeps(row, slugs)]
            yield from usage_rows(rows, nodes, account, leases, fees=fees)
        yield from correction_rows(hour_records, by_id, account, lambda row: scope.keeps(row, slugs))


def _guest_fees_by_use(start: datetime | None, end: datetime | None) -> dict[datetime, list[tuple[int, int]]]:
    """The (part, parts) of each hour of [start, end) metered when a team a pool was lent to
    paid its fees by GPU-hours used (`MeterRun.guest_fees_by_capacity` False): a part takes
    the pools whose id is `part` modulo `parts` (`pools.claims.Part`)."""
    runs = MeterRun.objects.filter(guest_fees_by_capacity=False)
    runs = runs.filter(hour__gte=start) if start else runs
    parts: dict[datetime, list[tuple[int, int]]] = defaultdict(list)
    for hour, part, count in (runs.filter(hour__lt=end) if end else runs).values_list("hour", "part", "parts"):
        parts[hour].append((part, count))
    return parts


FOCUS_GRANULARITIES = ("daily", "hourly")


def focus_csv_for_user(
    *, user, query: CostQuery, granularity: str = "daily", account=None, chunk_size: int = 5000
) -> Iterator[str]:
    """The FOCUS 1.2 CSV of the range from the stored cost records (issue 20 item 6): ``hourly``
    one usage row per cost record, ``daily`` the cost records of a day summed in the database
    per everything else they are kept by (a month of a 10,000-pod fleet is 300,000 rows, not
    7.2 M). Rows stream from a server-side cursor in period order and are written by
    `billing.focus_records` without recomputing the allocation, so the usage totals are the
    cost records' totals. Purchases are the node-level export's (the lease ledger's shares of
    each debit, `_leases`), drawn by their pools' commitments: over a lease, they bill what
    was debited, as its usage rows' EffectiveCost amortises it."""
    if not user.is_authenticated:
        return iter(())
    scope = FocusScope.of(user, query)
    costs = scope.charged()
    charged_pools = scope.charged_pools()
    pools = _PoolFactsById(_pool_facts(p) for p in scope.owned(GpuNodePool.objects.select_related("team", "zone", "node_type")))
    teams = dict(Team.objects.values_list("pk", "slug"))
    usage = scope.hours(UsageRecord.objects.all())
    costs = costs.annotate(labels_text=Cast("labels", TextField()))
    if granularity == "daily":
        rows = _daily_cost_sums(costs)
    else:
        rows = (
            costs.annotate(hours=Value(1)).order_by("hour", "id")
            .values_list(*RECORD_FIELDS).iterator(chunk_size=chunk_size)
        )  # fmt: skip
    leases, bought = _pooled_leases(scope, usage, charged_pools)
    return focus_csv_from_records(
        rows, pools=pools, teams=teams,
        account=account or FOCUS_ACCOUNT, leases=bought, commitments=leases,
        purchases_from=scope.start, purchases_to=scope.end,
        list_prices=(prices := _ListPrices(usage if charged_pools is None else usage.filter(pool_id__in=charged_pools),
                                           daily=granularity == "daily", costs=costs)),
        row_list_cost=prices.row_list_cost, period=DAILY if granularity == "daily" else HOURLY,
    )  # fmt: skip


def _pooled_leases(scope: FocusScope, usage: QuerySet[UsageRecord], charged_pools: list[int] | None) -> tuple[list[Lease], list[Lease]]:
    """The leases of the pools the export charges costs on or whose owner it covers, and those
    of them it buys (`_leases`, pooled): a preemptible lease's usage is committed, billed by its
    purchase, on a pool lent to the user's team too, whose purchase is its owner's."""
    if scope.billing == ON_DEMAND:
        return [], []
    if charged_pools is not None:
        owned = scope.owned(GpuNodePool.objects.all()).values("pk")
        usage = usage.filter(Q(pool_id__in=charged_pools) | Q(pool_id__in=owned))
    return _leases(usage, scope, pooled=True)


def _pool_facts(pool: GpuNodePool) -> tuple[int, PoolFacts]:
    return pool.pk, PoolFacts(ledger_pool_name(pool), pool.team.slug, pool.zone.name, pool.node_type.gpu_count)


class _PoolFactsById(dict):
    """PoolFacts by pool id: the pools the scope's teams own, read at once (every pool for
    finance: reading which ones have records would scan them all), and any other pool a record
    is charged on (one lent to the user's team) read when its first record comes."""

    def __missing__(self, pk: int) -> PoolFacts:
        pk, facts = _pool_facts(GpuNodePool.objects.select_related("team", "zone", "node_type").get(pk=pk))
        self[pk] = facts
        return facts


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


# A node record's GPU-hours: its GPUs × node-hours / its nodes (alike nodes are one record,
# their GPUs and hours summed), so a node alive half an hour lists over half its GPU-hours.
_NODES = Case(When(node_names="", then=Value(1)), default=Length("node_names") - Length(Replace("node_names", Value(" "), Value(""))) + 1)
_CAPACITY = ExpressionWrapper(F("gpu_count") * F("quantity") / _NODES, output_field=DecimalField(max_digits=30, decimal_places=10))


class _ListPrices:
    """The on-demand list price per GPU-hour of each pool and billing kind over each charge
    period (Σ list price of its node-hours / Σ their GPU-hours), read from the node usage records
    one day at a time (one query per day of the export)."""

    def __init__(self, usage: QuerySet[UsageRecord], *, daily: bool, costs: QuerySet[CostRecord] | None = None) -> None:
        self.usage = usage.filter(kind=UsageRecord.Kind.NODE)
        self.daily = daily
        self.costs = costs  # daily: the cost records (with `labels_text`), for `row_list_cost`
        self.day: date | None = None
        self.prices: dict[datetime, dict[tuple[int, str], Decimal]] = {}
        self.varying: dict[tuple[int, str], dict[datetime, Decimal]] = {}  # the day's hourly prices of those that changed
        self.listed: dict[tuple, Decimal] | None = None

    def __call__(self, start: datetime) -> dict[tuple[int, str], Decimal]:
        day = start.astimezone(UTC).date()
        if day != self.day:
            self.day, self.prices = day, defaultdict(dict)
            midnight = datetime.combine(day, time(), tzinfo=UTC)
            keys = ("pool_id", "billing_kind") if self.daily else ("hour", "pool_id", "billing_kind")
            for s, unit in _unit_prices(self.usage.filter(hour__gte=midnight, hour__lt=midnight + timedelta(days=1)), keys):
                self.prices[midnight if self.daily else s["hour"]][s["pool_id"], s["billing_kind"]] = unit
            if self.daily and self.costs is not None:
                self._varying_find(midnight)
        return self.prices.get(start, {})

    def _varying_find(self, midnight: datetime) -> None:
        """The hourly list prices of the day's monthly and preemptible node records of pools
        whose node price book changed in the day (one cheap read of the book on every other
        day: a partial node-hour's cent-rounded list amount is no price change)."""
        day_end = midnight + timedelta(days=1)
        changed = NodePrice.objects.filter(node_type_id=OuterRef("node_type_id"), gpu_model_id=OuterRef("gpu_model_id"),
                                           effective_from__gt=midnight, effective_from__lt=day_end)  # fmt: skip
        pools = list(GpuNodePool.objects.filter(Exists(changed)).values_list("pk", flat=True))
        hourly: dict[tuple[int, str], dict[datetime, Decimal]] = defaultdict(dict)
        usage = self.usage.filter(hour__gte=midnight, hour__lt=day_end, pool_id__in=pools, billing_kind__in=(MONTHLY, PREEMPTIBLE))
        for s, unit in _unit_prices(usage, ("hour", "pool_id", "billing_kind")) if pools else ():
            hourly[s["pool_id"], s["billing_kind"]][s["hour"]] = unit
        self.varying, self.listed = dict(hourly), None

    def row_list_cost(self, values) -> Decimal | None:
        """A daily row's list cost hour by hour (its GPU-hours of each hour at that hour's list
        price) when its pool's list price changed that day, None otherwise: the day's average
        price listed the hours before and after the change alike, a preemptible row's list cost
        below what it billed when the price rose (found by review). The day's rows of such
        pools are read once, by hour."""
        units = self.varying.get((values[1], values[6]))
        if units is None or self.costs is None:
            return None
        if self.listed is None:
            self.listed = defaultdict(Decimal)
            midnight = datetime.combine(self.day, time(), tzinfo=UTC)
            rows = (self.costs.filter(hour__gte=midnight, hour__lt=midnight + timedelta(days=1), pool_id__in={pool for pool, _ in self.varying})
                    .values(*_DAILY_FIELDS, "hour").order_by().annotate(gpus=Sum("gpu_hours")).values_list(*_DAILY_FIELDS, "hour", "gpus"))  # fmt: skip
            for *keys, hour, gpus in rows:
                pool_kind = (keys[0], keys[5])
                unit = self.varying.get(pool_kind, {}).get(hour) or self.prices[midnight].get(pool_kind)
                if unit is not None:
                    self.listed[tuple(keys)] += unit * Decimal(str(gpus)).quantize(QUANTITY)
        return self.listed.get((*values[1:9], values[11]))


def _unit_prices(usage: QuerySet[UsageRecord], keys: tuple[str, ...]) -> Iterator[tuple[dict, Decimal]]:
    """Each group of the node records by `keys` with its list price per GPU-hour (Σ list price of
    its node-hours / Σ their GPU-hours); a group of no GPU-hour has none."""
    for s in usage.values(*keys).order_by().annotate(listed=Sum(Coalesce("list_amount", "amount")), gpus=Sum(_CAPACITY)):
        if s["gpus"]:
            yield s, list_unit_price(s["listed"], Decimal(str(s["gpus"])).quantize(QUANTITY))  # SQLite's sums are floats


def _leases(records, scope: FocusScope, *, pooled: bool = False) -> tuple[list[Lease], list[Lease]]:
    """The leases of the nodes the usage records bill (or charge a lease correction on), and
    those of them whose purchases are in scope (`FocusScope.pays`). A node on the lease ledger
    has a commitment per lease period it held, paid its share of the debit for the hours it
    held it (`billing.focus_commitments.ledger_commitments`): a slot's holders (a repaired node
    and its successor) buy its lease once between them, what was debited. Nodes of orders paid before
    the ledger are billed from their lease columns (`billing.node_prices`), and so are their
    leases. Node by node (the ``detail`` export) monthly and preemptible leases are each their
    own commitment; ``pooled`` (the export from cost records, which sees pools, not nodes) each
    lease, monthly or preemptible (a pool's nodes are one or the other), is part of its pool's
    commitment."""
    billed = records.filter(kind__in=("node", "correction"), billing_kind__in=(MONTHLY, PREEMPTIBLE)).values_list("node_name", "node_names").order_by().distinct()
    names = {name for columns in billed for name in UsageRecord.names_billed(*columns)}
    nodes = Node.objects.filter(name__in=sorted(names)).select_related("pool__team", "pool__gpu_model", "pool__zone", "order")
    held = ledger_commitments(nodes)
    leases, bought = [], []
    for node in nodes.order_by("name"):
        if node.pk in held:
            own = held[node.pk]
        elif node.lease_start is None or node.lease_end is None or node.billing != "monthly":
            continue
        else:  # paid what metering charged its hours (`node_prices.column_lease_payment`), months from its start
            start, end = floor_hour(node.lease_start), ceil_hour(node.lease_end)
            paid = node_prices.column_lease_payment(node_prices.monthly_price(node).price, node.lease_start, node.lease_end)
            own = [node_commitment(node, f"lease/{node.name}/{start:%Y%m%dT%H}", start, end, payment=paid, bought=node.lease_start)]
        if pooled:
            own = [replace(lease, commitment=pool_commitment(ledger_pool_name(node.pool))) for lease in own]
        leases.extend(own)
        if scope.pays(node):
            bought.extend(own)
    return leases, bought
