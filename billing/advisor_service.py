"""The advisor on a pool's page (seed C2, O1; issue 7 §7): monthly or on demand, how big the
monthly baseline should be, and where the budget goes — from the pool's own metered history.

The arithmetic is `billing.advisor` (pure); this module only gathers the inputs: the price in
force, the hourly node demand (metered pod GPU-hours ÷ GPUs per node, rounded up) and this
month's costs by component.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import Sum

from billing.advisor import (
    BaselineRecommendation,
    SplitComparison,
    break_even_hours,
    budget_estimate,
    compare_split,
    recommend_for_windows,
)
from billing.models import Budget, CostRecord, UsageRecord
from billing.pricing import price_in_force, quote_for
from pools.core.errors import ValidationError
from pools.models import GpuNodePool

HISTORY = timedelta(days=60)
COMPONENT_OF = {"gpu": "nodes", "storage": "storage", "network": "network"}  # others keep their name


@dataclass(frozen=True)
class PoolAdvice:
    monthly_price: Decimal
    hourly_price: Decimal
    currency: str
    break_even_hours: Decimal
    history_hours: int
    current_nodes: int
    recommendations: dict[int, BaselineRecommendation]
    split: list[SplitComparison]


def hourly_node_demand(*, pool: GpuNodePool, since: datetime, until: datetime) -> list[int]:
    """Nodes needed each hour from the first metered hour in [since, until): the pool's pod
    GPU-hours of that hour over its GPUs per node, rounded up (hours with no pods count 0)."""
    per_hour = dict(
        UsageRecord.objects.filter(pool=pool, kind=UsageRecord.Kind.POD, hour__gte=since, hour__lt=until)
        .values_list("hour")
        .annotate(gpu_hours=Sum("quantity"))
        .order_by()
    )
    first = UsageRecord.objects.filter(pool=pool, hour__gte=since, hour__lt=until).order_by("hour").values_list("hour", flat=True).first()
    if first is None:
        return []
    gpus = pool.node_type.gpu_count
    demand, hour = [], first
    while hour < until:
        used = per_hour.get(hour, Decimal(0))
        demand.append(int(-(-used // gpus)))
        hour += timedelta(hours=1)
    return demand


def pool_advice(*, pool: GpuNodePool, now: datetime) -> PoolAdvice | None:
    """None when the price book has no price for the pool's nodes. A monthly node is priced as
    the pool's orders pay it, after its lease term's (or the preemptible) discount: the list
    price put a quarterly preemptible T4's break-even at 200 hours, not 114 (QA sweep)."""
    try:
        price = price_in_force(node_type_id=pool.node_type_id, gpu_model_id=pool.gpu_model_id, at=now)
        monthly = quote_for(node_type_id=pool.node_type_id, gpu_model_id=pool.gpu_model_id, lease_type=pool.lease_type,
                            nodes=1, at=now, preemptible=pool.preemptible).node_monthly_price  # fmt: skip
    except ValidationError:
        return None
    until = now.replace(minute=0, second=0, microsecond=0)
    demand = hourly_node_demand(pool=pool, since=until - HISTORY, until=until)
    recommendations = recommend_for_windows(demand, monthly, price.hourly_price, current_nodes=pool.min_nodes) if demand else {}
    return PoolAdvice(
        monthly_price=monthly,
        hourly_price=price.hourly_price,
        currency=price.currency,
        break_even_hours=break_even_hours(monthly, price.hourly_price),
        history_hours=len(demand),
        current_nodes=pool.min_nodes,
        recommendations=recommendations,
        split=_budget_split(pool, until),
    )


def _budget_split(pool: GpuNodePool, until: datetime) -> list[SplitComparison]:
    """The article's estimate (nodes 80%, storage 15%, network 5% of the monthly budget) beside
    what this month's bill actually went to (O1), in the budget's currency: a pool's fees may
    be priced in another than its nodes, and those are not added to it (as budgets count). The
    budget is the one in force (`billing.Budget`: the spec's, finance's override, or the
    default), the one its alerts are raised against, not only a `spec.budget`."""
    budget = Budget.objects.filter(pool=pool).only("monthly_amount", "currency").first()
    if budget is None:
        return []
    month_start = until.replace(day=1, hour=0)
    spent = (
        CostRecord.objects.filter(pool=pool, currency=budget.currency, hour__gte=month_start, hour__lt=until)
        .values_list("component")
        .annotate(total=Sum("amount"))
        .order_by()
    )
    actual: dict[str, Decimal] = {}
    for component, total in spent:
        name = COMPONENT_OF.get(component, component)
        actual[name] = actual.get(name, Decimal(0)) + total
    return compare_split(budget_estimate(budget.monthly_amount), actual)
