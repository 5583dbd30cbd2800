"""What a node costs in one hour: its order's paid monthly price (or the price book's) spread over
its lease, the on-demand list price, the preemptible discount; and the node as billing reads it
(`BilledNode`, columns read as values). Prices looked up while one hour is metered are memoised
for that hour (`price_memo`, set by `billing.metering.usage_collect`)."""

from __future__ import annotations

import json
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal

from billing import pricing
from billing.allocation import CENT
from billing.hours import HOUR, ceil_hour, floor_hour, hour_overlap
from billing.lease_costs import (
    lease_payment,
    on_demand_hour_cost,
    period_hour_cost,
    preemptible_hour_cost,
)
from billing.models import PriceBookEntry
from pools.core.errors import ValidationError
from pools.models import GpuNodePool, Node

# Prices looked up during one `usage_collect` are memoised for that call only (a fleet shares
# a few price versions; a long-running worker still sees every price change on its next run).
price_memo: ContextVar[dict | None] = ContextVar("billing_priceprice_memo", default=None)


def cached(key: tuple, compute):
    memo = price_memo.get()
    if memo is None:
        return compute()
    value = memo.get(key, _MISSING)  # one lookup: a hit compares the keys' values (~20,000 an hour)
    if value is _MISSING:
        value = memo[key] = compute()
    return value


_MISSING = object()


def price_entry_in_force(*, kind: str, at: datetime) -> PriceBookEntry | None:
    return cached(
        ("entry", kind, at),
        lambda: (
            PriceBookEntry.objects.filter(kind=kind, effective_from__lte=at)
            .order_by("-effective_from")
            .first()
        ),
    )


def price_in_force(*, node_type_id: int, gpu_model_id: int, at: datetime):
    return cached(
        ("node", node_type_id, gpu_model_id, at),
        lambda: pricing.price_in_force(node_type_id=node_type_id, gpu_model_id=gpu_model_id, at=at),
    )


def lease_term_in_force(*, lease_type: str, at: datetime):
    return cached(
        ("lease", lease_type, at), lambda: pricing.lease_term_in_force(lease_type=lease_type, at=at)
    )


