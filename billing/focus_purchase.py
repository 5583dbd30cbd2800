"""The unit prices and quantity of a lease's FOCUS purchase row (`billing.focus.purchase_rows`):
its unit prices are the lease's monthly prices, its PricingQuantity the months its payment
bought at the contracted one.

Why: a node that held a slot for part of a lease paid its cent-rounded share of the slot's
hours (`billing.lease_costs.spread_sum`), not exactly its calendar months × the monthly price,
and a whole share recorded late is spread over fewer hours: what it paid over its calendar
months is a unit price no order holds (2,361.65 a month for a 2,280.00 lease held for an hour).
What it paid over the monthly price keeps the price and puts the rounding in the quantity,
which FOCUS rounds anyway (unit price × quantity = cost to its precision). Pure: standard library only, as `billing.focus` is.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction


@dataclass(frozen=True)
class PurchasePrices:
    months: Fraction  # PricingQuantity
    contracted: Fraction  # ContractedUnitPrice: what a month costs on the lease
    listed: Fraction  # ListUnitPrice: a month at the undiscounted list price
    list_cost: Fraction  # ListCost, before rounding: the months at the list price


def purchase_prices(amount: Decimal, months: Fraction, contracted: Decimal | None, listed: Decimal | None) -> PurchasePrices:
    """`amount`: what the purchase bills; `months`: the calendar months it covers
    (`billing.lease_costs.lease_month_spans`); `contracted` and `listed`: the lease's prices of a
    node-month, None where unknown. An unknown (or zero, buying no months) contracted price: a
    month costs what was paid over its calendar months; an unknown list price: the list is what
    was paid."""
    paid = Fraction(amount)
    if contracted:
        unit, months = Fraction(contracted), paid / Fraction(contracted)
    else:
        unit = paid / months if months else paid
    if listed is None:
        return PurchasePrices(months, unit, unit, paid)
    return PurchasePrices(months, unit, Fraction(listed), Fraction(listed) * months)
