"""Which pools a change to the node price book would leave without a price in force.

Metering prices each hour at the node price in force when the hour began and never restates an
hour it wrote: an hour with no price is skipped for good, its cost lost without a word on any
page (found by a QA sweep: a deleted price of GPU_2_CARD L40S took the on-demand rows of
`infer-pool-l40s` off the costs). So the admin refuses a delete, or an `effective_from` moved
later, that leaves a pool still billed (not deleted, or with nodes in an hour still to be
metered) with no price of its node type and GPU model in force for an hour still to be metered;
a new price with a later *Effective from* changes a price without a gap.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db.models import Q

from billing.hours import floor_hour
from billing.models import NodePrice
from billing.services import parts_pending
from pools.models import GpuNodePool, Node


def unmetered_since(now: datetime) -> datetime:
    """The start of the oldest hour metering has still to price: the oldest complete hour not
    metered yet (a worker down leaves some), else the hour running now. Each hour is priced at
    its start, and a price once in force stays so (a later one only replaces it), so a pool
    priced at this moment is priced for every hour still to be metered."""
    pending = parts_pending(now=now)
    return min(pending[0][0], floor_hour(now)) if pending else floor_hour(now)


def pools_left_unpriced(*, removed: Iterable[NodePrice], now: datetime, moved: NodePrice | None = None) -> list[str]:
    """The billed pools (as "name (node type, GPU model)") whose node type and GPU model would
    have no price in force at the start of an hour still to be metered (`unmetered_since`, or
    the pool's first hour when later) once `removed` are gone and `moved` (an edited row, not
    saved yet: the stored one is what it was) takes its new `effective_from`, node type and GPU
    model; [] when every one still has one. A price of a later start deleted at 10:40 leaves
    the 10:00 hour unpriced, though one is in force now (found by review)."""
    removed = list(removed)
    was = NodePrice.objects.filter(pk=moved.pk).values_list("node_type_id", "gpu_model_id").first() if moved and moved.pk else None
    kinds = {(p.node_type_id, p.gpu_model_id) for p in [*removed, *([moved] if moved else [])]} | ({was} if was else set())
    if not kinds:
        return []
    since = unmetered_since(now)
    held = Node.objects.exclude(phase=Node.Phase.TERMINATED) | Node.objects.filter(terminated_at__gte=since)
    billed = Q(deleted_at__isnull=True) | Q(pk__in=held.values("pool_id"))
    kind = Q()
    for node_type, gpu_model in kinds:
        kind |= Q(node_type_id=node_type, gpu_model_id=gpu_model)
    pools = GpuNodePool.objects.filter(billed, kind).select_related("node_type", "gpu_model").order_by("name")
    ignored = [p.pk for p in removed] + ([moved.pk] if moved and moved.pk else [])
    starts = {(p.node_type_id, p.gpu_model_id): p.effective_from for p in NodePrice.objects.filter(kind).exclude(pk__in=ignored).order_by("-effective_from")}  # the earliest wins
    if moved is not None:
        key = (moved.node_type_id, moved.gpu_model_id)
        starts[key] = min(starts.get(key, moved.effective_from), moved.effective_from)
    return [
        f"{p.name} ({p.node_type.name}, {p.gpu_model.name})"
        for p in pools
        if (start := starts.get((p.node_type_id, p.gpu_model_id))) is None or start > max(since, floor_hour(p.created_at))
    ]
