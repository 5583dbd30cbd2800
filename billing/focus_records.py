"""FOCUS 1.2 usage rows straight from the stored cost records, written as CSV at the speed of
the database cursor (issue 20 item 6).

Why: the node-level export (:func:`billing.focus.iter_focus_rows`) re-runs the allocation for
every hour of the range from the usage records, ~3,000 rows a second: a month of a 10,000-pod
fleet took about an hour. The cost records already hold that allocation's result, summed per
hour, pool, charged team, namespace, label set, GPU class, billing kind, kind of cost and
component (`billing.models.CostRecord`), so a FOCUS usage row per cost record (hourly), or per
cost line and day (the records of a day summed by the database: the default, 24 times fewer
rows), needs no recomputation, and its totals are the cost records' totals by construction.

Speed comes from rendering each row *shape* once: the columns that only depend on the pool,
billing kind, kind of cost, component and currency (most of the 57) are written through the same
cell formatting and CSV dialect as every other export (:func:`billing.focus.format_value`,
:func:`billing.focus.csv_line_writer`) into a line template; a record then fills the dozen
cells that vary (the hour, amounts, quantities, description, tags), each also formatted the
same way, the text ones cached per distinct value. Memory stays flat: the records stream from
the caller's iterable, caches are bounded and lines leave in chunks.

What differs from the node-level export (documented for finance in docs/guide-finance.md and
tested in tests/billing/test_focus_records.py):

- a usage row is a cost record (or a day's sum of them; a fee row's quantity is then its hours
  and its unit price the amount per hour): ResourceId/ResourceName are the pool (ResourceType
  ``GPU Node Pool``), not the node; tags carry the pool, namespace, charged team and cost kind,
  not the node and pod names, and the description names the namespace instead of the pods;
- a pool's leases are one commitment discount (``monthly-leases/<pool>``), each lease still its
  own purchase row (ResourceId = the lease); a preemptible pool's usage is committed (billed 0,
  its purchases bill it) in a charge period one of its leases is held in, as node by node;
- ListUnitPrice is the pool's on-demand list price per GPU-hour for that billing kind and hour
  (Σ list price of its nodes / Σ the GPU-hours they were billed for; identical to the node-level value when the pool's
  nodes are priced alike) and ListCost is that price × the row's GPU-hours, rounded once per
  row; with no node usage records for the hour, ListCost is the cost itself, and so it is for an
  on-demand row of a day (a price changed that day would be averaged over rows whose hours
  fell unevenly around it, listing a row above or below what it billed).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Context, Decimal
from fractions import Fraction

from billing.allocation import (
    CENT,
    CORRECTION,
    FEE_KINDS,
    GPU,
    IDLE,
    MONTHLY,
    ON_DEMAND,
    PREEMPTIBLE,
)
from billing.focus import (
    _FEE_SERVICE,
    _PRICING_CATEGORY,
    FOCUS_COLUMNS,
    GPU_HOURS,
    FocusAccount,
    FocusRow,
    Lease,
    _base,
    _compute_service,
    _price,
    _tags,
    commitment_columns,
    csv_line_writer,
    fee_service_columns,
    format_value,
    purchase_rows,
)
from billing.lease_costs import add_months

POOL_RESOURCE_TYPE = "GPU Node Pool"
CHUNK_LINES = 1000
CACHE_LIMIT = 20_000  # row shapes (and own unit prices) kept; then they start afresh

HOURLY = timedelta(hours=1)
DAILY = timedelta(days=1)
_WIDE = Context(prec=60)  # unit price × quantity exactly, before the one rounding


@dataclass(frozen=True)
class CostRecordRow:
    """The fields of one cost record the export reads (a ``values_list`` row, in this order), or
    of records summed over a day (``hour`` is then the day's start)."""

    hour: datetime
    pool_id: int
    team_id: int
    namespace: str
    labels_text: str
    gpu_class: str
    billing_kind: str
    cost_kind: str
    component: str
    gpu_hours: Decimal
    amount: Decimal
    currency: str
    hours: int  # cost records summed: 1, or up to 24 in a day's sum


RECORD_FIELDS: tuple[str, ...] = tuple(CostRecordRow.__dataclass_fields__)


@dataclass(frozen=True)
class PoolFacts:
    """What a usage row says about its pool: name, owner (the FOCUS sub-account), region, and
    GPUs per node (the SKU's price details)."""

    name: str
    team: str
    region: str
    gpus_per_node: int


def list_unit_price(listed: Decimal, gpu_hours: Decimal | int) -> Decimal:
    """On-demand list price per GPU-hour of node-hours listing at ``listed`` in all, with
    ``gpu_hours`` GPU-hours (GPUs × node-hours): the node-level export's unit price when alike."""
    return _price(Fraction(listed) / Fraction(gpu_hours))


def pool_commitment(pool: str) -> str:
    """The commitment discount of a pool's node leases (monthly or preemptible) in this export."""
    return f"monthly-leases/{pool}"


class _LeasedPools:
    """Whether a pool holds a lease in a charge period, by pool name (`Lease.pool`): a leased
    preemptible node's usage is committed, as node by node (`billing.focus._held_commitment`).
    The cost records do not say which node a cent came from, so a preemptible line is committed
    when a lease of its pool is held in its period (a pool's preemptible nodes are its leased
    ones; only nodes ordered before the lease ledger, billed by the hour, are not)."""

    def __init__(self, leases: Iterable[Lease]) -> None:
        self.spans: dict[str, list[tuple[datetime, datetime]]] = {}
        for lease in leases:
            self.spans.setdefault(lease.pool, []).append((lease.start, lease.end))

    def __call__(self, pool: str, start: datetime, end: datetime) -> bool:
        return any(first < end and start < last for first, last in self.spans.get(pool, ()))


# A function of a charge period's start giving {(pool id, billing kind): on-demand list price
# per GPU-hour over that period}.
ListPrices = Callable[[datetime], Mapping[tuple[int, str], Decimal]]


def focus_csv_from_records(
    records: Iterable[Sequence[object]],
    *,
    pools: Mapping[int, PoolFacts],
    teams: Mapping[int, str],
    account: FocusAccount,
    leases: Sequence[Lease] = (),
    commitments: Iterable[Lease] = (),
    purchases_from: datetime | None = None,
    purchases_to: datetime | None = None,
    list_prices: ListPrices = lambda start: {},
    row_list_cost: Callable[[Sequence[object]], Decimal | None] = lambda values: None,
    period: timedelta = HOURLY,
    quantum: Decimal = CENT,
    chunk_lines: int = CHUNK_LINES,
) -> Iterator[str]:
    """The FOCUS CSV: header, the leases' purchase rows (those starting in
    [purchases_from, purchases_to)), then one usage row per record, in the records' order.
    ``commitments``: every lease of the records' pools, bought in the export or not (a pool lent
    to the user's team): a preemptible line in a period one is held in is committed.

    A record is a cost record, or cost records summed over a longer ``period`` (a day): its
    first field is the start of its charge period, and records come ordered by it
    (``list_prices`` is asked once per period; ``row_list_cost``, for a monthly or preemptible
    record of a longer period, its list cost hour by hour where the period's price changed).
    Yields chunks of whole lines."""
    line = csv_line_writer()
    out = [line(FOCUS_COLUMNS)]
    for lease in leases:
        for row in purchase_rows(lease, account, quantum=quantum):
            begins = row["ChargePeriodStart"]
            if (purchases_from and begins < purchases_from) or (purchases_to and begins >= purchases_to):
                continue
            out.append(line(format_value(row.get(c)) for c in FOCUS_COLUMNS))
    templates = _Templates(account, pools, teams, line)
    start = None
    period_cells: tuple[str, str, str, str] = ("", "", "", "")
    prices: Mapping[tuple[int, str], Decimal] = {}
    own_price: dict[tuple[Decimal, Decimal], str] = {}  # (cost, GPU-hours) -> unit price cell
    leased, held = _LeasedPools(commitments), {}  # held: pool id -> whether leased in the period
    zero = format(Decimal(0).quantize(quantum), "f")
    for values in records:
        (at, pool_id, team_id, namespace, labels_text, gpu_class, billing_kind, cost_kind,
         component, gpu_hours, amount, currency, hours) = values  # fmt: skip
        if at != start:
            start = at
            period_cells = _period_cells(start, period)
            prices = list_prices(start)
            held.clear()
        committed = billing_kind == MONTHLY
        if billing_kind == PREEMPTIBLE and component in (GPU, CORRECTION):
            committed = held.get(pool_id)
            if committed is None:
                committed = held[pool_id] = leased(pools[pool_id].name, start, start + period)
        key = (pool_id, team_id, namespace, labels_text, gpu_class, billing_kind, cost_kind, component, currency, committed)
        template = templates.cache.get(key) or templates.add(key, CostRecordRow(*values), committed)
        money = format(amount, "f")
        if component != GPU:  # a fee or a lease correction: priced per hour
            unit_cell = money if hours == 1 else format(_price(Fraction(amount) / hours), "f")
            billed = zero if component == CORRECTION and committed else money  # its purchase bills it
            out.append(template.format(billed, *period_cells, money, hours, unit_cell))
        else:
            # An on-demand row of a longer period lists what it billed: the pool's period-average
            # price would misprice a row whose hours fell unevenly around a price change.
            unit = None if billing_kind == ON_DEMAND and period != HOURLY else prices.get((pool_id, billing_kind))
            listed = row_list_cost(values) if unit is not None and period != HOURLY else None
            if listed is not None:  # the price changed in the period: each hour at its own
                list_cost = format(listed.quantize(quantum, ROUND_HALF_UP), "f")
                unit_cell = format(_own_unit_price(listed, gpu_hours), "f")
            elif unit is None:  # no list price known, or an on-demand day: the cost is its own list cost
                list_cost = money
                unit_cell = own_price.get((amount, gpu_hours))
                if unit_cell is None:
                    if len(own_price) >= CACHE_LIMIT:
                        own_price.clear()
                    unit_cell = own_price[amount, gpu_hours] = format(_own_unit_price(amount, gpu_hours), "f")
            else:
                list_cost = format(_WIDE.multiply(unit, gpu_hours).quantize(quantum, ROUND_HALF_UP), "f")
                unit_cell = format(unit, "f")
            billed = zero if committed else money
            out.append(template.format(billed, *period_cells, list_cost, unit_cell, format(gpu_hours, "f"), money))
        if len(out) >= chunk_lines:
            yield "".join(out)
            out.clear()
    if out:
        yield "".join(out)


def _own_unit_price(amount: Decimal, gpu_hours: Decimal) -> Decimal:
    return _price(Fraction(amount) / Fraction(gpu_hours)) if gpu_hours else amount


def _period_cells(start: datetime, period: timedelta) -> tuple[str, str, str, str]:
    """BillingPeriodEnd, BillingPeriodStart, ChargePeriodEnd, ChargePeriodStart of a charge
    period (an hour or a day: never across a month's end)."""
    start = start.astimezone(UTC)
    month = start.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return (
        format_value(add_months(month, 1)),
        format_value(month),
        format_value(start + period),
        format_value(start),
    )


class _Templates:
    """A CSV line template per row shape: everything a record shares with the other records of
    its pool, charged team, namespace, label set, GPU class, billing kind, kind of cost,
    component and currency (description and tags included), with ``{n}`` placeholders for the
    cells that vary: GPU rows BilledCost, the four periods, ListCost (= ContractedCost),
    ListUnitPrice (= ContractedUnitPrice), the quantities, EffectiveCost; fee rows BilledCost,
    the periods, EffectiveCost (= ListCost = ContractedCost), the hours (PricingQuantity =
    ConsumedQuantity) and the price per hour (ListUnitPrice = ContractedUnitPrice).

    The template is a row written by the shared CSV writer with a marker in each varying cell;
    the markers become placeholders, the rest escaped for ``str.format``. At most CACHE_LIMIT
    are kept (an hour of the benchmark's fleet has ~10,000 shapes), then they start afresh.
    """

    def __init__(self, account, pools, teams, line) -> None:
        self.account, self.pools, self.teams, self.line = account, pools, teams, line
        self.cache: dict[tuple, str] = {}

    def add(self, key: tuple, r: CostRecordRow, committed: bool) -> str:
        if len(self.cache) >= CACHE_LIMIT:
            self.cache.clear()
        template = self.cache[key] = self._render(r, committed)
        return template

    def _render(self, r: CostRecordRow, committed: bool) -> str:
        pool = self.pools[r.pool_id]
        row = _base(self.account, r.currency, r.hour, r.hour, pool.team, pool.region)
        row.update(ChargeCategory="Usage", ChargeFrequency="Usage-Based")
        periods = ("BillingPeriodEnd", "BillingPeriodStart", "ChargePeriodEnd", "ChargePeriodStart")
        if r.component == GPU:
            row.update(_gpu_shape(r, pool, committed))
            order = ("BilledCost", *periods, "ListCost", "ListUnitPrice", "PricingQuantity", "EffectiveCost")
            same = {"ContractedCost": "ListCost", "ContractedUnitPrice": "ListUnitPrice"}
            if not (committed and r.cost_kind == IDLE):
                same["ConsumedQuantity"] = "PricingQuantity"  # unused commitment: nothing consumed
            if committed:
                same["CommitmentDiscountQuantity"] = "PricingQuantity"
        else:
            row.update(_correction_shape(r, pool, committed) if r.component == CORRECTION else _fee_shape(r, pool))
            order = ("BilledCost", *periods, "EffectiveCost", "PricingQuantity", "ListUnitPrice")
            same = {"ContractedCost": "EffectiveCost", "ListCost": "EffectiveCost", "ContractedUnitPrice": "ListUnitPrice"}
            if r.component != CORRECTION:  # a correction's hours were not consumed in its charge period
                same["ConsumedQuantity"] = "PricingQuantity"
        row["ChargeDescription"] = _description(r, pool)
        row["Tags"] = _tags(
            json.loads(r.labels_text) if r.labels_text else {}, self.account,
            pool=pool.name, namespace=r.namespace, team=self.teams.get(r.team_id, ""),
            **{"cost-kind": r.cost_kind},
        )  # fmt: skip
        slots = {name: i for i, name in enumerate(order)}
        slots.update({column: slots[twin] for column, twin in same.items()})
        marked = {c: f"\x02{c}\x02" for c in slots}
        text = self.line(format_value(marked.get(c, row.get(c))) for c in FOCUS_COLUMNS)
        text = text.replace("{", "{{").replace("}", "}}")
        for column, slot in slots.items():
            text = text.replace(marked[column], "{" + str(slot) + "}")
        return text


def _description(r: CostRecordRow, pool: PoolFacts) -> str:
    idle = r.cost_kind == IDLE
    if r.component == CORRECTION:
        return (
            f"Lease correction of {r.billing_kind} GPU nodes ({pool.gpus_per_node}x {r.gpu_class or 'GPU'}) of pool {pool.name}: "
            "lease periods recorded after metering had closed every one of their hours, their whole shares charged here as idle capacity"
        )
    if r.component in FEE_KINDS:
        who = "idle pool" if idle else f"namespace {r.namespace}"
        return f"{_FEE_SERVICE[r.component][2]} of pool {pool.name}, share of {who}"
    what = "idle capacity" if idle else f"pods of namespace {r.namespace}"
    return f"{r.billing_kind} GPU nodes ({pool.gpus_per_node}x {r.gpu_class or 'GPU'}) of pool {pool.name}: {what}"


def _pool_compute(r: CostRecordRow, pool: PoolFacts, committed: bool, unused: bool, **units: str) -> FocusRow:
    """The columns a GPU line and a lease correction share: the pool as the resource, its
    compute service, and for a committed line (monthly, or preemptible while a lease of the
    pool is held) the pool's commitment, used or unused."""
    out: FocusRow = dict(
        **units,
        PricingCategory="Committed" if committed else _PRICING_CATEGORY.get(r.billing_kind, "Standard"),
        ResourceId=pool.name,
        ResourceName=pool.name,
        ResourceType=POOL_RESOURCE_TYPE,
        **_compute_service(r.gpu_class, r.billing_kind, pool.gpus_per_node),
    )
    if committed:
        commitment = pool_commitment(pool.name)
        out.update(commitment_columns(commitment, commitment), CommitmentDiscountStatus="Unused" if unused else "Used")
    return out


def _gpu_shape(r: CostRecordRow, pool: PoolFacts, committed: bool) -> FocusRow:
    idle = r.cost_kind == IDLE
    out = _pool_compute(r, pool, committed, idle, PricingUnit=GPU_HOURS, ConsumedUnit=GPU_HOURS)
    if committed and idle:
        out["ConsumedQuantity"] = out["ConsumedUnit"] = None
    return out


def _correction_shape(r: CostRecordRow, pool: PoolFacts, committed: bool) -> FocusRow:
    """A lease correction (`billing.lease_corrections`): the whole shares of lease periods whose
    hours were all metered before they were recorded, priced per hour it is charged in; a
    committed one is the unused part of the pool's commitment, whose purchase (the period's,
    billed in that hour) bills it."""
    return _pool_compute(r, pool, committed, True, PricingUnit="Hours")


def _fee_shape(r: CostRecordRow, pool: PoolFacts) -> FocusRow:
    return dict(PricingUnit="Hours", ConsumedUnit="Hours", **fee_service_columns(pool.name, r.component))
