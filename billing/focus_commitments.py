"""The FOCUS commitments of nodes on the lease ledger (issue 20): one per lease period a node
held, over the hours it held it, paid exactly what metering charged it for them, so a lease's
purchase rows equal its usage rows' EffectiveCost, and all of a slot's equal its debit."""

from __future__ import annotations

from billing import node_prices
from billing.focus import Lease
from billing.hours import ceil_hour, floor_hour
from billing.lease_costs import spread_sum
from billing.metering import ledger_pool_name
from billing.models import LeasePeriod


def ledger_commitments(nodes) -> dict[int, list[Lease]]:
    """The commitments of the nodes (a queryset, pool, team, GPU model and zone loaded) that are
    on the ledger, by node id; nodes off the ledger are left out."""
    periods: dict[int, list[LeasePeriod]] = {}
    for period in LeasePeriod.objects.filter(node__in=nodes).order_by("lease_start", "pk"):
        periods.setdefault(period.node_id, []).append(period)
    return {node.pk: _node_commitments(node, periods[node.pk]) for node in nodes if node.pk in periods}


def _node_commitments(node, periods: list[LeasePeriod]) -> list[Lease]:
    leases = []
    for period in periods:
        start, end = floor_hour(period.lease_start), ceil_hour(period.lease_end)
        first = max(start, period.held_from)
        stop = min(end, period.held_to) if period.held_to else end
        if first >= stop:
            continue
        commitment_id = f"lease/order-{period.order_id}/slot-{period.slot}/{start:%Y%m%dT%H}/{node.name}"
        paid = spread_sum(period.amount, start, end, first, stop)
        leases.append(node_commitment(node, commitment_id, first, stop, payment=paid, currency=period.currency, bought=period.lease_start))
    return leases


def node_commitment(node, commitment_id: str, start, end, *, payment=None, currency=None, bought=None) -> Lease:
    """A node's lease as a FOCUS commitment over [start, end) (the node's pool, team, GPU model
    and zone loaded); `payment`: what it was paid exactly, when known, and `currency` what in
    (else the currency of its monthly price); `bought`: the moment the lease began, where its
    hours are counted from the hour it began in (its purchases are months from it)."""
    monthly = node_prices.monthly_price(node)
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
        currency=currency or monthly.currency,
        bought=bought,
    )
