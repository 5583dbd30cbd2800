"""Quota room beside each order of the queue: how many GPUs of its region and GPU model are
left once the order is counted, overall and for its team (seed T1), so that an approver sees
at a glance whether approving it fits.

The same count as `pools.selectors.pools.quota_usage` (quota-holding orders of live pools, less
their retired nodes, plus live burst nodes), done for every (region, GPU model, team) of a
page of orders in four grouped queries instead of several per order.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from django.db.models import Sum

from pools.core.lifecycle import RETIRING_REASONS
from pools.models import Node, PoolOrder, Quota
from pools.selectors.pools import LIVE_NODE_EXCLUDED_PHASES, QUOTA_HOLDING_STATUSES

Scope = tuple[str, int, int]  # (region, GPU model id, team id)


@dataclass(frozen=True)
class QuotaRoom:
    """One quota's limit and the GPUs held against it (this order among them when it holds)."""

    limit: int
    in_use: int

    @property
    def left(self) -> int:
        return max(0, self.limit - self.in_use)

    @property
    def over(self) -> int:
        """GPUs held beyond the limit (a quota lowered after orders were placed)."""
        return max(0, self.in_use - self.limit)


@dataclass(frozen=True)
class OrderQuota:
    """The room of an order's region and GPU model: `overall` is None when no quota exists
    there (approval would be refused), `team` when the team has no quota of its own.
    `counted`: whether the order itself holds quota (a pending, approved or paid order that
    adds capacity), so `left` is what remains after it."""

    region: str
    gpu_model: str
    overall: QuotaRoom | None
    team: QuotaRoom | None
    counted: bool


def _holding_orders(regions: set[str], model_ids: set[int]):
    return (
        PoolOrder.objects.filter(
            status__in=QUOTA_HOLDING_STATUSES, pool__deleted_at__isnull=True,
            pool__zone__region__in=regions, pool__gpu_model_id__in=model_ids,
        ).exclude(kind=PoolOrder.Kind.RENEW)  # a renewal adds no capacity
    )  # fmt: skip


def quota_use(*, regions: set[str], model_ids: set[int]) -> dict[Scope, int]:
    """GPUs held per (region, GPU model id, team id) in those regions and models."""
    use: dict[Scope, int] = defaultdict(int)
    orders = _holding_orders(regions, model_ids)
    for row in orders.values("pool__zone__region", "pool__gpu_model_id", "pool__team_id").annotate(n=Sum("gpus")).order_by():
        use[(row["pool__zone__region"], row["pool__gpu_model_id"], row["pool__team_id"])] += row["n"] or 0
    retired = Node.objects.filter(order__in=orders, release_reason__in=RETIRING_REASONS)
    for row in retired.values("order__pool__zone__region", "order__pool__gpu_model_id", "order__pool__team_id").annotate(n=Sum("gpu_count")).order_by():
        use[(row["order__pool__zone__region"], row["order__pool__gpu_model_id"], row["order__pool__team_id"])] -= row["n"] or 0
    burst = (
        Node.objects.filter(pool__zone__region__in=regions, pool__gpu_model_id__in=model_ids, order__isnull=True)
        .exclude(billing=Node.Billing.MONTHLY).exclude(phase__in=LIVE_NODE_EXCLUDED_PHASES)
    )
    for row in burst.values("pool__zone__region", "pool__gpu_model_id", "pool__team_id").annotate(n=Sum("gpu_count")).order_by():
        use[(row["pool__zone__region"], row["pool__gpu_model_id"], row["pool__team_id"])] += row["n"] or 0
    return dict(use)


def order_quotas(*, orders: list[PoolOrder]) -> dict[int, OrderQuota]:
    """Per order id, the quota room of its region and GPU model (orders with pool, zone and GPU
    model loaded). Four queries, whatever the number of orders."""
    if not orders:
        return {}
    regions = {o.pool.zone.region for o in orders}
    model_ids = {o.pool.gpu_model_id for o in orders}
    use = quota_use(regions=regions, model_ids=model_ids)
    limits = {
        (q.region, q.gpu_model_id, q.team_id): q.limit_gpus
        for q in Quota.objects.filter(region__in=regions, gpu_model_id__in=model_ids)
    }
    overall_use: dict[tuple[str, int], int] = defaultdict(int)
    for (region, model_id, _), n in use.items():
        overall_use[(region, model_id)] += n
    out = {}
    for order in orders:
        region, model_id, team_id = order.pool.zone.region, order.pool.gpu_model_id, order.pool.team_id
        overall = limits.get((region, model_id, None))
        team = limits.get((region, model_id, team_id))
        out[order.pk] = OrderQuota(
            region=region,
            gpu_model=order.pool.gpu_model.name,
            overall=None if overall is None else QuotaRoom(limit=overall, in_use=overall_use.get((region, model_id), 0)),
            team=None if team is None else QuotaRoom(limit=team, in_use=use.get((region, model_id, team_id), 0)),
            counted=order.status in QUOTA_HOLDING_STATUSES and order.kind != PoolOrder.Kind.RENEW,
        )
    return out
