"""FinOps FOCUS 1.2 rows for GPU node pools, streamed to CSV in constant memory.

Why: finance teams load FOCUS (FinOps Open Cost and Usage Specification) datasets into the
tools they already use, next to their AWS/Azure/GCP bills. Exporting our pools in FOCUS
means a monthly lease looks like what it economically is: a commitment discount.

- A lease = one ``Purchase`` row for its term, billed when paid (BilledCost = the payment,
  ListCost at the list price, PricingQuantity the months it bought, EffectiveCost 0, ChargeFrequency
  ``One-Time`` for a multi-month term paid up front, else ``Recurring``), plus hourly ``Usage`` rows priced
  ``Committed`` whose EffectiveCost is the amortised hour (BilledCost 0): the pods' share is
  CommitmentDiscountStatus ``Used``, the idle remainder ``Unused``. Over a whole lease,
  Σ EffectiveCost of its usage rows = Σ BilledCost of its purchase rows, exactly.
- A preemptible node bought on a lease term is a commitment like a monthly one (its hours no
  pod used, the remaining prepaid hours of a reclaimed node among them, are ``Unused``).
- On-demand nodes are ``Standard``; preemptible nodes without a lease are ``Dynamic`` (the
  provider may change the price and reclaim the node); both bill what they cost.
- Pool fees (storage, cross-zone network, registry; C1) are ``Standard`` usage rows.
- Tags is a JSON object: the pod's (or pool's) labels verbatim, plus provider tags under the
  ``ebcloud.io/`` prefix (pool, node, namespace, pod, cost kind), as FOCUS requires
  provider-defined tags to be prefixed.

The splits come from :mod:`billing.allocation`, so FOCUS totals equal chargeback totals.
Column names and rules follow the FOCUS 1.2 specification (57 columns).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from billing.allocation import (
    CENT,
    DEFAULT_CURRENCY,
    GPU,
    IDLE,
    MONTHLY,
    PREEMPTIBLE,
    AllocationRow,
    FeeHour,
    NodeHour,
    PodHour,
    allocate_hour,
)
from billing.focus_purchase import purchase_prices
from billing.lease_costs import (
    add_months,
    lease_month_spans,
    lease_months,
    quantize_money,
)

FOCUS_VERSION = "1.2"

FOCUS_COLUMNS: tuple[str, ...] = (
    "AvailabilityZone", "BilledCost", "BillingAccountId", "BillingAccountName",
    "BillingAccountType", "BillingCurrency", "BillingPeriodEnd", "BillingPeriodStart",
    "CapacityReservationId", "CapacityReservationStatus", "ChargeCategory", "ChargeClass",
    "ChargeDescription", "ChargeFrequency", "ChargePeriodEnd", "ChargePeriodStart",
    "CommitmentDiscountCategory", "CommitmentDiscountId", "CommitmentDiscountName",
    "CommitmentDiscountQuantity", "CommitmentDiscountStatus", "CommitmentDiscountType",
    "CommitmentDiscountUnit", "ConsumedQuantity", "ConsumedUnit", "ContractedCost",
    "ContractedUnitPrice", "EffectiveCost", "InvoiceId", "InvoiceIssuerName", "ListCost",
    "ListUnitPrice", "PricingCategory", "PricingCurrency", "PricingCurrencyContractedUnitPrice",
    "PricingCurrencyEffectiveCost", "PricingCurrencyListUnitPrice", "PricingQuantity",
    "PricingUnit", "ProviderName", "PublisherName", "RegionId", "RegionName", "ResourceId",
    "ResourceName", "ResourceType", "ServiceCategory", "ServiceName", "ServiceSubcategory",
    "SkuId", "SkuMeter", "SkuPriceDetails", "SkuPriceId", "SubAccountId", "SubAccountName",
    "SubAccountType", "Tags",
)  # fmt: skip

# Columns FOCUS requires in every dataset (the rest are Recommended or Conditional).
MANDATORY_COLUMNS: tuple[str, ...] = (
    "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency",
    "BillingPeriodEnd", "BillingPeriodStart", "ChargeCategory", "ChargeClass",
    "ChargeDescription", "ChargePeriodEnd", "ChargePeriodStart", "ContractedCost",
    "EffectiveCost", "InvoiceIssuerName", "ListCost", "PricingQuantity", "PricingUnit",
    "ProviderName", "PublisherName", "ServiceCategory", "ServiceName",
)  # fmt: skip

COMMITMENT_TYPE = "Monthly Node Lease"
GPU_HOURS = "GPU-Hours"
_PRICING_CATEGORY = {MONTHLY: "Committed", PREEMPTIBLE: "Dynamic"}  # on_demand: Standard
_FEE_SERVICE = {
    "storage": ("Storage", "Other (Storage)", "Pool Storage"),
    "network": ("Networking", "Data Transfer", "Cross-Zone Network"),
    "registry": ("Developer Tools", "Other (Developer Tools)", "Image Registry"),
}
_UNIT_PRICE = Decimal("1e-10")
_QUANTITY = Decimal("1e-10")  # so that unit price × quantity gives the cost to the cent at any price

FocusRow = dict[str, object]


@dataclass(frozen=True)
class FocusAccount:
    """Who bills whom: constant columns of every row. Teams are FOCUS sub-accounts."""

    billing_account_id: str
    billing_account_name: str
    billing_account_type: str = "Organization"
    provider_name: str = "EBCloud"
    publisher_name: str = "EBCloud"
    invoice_issuer_name: str = "EBCloud"
    service_name: str = "GPU Node Pools"
    sub_account_type: str = "Team"
    tag_prefix: str = "ebcloud.io/"


@dataclass(frozen=True)
class Lease:
    """A monthly lease of one node: the commitment its hourly usage draws down."""

    commitment_id: str
    node: str
    pool: str
    team: str
    start: datetime
    end: datetime
    monthly_price: Decimal
    gpu_count: int
    gpu_class: str = ""
    region: str = ""
    name: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    # What this commitment was paid, when known exactly (a node's share of its order's debit,
    # for the hours it holds it: `billing.lease_ledger`); its purchase rows add up to it.
    payment: Decimal | None = None
    # The commitment discount this lease is part of; empty: the lease is its own. The export
    # from cost records (`billing.focus_records`) sees pools, not nodes, so a pool's monthly
    # leases are one commitment there, each lease still its own purchase.
    commitment: str = ""
    # What the lease was priced and paid in (the order's, the ledger period's or the price
    # book's currency): its purchase rows bill in it.
    currency: str = DEFAULT_CURRENCY
    # When the lease was bought, for a lease spread over the hours from the one it was bought in
    # (a ledger period): its purchases are then its months from that moment
    # (`billing.lease_costs.lease_month_spans`), not from `start`, which is an hour boundary.
    bought: datetime | None = None
    # The undiscounted list price of a node-month it was bought at (its order's unit price): the
    # purchase's ListCost (FOCUS: the public price). None: unknown, ListCost is what was paid.
    list_monthly_price: Decimal | None = None
    term_months: int = 1  # of the term its order paid at once, up front (quarterly: 3)
    # A node-month on it (its order's price less the discount): ContractedUnitPrice; None: unknown
    contracted_monthly_price: Decimal | None = None
    billing_kind: str = MONTHLY  # its node's (monthly or preemptible): its purchase's SKU


# --------------------------------------------------------------------------- rows


def purchase_rows(
    lease: Lease,
    account: FocusAccount,
    *,
    quantum: Decimal = CENT,
) -> list[FocusRow]:
    """The lease's Purchase row, in the lease's currency: one for its whole term, billed in the
    month it begins in (when it was paid: a quarterly lease's debit is one charge, not three).

    BilledCost = ContractedCost = what the lease paid (its known payment, or its monthly price ×
    months), ListCost its months at the undiscounted list price (FOCUS 1.2: the public price, so
    a term's discount is ListCost − ContractedCost); the unit prices are the lease's prices of a
    month and PricingQuantity the months paid at its contracted one (`billing.focus_purchase`),
    so unit price × quantity = cost.
    A multi-month term is paid once, up front (`billing.pricing.Quote.amount`): ``One-Time``; a
    monthly lease ``Recurring``. The charge period is the term (FOCUS: for a non-usage charge
    "the duration of eligibility"): it may end after its billing period, as FOCUS's own
    commitment purchase examples do; the usage rows' EffectiveCost amortises it hour by hour.
    """
    spans = list(lease_month_spans(lease.start, lease.end, lease.bought))
    if not spans:
        return []
    months = sum((m for _, _, m in spans), Fraction(0))
    if lease.payment is None:
        amount = quantize_money(Fraction(lease.monthly_price) * lease_months(lease.start, lease.end), quantum)
    else:
        amount = Decimal(lease.payment).quantize(quantum)
    prices = purchase_prices(amount, months, lease.contracted_monthly_price, lease.list_monthly_price)
    period_start, period_end = spans[0][0], spans[-1][1]
    hours = (period_end - period_start) // timedelta(hours=1)
    row = _base(account, lease.currency, period_start, period_end, lease.team, lease.region)
    row.update(
        BilledCost=amount,
        EffectiveCost=_zero(quantum),
        ListCost=quantize_money(prices.list_cost, quantum),
        ContractedCost=amount,
        ListUnitPrice=_price(prices.listed),
        ContractedUnitPrice=_price(prices.contracted),
        PricingQuantity=_qty(prices.months),
        PricingUnit="Months",
        PricingCategory="Standard",
        ChargeCategory="Purchase",
        ChargeFrequency="One-Time" if lease.term_months > 1 else "Recurring",
        ChargeDescription=(
            f"Lease {lease.name or lease.commitment_id} of node {lease.node} "
            f"({lease.gpu_count}x {lease.gpu_class or 'GPU'}), pool {lease.pool}"
        ),
        CommitmentDiscountQuantity=Decimal(hours * lease.gpu_count),
        ResourceId=lease.commitment_id,
        ResourceName=lease.name or lease.commitment_id,
        ResourceType=COMMITMENT_TYPE,
        Tags=_tags(lease.labels, account, pool=lease.pool, node=lease.node),
        **_commitment(lease),
        **_compute_service(lease.gpu_class, lease.billing_kind, lease.gpu_count),
    )
    return [row]


def usage_rows(
    rows: Iterable[AllocationRow],
    nodes: Sequence[NodeHour],
    account: FocusAccount,
    leases: Sequence[Lease] = (),
    *,
    fees: Sequence[FeeHour] = (),
    quantum: Decimal = CENT,
) -> Iterator[FocusRow]:
    """FOCUS Usage rows for one hour's allocation rows (``nodes``: that hour's nodes)."""
    by_node = {n.node: n for n in nodes}
    pool_region = {n.pool: n.region for n in nodes}
    pool_team = {n.pool: n.team for n in nodes} | {f.pool: f.team for f in fees}
    lease_index = _index_leases(leases)
    for alloc in rows:
        start = alloc.hour
        team = pool_team.get(alloc.pool, alloc.team)
        row = _base(account, alloc.currency, start, start + timedelta(hours=1), team, "")
        row.update(ChargeCategory="Usage", ChargeFrequency="Usage-Based")
        row["Tags"] = _tags(
            alloc.labels, account, pool=alloc.pool, node=alloc.node,
            namespace=alloc.namespace, pod=alloc.pod, pods=str(alloc.pods) if alloc.pods > 1 else "",
            team=alloc.team, **{"cost-kind": alloc.cost_kind},  # the charged team, not the node label's owner
        )  # fmt: skip
        if alloc.component == GPU:
            node = by_node[alloc.node]
            row.update(_gpu_usage(alloc, node, lease_index, quantum))
            row["RegionId"] = row["RegionName"] = node.region or None
        else:
            row.update(_fee_usage(alloc))
            row["RegionId"] = row["RegionName"] = pool_region.get(alloc.pool) or None
        yield row


def iter_focus_rows(
    batches: Iterable[tuple[str, Sequence[NodeHour], Sequence[PodHour], Sequence[FeeHour]]],
    account: FocusAccount,
    leases: Sequence[Lease] = (),
    *,
    quantum: Decimal = CENT,
) -> Iterator[FocusRow]:
    """All FOCUS rows: the leases' purchases, then usage hour batch by hour batch.

    ``batches`` yields ``(currency, node_hours, pod_hours, fees)`` for one hour in one currency
    at a time, so a month of a large fleet streams through without being held in memory.
    """
    for lease in leases:
        yield from purchase_rows(lease, account, quantum=quantum)
    for currency, nodes, pods, fees in batches:
        alloc = allocate_hour(nodes, pods, fees, quantum=quantum, currency=currency)
        yield from usage_rows(alloc, nodes, account, leases, fees=fees, quantum=quantum)


def focus_rows(
    node_hours: Iterable[NodeHour],
    pod_hours: Iterable[PodHour],
    fees: Iterable[FeeHour],
    account: FocusAccount,
    leases: Sequence[Lease] = (),
    *,
    quantum: Decimal = CENT,
    currency: str = DEFAULT_CURRENCY,
) -> list[FocusRow]:
    """Convenience: group flat inputs of one currency by hour and return all rows as a list."""
    by_hour: dict[datetime, tuple[list, list, list]] = defaultdict(lambda: ([], [], []))
    for slot, items in enumerate((node_hours, pod_hours, fees)):
        for item in items:
            by_hour[item.hour][slot].append(item)
    batches = ((currency, *by_hour[h]) for h in sorted(by_hour))
    return list(iter_focus_rows(batches, account, leases, quantum=quantum))


# --------------------------------------------------------------------------- CSV


# OWASP "CSV Injection": a spreadsheet reads a cell that starts with one of these as a formula
# (`=HYPERLINK(...)`, `@SUM(A1)`, `-2+3+cmd|' /C calc'!A0`), so such a text cell gets a leading
# `'`, which Excel, LibreOffice and Google Sheets take as "this is text" (and do not show).
# Line feed and NUL too (ASVS 1.2.10). Numbers are left alone: a plain decimal such as the
# `-12.50` of a credit is what a number column holds, and it is no formula.
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r", "\n", "\x00")
_PLAIN_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?\Z")


def neutralise(text: str) -> str:
    """A text cell made safe to open in a spreadsheet (OWASP CSV injection)."""
    if text.startswith(FORMULA_TRIGGERS) and not _PLAIN_NUMBER.match(text):
        return "'" + text
    return text


def format_value(value: object) -> str:
    """CSV cell: null → empty, Decimal in plain notation, DateTime as ISO 8601 UTC 'Z', numbers
    as they are, text neutralised (a leading `'` where a spreadsheet would see a formula)."""
    if value is None:
        return ""
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value.strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, int | float):
        return str(value)
    return neutralise(str(value))


def iter_csv_lines(
    rows: Iterable[Mapping[str, object]], columns: Sequence[str] = FOCUS_COLUMNS
) -> Iterator[str]:
    """Yield a CSV header then one line per row, each a complete string with ``\\r\\n``.

    Made for ``StreamingHttpResponse``: one small buffer is reused, so memory stays constant
    however many rows flow through. Missing keys are written as empty cells. Every export (the
    grouped CSV, the detail CSV, FOCUS) goes through here, so every text cell is neutralised
    against formula injection (`format_value`).
    """
    line = csv_line_writer()
    yield line(neutralise(str(c)) for c in columns)
    for row in rows:
        yield line(format_value(row.get(c)) for c in columns)


def csv_line_writer() -> Callable[[Iterable[str]], str]:
    """A function that writes formatted cells as one CSV line (with ``\r\n``), reusing one
    small buffer: the one CSV dialect every export writes."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def line(values: Iterable[str]) -> str:
        buffer.seek(0)
        buffer.truncate()
        writer.writerow(values)
        return buffer.getvalue()

    return line


# --------------------------------------------------------------------------- internals


def _base(
    account: FocusAccount,
    currency: str,
    start: datetime,
    end: datetime,
    team: str,
    region: str,
) -> FocusRow:
    """A row with every FOCUS column (None = null) and the account-level values filled."""
    row: FocusRow = dict.fromkeys(FOCUS_COLUMNS)
    period_start = start.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    row.update(
        BillingAccountId=account.billing_account_id,
        BillingAccountName=account.billing_account_name,
        BillingAccountType=account.billing_account_type,
        BillingCurrency=currency,
        BillingPeriodStart=period_start,
        BillingPeriodEnd=add_months(period_start, 1),
        ChargePeriodStart=start,
        ChargePeriodEnd=end,
        ProviderName=account.provider_name,
        PublisherName=account.publisher_name,
        InvoiceIssuerName=account.invoice_issuer_name,
        ServiceName=account.service_name,
        SubAccountId=team or None,
        SubAccountName=team or None,
        SubAccountType=account.sub_account_type if team else None,
        RegionId=region or None,
        RegionName=region or None,
    )
    return row


def _gpu_usage(
    alloc: AllocationRow,
    node: NodeHour,
    lease_index: Mapping[str, list[Lease]],
    quantum: Decimal,
) -> FocusRow:
    list_node_hour = node.list_price if node.list_price is not None else node.cost
    # Per GPU-hour of what the node was billed for: a node alive half the hour lists half an
    # hour's price over half its GPU-hours, so ListCost >= BilledCost (FOCUS: the public price).
    capacity = Fraction(max(node.gpu_count, 1)) * Fraction(node.hours or 1)
    unit_price = _price(Fraction(list_node_hour) / capacity)
    quantity = alloc.gpu_hours
    list_cost = quantize_money(Fraction(unit_price) * Fraction(quantity), quantum)
    idle = alloc.cost_kind == IDLE
    what = "idle capacity" if idle else _pods(alloc)
    out: FocusRow = dict(
        ListUnitPrice=unit_price,
        ContractedUnitPrice=unit_price,
        ListCost=list_cost,
        ContractedCost=list_cost,
        PricingQuantity=quantity,
        PricingUnit=GPU_HOURS,
        ConsumedQuantity=quantity,
        ConsumedUnit=GPU_HOURS,
        PricingCategory=_PRICING_CATEGORY.get(node.billing_kind, "Standard"),
        BilledCost=alloc.amount,
        EffectiveCost=alloc.amount,
        ResourceId=node.node,
        ResourceName=node.node,
        ResourceType="GPU Node",
        ChargeDescription=(
            f"{node.billing_kind} GPU node {node.node} ({node.gpu_count}x "
            f"{node.gpu_class or 'GPU'}), pool {node.pool}: {what}"
        ),
        **_compute_service(node.gpu_class, node.billing_kind, node.gpu_count),
    )
    if node.billing_kind == MONTHLY or _held_commitment(lease_index, node, alloc.hour):
        lease = _lease_for(lease_index, node, alloc.hour)
        out.update(_commitment(lease))
        out.update(
            BilledCost=_zero(quantum),
            PricingCategory="Committed",
            CommitmentDiscountStatus="Unused" if idle else "Used",
            CommitmentDiscountQuantity=quantity,
        )
        if idle:
            out["ConsumedQuantity"] = out["ConsumedUnit"] = None
    return out


def _fee_usage(alloc: AllocationRow) -> FocusRow:
    resource_type = _FEE_SERVICE[alloc.component][2]
    who = "idle pool" if alloc.cost_kind == IDLE else _pods(alloc)
    return dict(
        BilledCost=alloc.amount,
        EffectiveCost=alloc.amount,
        ListCost=alloc.amount,
        ContractedCost=alloc.amount,
        ListUnitPrice=alloc.amount,
        ContractedUnitPrice=alloc.amount,
        PricingQuantity=Decimal(1),
        PricingUnit="Hours",
        ConsumedQuantity=Decimal(1),
        ConsumedUnit="Hours",
        ChargeDescription=f"{resource_type} of pool {alloc.pool}, share of {who}",
        **fee_service_columns(alloc.pool, alloc.component),
    )


def fee_service_columns(pool: str, component: str) -> FocusRow:
    """What a pool fee row is: its service, resource and SKU (storage, network or registry)."""
    category, subcategory, resource_type = _FEE_SERVICE[component]
    return dict(
        PricingCategory="Standard",
        ServiceCategory=category,
        ServiceSubcategory=subcategory,
        ResourceId=f"{pool}/{component}",
        ResourceName=f"{pool} {component}",
        ResourceType=resource_type,
        SkuId=f"pool-fee/{component}",
        SkuPriceId=f"pool-fee/{component}",
        SkuMeter=resource_type,
    )


def _compute_service(gpu_class: str, billing_kind: str, gpu_count: int) -> FocusRow:
    sku = f"gpu-node/{gpu_class or 'gpu'}/{billing_kind}"
    details = json.dumps({"GpuModel": gpu_class, "GpuCount": gpu_count}, sort_keys=True)
    return dict(
        ServiceCategory="Compute",
        ServiceSubcategory="Containers",
        SkuId=sku,
        SkuPriceId=sku,
        SkuMeter="GPU Node Hours",
        SkuPriceDetails=details,
    )


def _commitment(lease: Lease) -> FocusRow:
    if lease.commitment:
        return commitment_columns(lease.commitment, lease.commitment)
    return commitment_columns(lease.commitment_id, lease.name or lease.commitment_id)


def commitment_columns(commitment_id: str, name: str) -> FocusRow:
    """The columns naming the commitment discount a purchase buys or a usage row draws down."""
    return dict(
        CommitmentDiscountId=commitment_id,
        CommitmentDiscountName=name,
        CommitmentDiscountType=COMMITMENT_TYPE,
        CommitmentDiscountCategory="Usage",
        CommitmentDiscountUnit=GPU_HOURS,
    )


def _pods(alloc: AllocationRow) -> str:
    """Whose usage a row is: one pod, or a workload's replicas on the node (named by the first)."""
    if alloc.pods > 1:
        return f"{alloc.pods} pods of {alloc.namespace}/{alloc.pod}'s workload"
    return f"pod {alloc.namespace}/{alloc.pod}"


def _tags(labels: Mapping[str, str], account: FocusAccount, **provider: str) -> str:
    """User labels verbatim; provider tags prefixed (FOCUS: provider-defined tags need one)."""
    tags = dict(labels)
    tags.update({account.tag_prefix + k: v for k, v in provider.items() if v})
    return json.dumps(tags, sort_keys=True, separators=(",", ":"))


def _qty(value: Fraction) -> Decimal:
    return quantize_money(value, _QUANTITY).normalize()


def _price(value: Fraction) -> Decimal:
    """Unit prices keep 10 decimal places (FOCUS allows more precision than the bill)."""
    return quantize_money(value, _UNIT_PRICE).normalize()


def _zero(quantum: Decimal) -> Decimal:
    return Decimal(0).quantize(quantum)


def _index_leases(leases: Sequence[Lease]) -> dict[str, list[Lease]]:
    index: dict[str, list[Lease]] = defaultdict(list)
    for lease in leases:
        index[lease.node].append(lease)
    return index


def _held_commitment(index: Mapping[str, list[Lease]], node: NodeHour, hour: datetime) -> bool:
    """A preemptible node bought on a lease term holds a commitment like a monthly one: the
    hours no pod uses (a reclaimed node's remaining prepaid hours among them) are Unused."""
    return node.billing_kind == PREEMPTIBLE and any(lease.start <= hour < lease.end for lease in index.get(node.node, ()))


def _lease_for(index: Mapping[str, list[Lease]], node: NodeHour, hour: datetime) -> Lease:
    for lease in index.get(node.node, ()):
        if lease.start <= hour < lease.end:
            return lease
    raise ValueError(f"monthly node {node.node} has no lease covering {hour.isoformat()}")
