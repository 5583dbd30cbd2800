"""What each pool has cost this month and where the month is heading, for the pool list: the
figure Kubecost and the cloud consoles put beside every node pool (issue 21).

A pool's spend is everything its cost records charge this month, to whichever team (the same
scope as a pool budget, `billing.selectors.budget_costs`), and its forecast is the budgets'
run-rate rule (`billing.forecast`): the pool list, the budget bar on the pool page and the
order queue tell the same numbers. One query for a whole page of pools.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import Max, Min, Sum

from billing.forecast import CENT, month_forecast
from billing.models import CostRecord
from billing.selectors import period_bounds


@dataclass(frozen=True)
class PoolSpend:
    """One currency of a pool's month: spent so far and the forecast (None: too little data)."""

    spent: Decimal
    forecast: Decimal | None
    currency: str


def pool_month_spend(*, pool_ids, now: datetime) -> dict[int, list[PoolSpend]]:
    """Per pool id, this month's spend and forecast in each currency it was charged in (pools
    with no cost this month are absent). One grouped query over the month's cost records."""
    start, end = period_bounds(now)
    rows = (
        CostRecord.objects.filter(pool_id__in=list(pool_ids), hour__gte=start, hour__lt=end)
        .values("pool_id", "currency")
        .annotate(spent=Sum("amount"), first=Min("hour"), last=Max("hour"))
        .order_by("pool_id", "currency")
    )
    out: dict[int, list[PoolSpend]] = defaultdict(list)
    for row in rows:
        spent = Decimal(row["spent"]).quantize(CENT)
        forecast = month_forecast(spent=spent, first=row["first"], last=row["last"], end=end)
        out[row["pool_id"]].append(PoolSpend(spent=spent, forecast=forecast, currency=row["currency"]))
    return dict(out)


def pool_spend_attach(pools: list, *, now: datetime) -> list:
    """Set `month_spend` (a list of PoolSpend, empty when nothing was charged yet) on each pool
    of a page, from one query."""
    spend = pool_month_spend(pool_ids=[p.pk for p in pools], now=now)
    for pool in pools:
        pool.month_spend = spend.get(pool.pk, [])
    return pools
