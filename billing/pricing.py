"""Quotes from the price book (seed C1: spec × GPU model × lease discount; D2: a preemptible
node is cheaper, by the lease term's preemptible discount).

`Quote` is pure arithmetic on Decimals; `quote_for` reads the price in force at a moment.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal

from billing.models import LeaseTerm, NodePrice
from pools.core.errors import ValidationError

MAX_ORDER_AMOUNT = Decimal("99999999999999.99")  # pools.PoolOrder.amount: 16 digits, 2 decimals
MAX_NODE_SHARE = Decimal("999999999999.99")  # billing.LeasePeriod.amount, a node's share of it: 14 digits

CENT = Decimal("0.01")


@dataclass(frozen=True)
class Quote:
    unit_monthly_price: Decimal
    nodes: int
    months: int
    discount: Decimal
    currency: str

    @property
    def node_monthly_price(self) -> Decimal:
        """What one node costs a month after the discount, to the cent."""
        return (self.unit_monthly_price * (1 - self.discount)).quantize(CENT, ROUND_HALF_UP)

    @property
    def monthly_amount(self) -> Decimal:
        """Nodes × the rounded node price: each node's share of the debit is then a whole
        number of cents, the same for every node, which its chargeback adds up to."""
        return self.node_monthly_price * self.nodes

    @property
    def amount(self) -> Decimal:
        """What the whole lease term costs: the order's price."""
        return self.monthly_amount * self.months


def price_in_force(*, node_type_id: int, gpu_model_id: int, at: datetime) -> NodePrice:
    price = (
        NodePrice.objects.filter(node_type_id=node_type_id, gpu_model_id=gpu_model_id, effective_from__lte=at)
        .order_by("-effective_from")
        .first()
    )
    if price is None:
        raise ValidationError("the price book has no price for this node type and GPU model", field="spec.nodeType")
    return price


def lease_term_in_force(*, lease_type: str, at: datetime) -> LeaseTerm:
    term = LeaseTerm.objects.filter(lease_type=lease_type, effective_from__lte=at).order_by("-effective_from").first()
    if term is None:
        raise ValidationError(f"the price book has no {lease_type} lease term", field="spec.leaseType")
    return term


def quote_for(
    *, node_type_id: int, gpu_model_id: int, lease_type: str, nodes: int, at: datetime, preemptible: bool = False
) -> Quote:
    """The price of `nodes` nodes on the lease term in force at `at`: guaranteed nodes at the
    term's discount, preemptible ones at its preemptible discount (what the order debits)."""
    price = price_in_force(node_type_id=node_type_id, gpu_model_id=gpu_model_id, at=at)
    term = lease_term_in_force(lease_type=lease_type, at=at)
    discount = term.discount
    if preemptible:
        if term.preemptible_discount is None:
            raise ValidationError(f"the price book has no preemptible price for the {lease_type} lease term", field="spec.preemptible")
        discount = term.preemptible_discount
    quote = Quote(
        unit_monthly_price=price.monthly_price,
        nodes=nodes,
        months=term.months,
        discount=discount,
        currency=price.currency,
    )
    # The admin refuses such prices, but rows may predate that check: an order below zero would
    # credit the account when paid, so none is made from them.
    if price.monthly_price < 0 or not 0 <= discount <= 1 or quote.amount < 0:
        raise ValidationError(
            f"the price book cannot price this order: {price.monthly_price} {price.currency} a month with {discount} off on the "
            f"{lease_type} lease term is outside its range (a price of 0 or more, a discount from 0 to 1) and could make a "
            "negative order; a platform admin must correct the price book",
            field="spec.nodeType",
        )
    # A price book row from before its ceiling, or a site's larger pools: the order, or each
    # node's share of it over the lease, would not fit the ledger.
    if quote.amount > MAX_ORDER_AMOUNT or quote.node_monthly_price * quote.months > MAX_NODE_SHARE:
        raise ValidationError(
            f"this order would come to {quote.amount} {quote.currency}, more than the ledger can record "
            f"({MAX_ORDER_AMOUNT} an order, {MAX_NODE_SHARE} a node's lease); order fewer nodes or a shorter lease term",
            field="spec.nodeCount",
        )
    return quote
