"""FOCUS 1.2 usage rows straight from the stored cost records, written as CSV at the speed of
the database cursor (issue 20 item 6).

Why: the node-level export (:func:`billing.focus.iter_focus_rows`) re-runs the allocation for
every hour of the range from the usage records, ~3,000 rows a second: a month of a 10,000-pod
fleet took about an hour. The cost records already hold that allocation's result, summed per
hour, pool, charged team, namespace, label set, GPU class, billing kind, kind of cost and
component (`billing.models.CostRecord`), so one FOCUS usage row per cost record needs no
recomputation, and its totals are the cost records' totals by construction.

Speed comes from rendering each row *shape* once: the columns that only depend on the pool,
billing kind, kind of cost, component and currency (most of the 57) are written through the same
cell formatting and CSV dialect as every other export (:func:`billing.focus.format_value`,
:func:`billing.focus.csv_line_writer`) into a line template; a record then fills the dozen
cells that vary (the hour, amounts, quantities, description, tags), each also formatted the
same way, the text ones cached per distinct value. Memory stays flat: the records stream from
the caller's iterable, caches are bounded and lines leave in chunks.

What differs from the node-level export (documented for finance in docs/guide-finance.md and
tested in tests/billing/test_focus_records.py):

- a usage row is a cost record: ResourceId/ResourceName are the pool (ResourceType
  ``GPU Node Pool``), not the node; tags carry the pool, namespace, charged team and cost kind,
  not the node and pod names, and the description names the namespace instead of the pods;
- a pool's monthly leases are one commitment discount (``monthly-leases/<pool>``), each lease
  month still its own purchase row (ResourceId = the lease);
- ListUnitPrice is the pool's on-demand list price per GPU-hour for that billing kind and hour
  (Σ list price of its nodes / Σ their GPUs; identical to the node-level value when the pool's
  nodes are priced alike) and ListCost is that price × the row's GPU-hours, rounded once per
  row; with no node usage records for the hour, ListCost is the cost itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Context, Decimal
from fractions import Fraction

from billing.allocation import CENT, FEE_KINDS, GPU, IDLE, MONTHLY
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
    format_value,
    purchase_rows,
)
from billing.lease_costs import add_months

POOL_RESOURCE_TYPE = "GPU Node Pool"
CHUNK_LINES = 1000
CACHE_LIMIT = 50_000  # distinct (shape, namespace, labels, team) texts kept; then start afresh

_HOUR = timedelta(hours=1)
_WIDE = Context(prec=60)  # unit price × quantity exactly, before the one rounding


@dataclass(frozen=True)
class CostRecordRow:
    """The fields of one cost record the export reads (a ``values_list`` row, in this order)."""

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


RECORD_FIELDS: tuple[str, ...] = tuple(CostRecordRow.__dataclass_fields__)


@dataclass(frozen=True)
class PoolFacts:
    """What a usage row says about its pool: name, owner (the FOCUS sub-account), region, and
    GPUs per node (the SKU's price details)."""

    name: str
    team: str
    region: str
    gpus_per_node: int


def list_unit_price(listed: Decimal, gpus: int) -> Decimal:
    """On-demand list price per GPU-hour of nodes whose hour lists at ``listed`` in all, with
    ``gpus`` GPUs: the node-level export's unit price (list node-hour / its GPUs) when alike."""
    return _price(Fraction(listed) / gpus)


def pool_commitment(pool: str) -> str:
    """The commitment discount of a pool's monthly node leases in this export."""
    return f"monthly-leases/{pool}"


# A function of an hour giving {(pool id, billing kind): on-demand list price per GPU-hour}.
ListPrices = Callable[[datetime], Mapping[tuple[int, str], Decimal]]


def focus_csv_from_records(
    records: Iterable[Sequence[object]],
    *,
    pools: Mapping[int, PoolFacts],
    teams: Mapping[int, str],
    account: FocusAccount,
    leases: Sequence[Lease] = (),
    purchases_from: datetime | None = None,
    purchases_to: datetime | None = None,
    list_prices: ListPrices = lambda hour: {},
    quantum: Decimal = CENT,
    chunk_lines: int = CHUNK_LINES,
) -> Iterator[str]:
    """The FOCUS CSV: header, the leases' purchase rows (those starting in
    [purchases_from, purchases_to)), then one usage row per cost record, in the records' order
    (ordered by hour: ``list_prices`` is asked once per hour). Yields chunks of whole lines."""
    line = csv_line_writer()
    out = [line(FOCUS_COLUMNS)]
    for lease in leases:
        for row in purchase_rows(lease, account, quantum=quantum):
            period = row["ChargePeriodStart"]
            if (purchases_from and period < purchases_from) or (purchases_to and period >= purchases_to):
                continue
            out.append(line(format_value(row.get(c)) for c in FOCUS_COLUMNS))
    templates = _Templates(account, pools, line, quantum)
    texts = _Texts(pools, teams, account, line)
    hour = None
    hour_cells: tuple[str, str, str, str] = ("", "", "", "")
    prices: Mapping[tuple[int, str], Decimal] = {}
    zero = format(Decimal(0).quantize(quantum), "f")
    for values in records:
        r = CostRecordRow(*values)
        if r.hour != hour:
            hour = r.hour
            hour_cells = _hour_cells(hour)
            prices = list_prices(hour)
        template = templates.get(r)
        description, tags = texts.get(r)
        amount = format(r.amount, "f")
        if r.component == GPU:
            quantity = format(r.gpu_hours, "f")
            unit = prices.get((r.pool_id, r.billing_kind))
            if unit is None:
                unit = _price(Fraction(r.amount) / Fraction(r.gpu_hours)) if r.gpu_hours else r.amount
                list_cost = amount
            else:
                list_cost = format(_WIDE.multiply(unit, r.gpu_hours).quantize(quantum, ROUND_HALF_UP), "f")
            unit_cell = format(unit, "f")
            billed = zero if r.billing_kind == MONTHLY else amount
            cells = (billed, *hour_cells, description, list_cost, unit_cell, quantity, amount)
        else:
            cells = (amount, *hour_cells, description, amount)
        out.append(template.format(*cells, tags))
        if len(out) >= chunk_lines:
            yield "".join(out)
            out.clear()
    if out:
        yield "".join(out)


def _hour_cells(hour: datetime) -> tuple[str, str, str, str]:
    """BillingPeriodEnd, BillingPeriodStart, ChargePeriodEnd, ChargePeriodStart of an hour."""
    hour = hour.astimezone(UTC)
    month = hour.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return (
        format_value(add_months(month, 1)),
        format_value(month),
        format_value(hour + _HOUR),
        format_value(hour),
    )


class _Templates:
    """A CSV line template per row shape; the cells a record fills are ``{n}`` placeholders.

    The template is a row written by the shared CSV writer with a marker in each varying cell;
    the markers become placeholders (the rest escaped for ``str.format``). Varying cells, in
    column order: GPU rows BilledCost, the four periods, ChargeDescription, ContractedCost,
    ContractedUnitPrice, (Consumed/CommitmentDiscount/Pricing)Quantity, EffectiveCost,
    ListCost, ListUnitPrice, Tags; fee rows BilledCost, the periods, ChargeDescription,
    every other amount column, Tags.
    """

    def __init__(self, account, pools, line, quantum) -> None:
        self.account, self.pools, self.line, self.quantum = account, pools, line, quantum
        self.cache: dict[tuple, str] = {}

    def get(self, r: CostRecordRow) -> str:
        key = (r.pool_id, r.billing_kind, r.cost_kind, r.component, r.currency, r.gpu_class)
        template = self.cache.get(key)
        if template is None:
            template = self.cache[key] = self._render(r)
        return template

    def _render(self, r: CostRecordRow) -> str:
        pool = self.pools[r.pool_id]
        row = _base(self.account, r.currency, r.hour, r.hour, pool.team, pool.region)
        row.update(ChargeCategory="Usage", ChargeFrequency="Usage-Based")
        periods = ("BillingPeriodEnd", "BillingPeriodStart", "ChargePeriodEnd", "ChargePeriodStart")
        if r.component == GPU:
            row.update(_gpu_shape(r, pool))
            order = ("BilledCost", *periods, "ChargeDescription", "ListCost", "ListUnitPrice",
                     "PricingQuantity", "EffectiveCost", "Tags")  # fmt: skip
            same = {"ContractedCost": "ListCost", "ContractedUnitPrice": "ListUnitPrice"}
            if not (r.billing_kind == MONTHLY and r.cost_kind == IDLE):
                same["ConsumedQuantity"] = "PricingQuantity"  # unused commitment: nothing consumed
            if r.billing_kind == MONTHLY:
                same["CommitmentDiscountQuantity"] = "PricingQuantity"
        else:
            row.update(_fee_shape(r, pool))
            order = ("BilledCost", *periods, "ChargeDescription", "EffectiveCost", "Tags")
            same = dict.fromkeys(
                ("ContractedCost", "ContractedUnitPrice", "ListCost", "ListUnitPrice"), "EffectiveCost"
            )
        slots = {name: i for i, name in enumerate(order)}
        slots.update({column: slots[twin] for column, twin in same.items()})
        marked = {c: f"\x02{c}\x02" for c in slots}
        text = self.line(format_value(marked.get(c, row.get(c))) for c in FOCUS_COLUMNS)
        text = text.replace("{", "{{").replace("}", "}}")
        for column, slot in slots.items():
            text = text.replace(marked[column], "{" + str(slot) + "}")
        return text


def _gpu_shape(r: CostRecordRow, pool: PoolFacts) -> FocusRow:
    idle = r.cost_kind == IDLE
    out: FocusRow = dict(
        PricingUnit=GPU_HOURS,
        ConsumedUnit=GPU_HOURS,
        PricingCategory=_PRICING_CATEGORY.get(r.billing_kind, "Standard"),
        ResourceId=pool.name,
        ResourceName=pool.name,
        ResourceType=POOL_RESOURCE_TYPE,
        **_compute_service(r.gpu_class, r.billing_kind, pool.gpus_per_node),
    )
    if r.billing_kind == MONTHLY:
        commitment = pool_commitment(pool.name)
        out.update(commitment_columns(commitment, commitment))
        out["CommitmentDiscountStatus"] = "Unused" if idle else "Used"
        if idle:
            out["ConsumedQuantity"] = out["ConsumedUnit"] = None
    return out


def _fee_shape(r: CostRecordRow, pool: PoolFacts) -> FocusRow:
    category, subcategory, resource_type = _FEE_SERVICE[r.component]
    return dict(
        PricingQuantity=Decimal(1),
        PricingUnit="Hours",
        ConsumedQuantity=Decimal(1),
        ConsumedUnit="Hours",
        PricingCategory="Standard",
        ServiceCategory=category,
        ServiceSubcategory=subcategory,
        ResourceId=f"{pool.name}/{r.component}",
        ResourceName=f"{pool.name} {r.component}",
        ResourceType=resource_type,
        SkuId=f"pool-fee/{r.component}",
        SkuPriceId=f"pool-fee/{r.component}",
        SkuMeter=resource_type,
    )


class _Texts:
    """ChargeDescription and Tags cells of a record, formatted and CSV-quoted once per distinct
    (pool, billing kind, kind of cost, component, GPU class, namespace, labels, charged team)."""

    def __init__(self, pools, teams, account, line) -> None:
        self.pools, self.teams, self.account, self.line = pools, teams, account, line
        self.cache: dict[tuple, tuple[str, str]] = {}

    def get(self, r: CostRecordRow) -> tuple[str, str]:
        key = (r.pool_id, r.billing_kind, r.cost_kind, r.component, r.gpu_class, r.namespace, r.labels_text, r.team_id)
        texts = self.cache.get(key)
        if texts is None:
            if len(self.cache) >= CACHE_LIMIT:
                self.cache.clear()
            texts = self.cache[key] = self._render(r)
        return texts

    def _render(self, r: CostRecordRow) -> tuple[str, str]:
        pool = self.pools[r.pool_id]
        idle = r.cost_kind == IDLE
        if r.component in FEE_KINDS:
            who = "idle pool" if idle else f"namespace {r.namespace}"
            description = f"{_FEE_SERVICE[r.component][2]} of pool {pool.name}, share of {who}"
        else:
            what = "idle capacity" if idle else f"pods of namespace {r.namespace}"
            description = (
                f"{r.billing_kind} GPU nodes ({pool.gpus_per_node}x {r.gpu_class or 'GPU'}) "
                f"of pool {pool.name}: {what}"
            )
        tags = _tags(
            json.loads(r.labels_text) if r.labels_text else {}, self.account,
            pool=pool.name, namespace=r.namespace, team=self.teams.get(r.team_id, ""),
            **{"cost-kind": r.cost_kind},
        )  # fmt: skip
        return self._cell(description), self._cell(tags)

    def _cell(self, text: str) -> str:
        return self.line([format_value(text)])[:-2]
