"""The FOCUS commitments of nodes on the lease ledger (issue 20): one per lease period a node
held, over the hours it held it, paid exactly what metering charged it for them, so a lease's
purchase rows equal its usage rows' EffectiveCost, and all of a slot's equal its debit. A
period recorded after every hour of its lease was metered is bought and amortised in the one
hour it is charged in (`billing.lease_corrections`), its usage row the correction line."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from decimal import Decimal
from fractions import Fraction

from billing import node_prices
from billing.allocation import CENT, IDLE, AllocationRow
from billing.focus import (
    _PRICING_CATEGORY,
    GPU_HOURS,
    FocusAccount,
    FocusRow,
    Lease,
    _base,
    _commitment,
    _compute_service,
    _price,
    _tags,
)
from billing.hours import HOUR, ceil_hour, floor_hour
from billing.lease_corrections import allocation_rows, commitment_id
from billing.lease_costs import spread_sum
from billing.metering import ledger_pool_name
from billing.models import LeasePeriod, UsageRecord


def ledger_commitments(nodes) -> dict[int, list[Lease]]:
    """The commitments of the nodes (a queryset, pool, team, GPU model and zone loaded) that are
    on the ledger, by node id; nodes off the ledger are left out."""
    periods: dict[int, list[LeasePeriod]] = {}
    for period in LeasePeriod.objects.filter(node__in=nodes).select_related("order").order_by("lease_start", "pk"):
        periods.setdefault(period.node_id, []).append(period)
    return {node.pk: _node_commitments(node, periods[node.pk]) for node in nodes if node.pk in periods}


def _node_commitments(node, periods: list[LeasePeriod]) -> list[Lease]:
    leases = []
    corrections = []  # last: a usage row of the node in that hour draws down the lease it holds then
    for period in periods:
        # Bought at its order's price and term (a renewal's may differ from the node's order's)
        terms = {} if period.order is None else _order_terms(period.order)
        if period.charged_in is not None:  # a correction: bought and amortised in its hour, whole
            first = period.charged_in
            corrections.append(node_commitment(node, commitment_id(period, node.name), first, first + HOUR, payment=period.amount, currency=period.currency, bought=first, **terms))
            continue
        start, end = floor_hour(period.lease_start), ceil_hour(period.lease_end)
        first = max(start, period.held_from)
        stop = min(end, period.held_to) if period.held_to else end
        if first >= stop:
            continue
        paid = spread_sum(period.amount, start, end, first, stop)
        leases.append(node_commitment(node, commitment_id(period, node.name), first, stop, payment=paid, currency=period.currency, bought=period.lease_start, **terms))
    return leases + corrections


def node_commitment(node, commitment_id: str, start, end, *, payment=None, currency=None, bought=None, list_price=None, term_months=None, contracted=None) -> Lease:
    """A node's lease as a FOCUS commitment over [start, end) (the node's pool, team, GPU model,
    zone and order loaded); `payment`: what it was paid exactly, when known, and `currency` what
    in (else the currency of its monthly price); `bought`: the moment the lease began, where its
    hours are counted from the hour it began in (its purchases are months from it);
    `list_price` (undiscounted, a node-month) and `term_months`: the terms it was bought on
    (else the node's order's, or the price book's at its lease start); `contracted`: what a
    node-month of it costs, a `node_prices.Monthly` (else the node's, `monthly_price`), its
    purchase's unit price where it is in the lease's currency (else unknown)."""
    monthly = node_prices.monthly_price(node)
    contracted = contracted or monthly
    currency = currency or monthly.currency
    if list_price is None or term_months is None:
        book_price, book_months = _bought_on(node)
        list_price = book_price if list_price is None else list_price
        term_months = book_months if term_months is None else term_months
    return Lease(
        commitment_id=commitment_id,
        node=node.name,
        pool=ledger_pool_name(node.pool),  # as the usage rows name it: a deleted pool's name#id
        team=node.pool.team.slug,
        start=start,
        end=end,
        monthly_price=monthly.price,
        gpu_count=node.gpu_count,
        gpu_class=node.pool.gpu_model.name,
        region=node.pool.zone.name,
        labels=node.pool.labels,
        payment=payment,
        currency=currency,
        bought=bought,
        list_monthly_price=list_price,
        term_months=term_months,
        contracted_monthly_price=contracted.price if contracted.currency == currency else None,
        billing_kind=node.billing,
    )


def _order_terms(order) -> dict:
    """The terms a lease period was bought on: its order's undiscounted price of a node-month,
    its term's months, and what a node-month cost after the term's discount (as it debited)."""
    contracted = node_prices.paid_monthly(order.unit_monthly_price, order.discount, order.currency)
    return {"list_price": order.unit_monthly_price, "term_months": order.lease_months, "contracted": contracted}


def _bought_on(node) -> tuple[Decimal, int]:
    """The undiscounted price of a node-month and the term's months the node's lease was bought
    on: its order's, else the price book's at its lease start (`node_prices.book_terms`, as
    `monthly_price` prices it); a lease term the book no longer has counts as one month."""
    if node.order is not None:
        return node.order.unit_monthly_price, node.order.lease_months
    book, term = node_prices.book_terms(node)
    return book.monthly_price, term.months if term else 1


def correction_rows(
    records: Iterable[UsageRecord], leases: Mapping[str, Lease], account: FocusAccount, keeps: Callable[[AllocationRow], bool]
) -> Iterator[FocusRow]:
    """FOCUS usage rows of one hour's lease corrections (the records' others are left out) that
    `keeps` keeps (the export's scope, as for its allocation rows); `leases`: the export's
    commitments by id. Records need `pool` and `team` loaded."""
    for record in records:
        for row in allocation_rows([record], pool_names={record.pool_id: ledger_pool_name(record.pool)}, team_slugs={record.team_id: record.team.slug}):
            if keeps(row):
                yield correction_row(row, record, leases.get(record.resource), account)


def correction_row(row: AllocationRow, record: UsageRecord, lease: Lease | None, account: FocusAccount) -> FocusRow:
    """A lease correction's usage row: the period's whole share in the hour it is charged in, the
    pool's team's, on the node's GPUs for that hour. With its commitment (`lease`, bought in the
    same hour: its purchase row bills the share) it is that commitment's unused part, billed 0;
    without one it bills the share itself. Within the billing period it is charged in nothing
    invoiced before is changed, so ChargeClass stays empty; the description says what it is."""
    gpus = max(record.gpu_count, 1)
    unit = _price(Fraction(row.amount) / gpus)
    out = _base(account, row.currency, row.hour, row.hour + HOUR, row.team, record.region)
    out.update(
        ChargeCategory="Usage", ChargeFrequency="Usage-Based",
        BilledCost=row.amount, EffectiveCost=row.amount, ListCost=row.amount, ContractedCost=row.amount,
        ListUnitPrice=unit, ContractedUnitPrice=unit, PricingQuantity=Decimal(gpus), PricingUnit=GPU_HOURS,
        PricingCategory=_PRICING_CATEGORY.get(row.billing_kind, "Standard"),
        ResourceId=row.node, ResourceName=row.node, ResourceType="GPU Node",
        ChargeDescription=(
            f"Lease correction of {row.billing_kind} GPU node {row.node} ({record.gpu_count}x {row.gpu_class or 'GPU'}), pool {row.pool}: "
            f"lease period {record.resource} ({record.quantity.normalize():f} node-hours) was recorded after metering had closed every "
            f"one of its hours; its whole share is charged in this hour to team {row.team} as idle capacity"
        ),
        Tags=_tags(row.labels, account, pool=row.pool, node=row.node, **{"cost-kind": IDLE, "lease-correction": record.resource}),
        **_compute_service(row.gpu_class, row.billing_kind, record.gpu_count),
    )  # fmt: skip
    if lease is not None:
        out.update(_commitment(lease))
        out.update(BilledCost=Decimal(0).quantize(CENT), PricingCategory="Committed", CommitmentDiscountStatus="Unused", CommitmentDiscountQuantity=Decimal(gpus))
    return out
