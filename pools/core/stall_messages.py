"""What the lifecycle says when it cannot order a node where the pool asked (seed T1: explain
every stall with numbers): the zones out of stock and what the region's others hold, a node
ordered in a fallback zone with what the traffic between the zones costs, a balance too low
to pay an order. No Django here; the lifecycle's decisions are `pools.core.lifecycle`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from decimal import Decimal


def out_of_stock_reason(*, tried: Sequence[str], alternatives: Mapping[str, int]) -> str:
    """`OutOfStock in cn-east-2a, 3 in cn-east-2b`: every zone tried, in the order of the pool's
    `spec.zones` (`OutOfStock in cn-east-2a and cn-east-2b, ...`), then the nodes available in
    the region's other zones, the ones a fallback zone could name."""
    others = [f"{count} in {name}" for name, count in sorted(alternatives.items()) if name not in tried and count > 0]
    return f"OutOfStock in {zones_listed(tried)}, " + (", ".join(others) if others else "none in the region's other zones")


def zones_listed(zones: Sequence[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return zones[0] if len(zones) == 1 else f"{', '.join(zones[:-1])} and {zones[-1]}"


def _price(amount: Decimal) -> str:
    """`0.50`, `500.00`; finer prices keep their digits (`0.0125`)."""
    cents = amount.quantize(Decimal("0.01"))
    return f"{cents:f}" if cents == amount else f"{amount.normalize():f}"


def zone_fallback_message(*, node: str, ordered_in: str, out_of_stock: Sequence[str], preferred: str, price_per_gb: Decimal | None, currency: str = "") -> str:
    """The event of a node ordered in a fallback zone (seed T1, D4): both zones, and what the
    traffic between them costs, since the pool's data lives near its preferred zone."""
    if price_per_gb is None:
        cost = "the price book has no cross-zone network price, ask a platform admin what it costs"
    else:
        cost = f"billed at {_price(price_per_gb)} {currency} per GB ({_price(price_per_gb * 1000)} {currency} per TB)"
    return (
        f"Node {node} ordered in fallback zone {ordered_in}: OutOfStock in {zones_listed(out_of_stock)}. "
        f"Traffic between {ordered_in} and data in the preferred zone {preferred} crosses zones, {cost}"
    )


def insufficient_balance_reason(*, need: Decimal, balance: Decimal, currency: str) -> str:
    return f"InsufficientBalance: need {need:.2f} {currency}, balance {balance:.2f} {currency}"


def quota_scope(region: str, model: str, team: str | None) -> str:
    """`cn-east-2 A100_80G` for a region-wide quota, `... for team algorithm` for a team's own:
    how the order's approval and its payment both name the quota they hold it to."""
    return f"{region} {model}" + (f" for team {team}" if team else "")


def quota_team(text: str) -> str | None:
    """The team whose own quota a refusal names (`quota_scope`'s "for team", the autoscaler's
    "GPU quota of team"), None where it names the region's."""
    found = re.search(r"\b(?:for|of) team ([a-z0-9-]+)", text)
    return found.group(1) if found else None


QUOTA_EXCEEDED = "QuotaExceeded"  # the reason of a stall, an event or an autoscaler decision a GPU quota held back


def quota_exceeded(scope: str, *, requested: int, in_use: int, limit: int, approved: int = 0, awaiting: int = 0) -> str:
    """`QuotaExceeded: cn-east-2 A100_80G requested 16, in use 40, limit 48` (`approved`: what
    admins approved and is not paid yet, which the payment counts too; `awaiting`: requests
    awaiting approval, which a new request counts too: not in use, QA)."""
    others = (f", approved and unpaid {approved}" if approved else "") + (f", awaiting approval {awaiting}" if awaiting else "")
    return f"QuotaExceeded: {scope} requested {requested}, in use {in_use}{others}, limit {limit}"