# What billing reads of a node: its columns, the price its order was paid at (see `BilledNode`).
NODE_COLUMNS = (
    "pk", "pool_id", "name", "billing", "phase", "gpu_count", "labels_text", "lease_start", "lease_end", "created_at",
    "terminated_at", "order_id", "order__unit_monthly_price", "order__discount", "order__currency", "on_ledger",
    "provider_id", "machine_at",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class OrderPrice:
    """What an order's nodes were paid at (`NodeOrder` has the same attributes)."""

    unit_monthly_price: Decimal
    discount: Decimal
    currency: str


@dataclass(slots=True)
class BilledNode:
    """The attributes of a `Node` that billing reads, with the same names, so `_node_record`
    and `_monthly_price` take either; `pool` is attached by the caller."""

    pk: int
    pool_id: int
    name: str
    billing: str
    phase: str
    gpu_count: int
    labels: dict
    lease_start: datetime | None
    lease_end: datetime | None
    created_at: datetime | None
    terminated_at: datetime | None
    order: OrderPrice | None
    on_ledger: bool = False
    provider_id: str = ""  # its machine at the cloud provider ("" before it has one)
    machine_at: datetime | None = None  # when that machine was delivered (None before)
    pool: GpuNodePool | None = None
    periods: tuple[HeldPeriod, ...] = ()

    @classmethod
    def from_row(cls, row: tuple) -> BilledNode:
        """A node from a `NODE_COLUMNS` row; within one metered hour, nodes with the same labels
        or the same order share the decoded labels and the order's price (both only read)."""
        (pk, pool_id, name, billing, phase, gpu_count, text, lease_start, lease_end, created_at, terminated_at,
         order_id, unit_monthly_price, discount, currency, on_ledger, provider_id, machine_at) = row  # fmt: skip
        labels = cached(("node-labels", text), lambda: json.loads(text) if text else {})
        order = None
        if order_id is not None:
            order = cached(("order", order_id), lambda: OrderPrice(unit_monthly_price, discount, currency))
        return cls(pk, pool_id, name, billing, phase, gpu_count, labels, lease_start, lease_end, created_at, terminated_at, order, on_ledger, provider_id, machine_at)  # fmt: skip


@dataclass(frozen=True, slots=True)
class HeldPeriod:
    """A lease period the node holds in the hour being metered (`billing.models.LeasePeriod`)."""

    amount: Decimal
    currency: str
    lease_start: datetime
    lease_end: datetime


def node_price(node: Node | BilledNode, hour: datetime) -> tuple[Decimal, Decimal, Decimal | None, str] | None:
    """(node-hours, cost, cost at the on-demand list price, currency) of a node in the hour.

    A node on the lease ledger (`on_ledger`: monthly or preemptible, ordered since the ledger)
    costs its held periods' shares of the hour and nothing outside them, so its hours add up
    to what was debited for it; other nodes (and `Node` instances, which carry no periods) are
    priced from their columns."""
    if isinstance(node, BilledNode):
        if node.on_ledger:
            return _ledger_price(node, hour)
        # Nodes of a pool ordered and started together cost the same: each such set priced once.
        alike = (node.pool_id, node.billing, node.phase, node.lease_start, node.lease_end, node.created_at, node.machine_at, node.terminated_at, node.order)  # fmt: skip
        return cached(("node-price", hour, *alike), lambda: _column_price(node, hour))
    return _column_price(node, hour)


def _column_price(node: Node | BilledNode, hour: datetime) -> tuple[Decimal, Decimal, Decimal | None, str] | None:
    """`node_price` from the node's columns and its pool (every attribute the key above names)."""
    pool = node.pool
    if node.billing == Node.Billing.MONTHLY:
        if node.lease_start is None or node.lease_end is None:
            return None
        if not floor_hour(node.lease_start) <= hour < ceil_hour(node.lease_end):
            return None
        monthly = monthly_price(node)
        lease = (monthly.price, node.lease_start, node.lease_end)
        payment = cached(("column-payment", *lease), lambda: column_lease_payment(*lease))  # nodes of one order share it
        cost = period_hour_cost(payment, node.lease_start, node.lease_end, hour)
        return Decimal(1), cost, hourly_list_price(node, hour), monthly.currency
    if node.terminated_at is not None:
        alive_to = node.terminated_at
    elif node.phase == Node.Phase.TERMINATED:
        return None
    else:
        alive_to = hour + HOUR
    # An on-demand node is billed from when its machine was delivered, as the cloud bills an
    # instance from launch: one still ordering, or given up with none, costs nothing.
    start = node.machine_at if node.billing == Node.Billing.ON_DEMAND else node.created_at
    if start is None:
        return None
    fraction = hour_overlap(start, alive_to, hour)
    if fraction <= 0:
        return None
    price = price_in_force(node_type_id=pool.node_type_id, gpu_model_id=pool.gpu_model_id, at=hour)
    list_cost = cached(("list-hour", price.hourly_price, fraction), lambda: on_demand_hour_cost(price.hourly_price, fraction))
    if node.billing == Node.Billing.PREEMPTIBLE:
        entry = price_entry_in_force(kind=PriceBookEntry.Kind.PREEMPTIBLE_DISCOUNT, at=hour)
        discount = entry.amount if entry else Decimal(0)
        cost = preemptible_hour_cost(price.hourly_price, discount, fraction)
    else:
        cost = list_cost
    return fraction, cost, list_cost, price.currency


def column_lease_payment(monthly: Decimal, lease_start: datetime, lease_end: datetime) -> Decimal:
    """What the lease of a node off the ledger (its order paid before the ledger existed) was
    paid: the monthly price times its months from the moment it began, as the order debited it
    (a lease bought at 13:27 is a month, not a month and an hour). Metering spreads it over the
    hours from the one the lease began in to the one it ends in (`period_hour_cost`, as for a
    ledger period), so the hours add up to it to the cent. A lease whose span is not whole
    hours (never written so) is priced on the hours it is billed."""
    try:
        return lease_payment(monthly, lease_start, lease_end)
    except ValueError:
        return lease_payment(monthly, floor_hour(lease_start), ceil_hour(lease_end))


def _ledger_price(node: BilledNode, hour: datetime) -> tuple[Decimal, Decimal, Decimal | None, str] | None:
    costs = [c for c in (period_hour_cost(p.amount, p.lease_start, p.lease_end, hour) for p in node.periods) if c is not None]
    if not costs:
        return None
    return Decimal(1), sum(costs, Decimal(0)), hourly_list_price(node, hour), node.periods[0].currency


@dataclass(frozen=True)
class Monthly:
    price: Decimal
    currency: str


def monthly_price(node: Node | BilledNode) -> Monthly:
    """What the node's lease costs a month: the order's price less its discount (what was paid),
    else the price book at the lease start less the pool's lease-term discount."""
    order = node.order
    if order is not None:
        paid = (order.unit_monthly_price, order.discount, order.currency)
        return cached(("paid", *paid), lambda: paid_monthly(*paid))  # an order's nodes share it
    book, term = book_terms(node)
    price = Decimal(book.monthly_price) * (1 - Decimal(term.discount if term else 0))
    return Monthly(price.quantize(CENT, ROUND_HALF_UP), book.currency)


def book_terms(node: Node | BilledNode):
    """The price book's price and the pool's lease term at the node's lease start, for a node
    with no order: (its `NodePrice`, its `LeaseTerm`, None when the book no longer has it)."""
    pool, at = node.pool, node.lease_start
    book = price_in_force(node_type_id=pool.node_type_id, gpu_model_id=pool.gpu_model_id, at=at)
    try:
        return book, lease_term_in_force(lease_type=pool.lease_type, at=at)
    except ValidationError:
        return book, None


def paid_monthly(unit_monthly_price: Decimal, discount: Decimal, currency: str) -> Monthly:
    """What a node-month of an order cost: its unit price less its discount, to the cent."""
    price = Decimal(unit_monthly_price) * (1 - Decimal(discount))
    return Monthly(price.quantize(CENT, ROUND_HALF_UP), currency)


def hourly_list_price(node: Node | BilledNode, hour: datetime) -> Decimal | None:
    pool = node.pool
    try:
        price = price_in_force(
            node_type_id=pool.node_type_id, gpu_model_id=pool.gpu_model_id, at=hour
        )
    except ValidationError:
        return None
    return cached(("list-hour", price.hourly_price), lambda: on_demand_hour_cost(price.hourly_price))
