"""Watermark alert rules over the per-minute PoolSamples (issue 6 §6; seed T4, the comparison
table's "capacity water-level alerts").

Defaults, as the issue gives them:
- `HighGpuAllocation`: allocated GPUs above 90% of capacity for 10 minutes (needs allocated
  GPUs in the samples: skipped while pods are not tracked per pool).
- `LowGpuUtilization`: mean GPU utilisation below 30% for 24 hours -> the article's T4 hint
  (IO-bound data loading or an oversized GPU spec; pack with the fragmentation report).

A rule holds when every sample in its window satisfies it and the samples cover the window. Each
rule is evaluated with one aggregate query for all pools, and fires at most once per window per
pool (a Warning PoolEvent), so a condition that lasts does not bury the timeline.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, F, FloatField, Max, Min
from django.db.models.functions import Cast
from django.utils import timezone

from monitoring.models import PoolSample
from pools.models import GpuNodePool, PoolEvent
from pools.services.events import WARNING, event_record


@dataclass(frozen=True)
class Rule:
    reason: str
    window: timedelta
    message: str


HIGH_ALLOCATION = Rule("HighGpuAllocation", timedelta(minutes=10),
                       "allocated GPUs above 90% of capacity for 10 minutes: add nodes, or raise nodeCount.max")
LOW_UTILIZATION = Rule("LowGpuUtilization", timedelta(hours=24),
                       "mean GPU utilisation below 30% for 24 hours: look for IO-bound data loading or an "
                       "oversized GPU spec; pack work with the fragmentation report and shrink the pool")
SLACK = timedelta(minutes=2)  # a rollup may run a little late


def covers(first_minute: datetime, now: datetime, window: timedelta) -> bool:
    return first_minute <= now - window + SLACK


def alerts_evaluate(*, now: datetime | None = None) -> list[PoolEvent]:
    """Fire the rules that hold now; returns the events written."""
    now = now or timezone.now()
    fired: list[PoolEvent] = []
    candidates: list[tuple[int, Rule, str]] = []
    low = (
        PoolSample.objects.filter(minute__gt=now - LOW_UTILIZATION.window - SLACK, gpu_util_avg__isnull=False)
        .values("pool_id").annotate(first=Min("minute"), worst=Max("gpu_util_avg")).order_by()
    )
    for row in low:
        if row["worst"] < 30 and covers(row["first"], now, LOW_UTILIZATION.window):
            candidates.append((row["pool_id"], LOW_UTILIZATION, f"highest sample {row['worst']:.0f}%"))
    high = (
        PoolSample.objects.filter(minute__gt=now - HIGH_ALLOCATION.window - SLACK, allocated_gpus__isnull=False, capacity_gpus__gt=0)
        .annotate(ratio=Cast(F("allocated_gpus"), FloatField()) / Cast(F("capacity_gpus"), FloatField()))
        .values("pool_id").annotate(first=Min("minute"), n=Count("id"), lowest=Min("ratio")).order_by()
    )
    for row in high:
        if row["lowest"] > 0.9 and covers(row["first"], now, HIGH_ALLOCATION.window):
            candidates.append((row["pool_id"], HIGH_ALLOCATION, f"lowest sample {row['lowest']:.0%}"))
    if not candidates:
        return fired
    recent = set(
        PoolEvent.objects.filter(pool_id__in={c[0] for c in candidates}, reason__in={c[1].reason for c in candidates},
                                 node__isnull=True, last_timestamp__gte=now - LOW_UTILIZATION.window)
        .values_list("pool_id", "reason", "last_timestamp")
        .order_by()
    )
    last = {}
    for pool_id, reason, at in recent:
        last[(pool_id, reason)] = max(at, last.get((pool_id, reason), at))
    pools = GpuNodePool.objects.in_bulk({c[0] for c in candidates})
    for pool_id, rule, detail in candidates:
        seen = last.get((pool_id, rule.reason))
        if seen is not None and seen >= now - rule.window:
            continue  # already told within this window
        fired.append(event_record(pool=pools[pool_id], type=WARNING, reason=rule.reason, now=now,
                                  message=f"{rule.message} ({detail})"))
    return fired
