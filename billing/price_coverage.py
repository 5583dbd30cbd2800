"""Which pools a change to the node price book would leave without a price in force.

Metering prices each hour at the node price in force when the hour began and never restates an
hour it wrote: an hour with no price is skipped for good, its cost lost without a word on any
page (found by a QA sweep: a deleted price of GPU_2_CARD L40S took the on-demand rows of
`infer-pool-l40s` off the costs). So the admin refuses a delete, or an `effective_from` moved
later, that leaves a pool still billed (not deleted, or with nodes not terminated) with no price
of its node type and GPU model in force now; a new price with a later *Effective from* changes
a price without a gap.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db.models import Q

from billing.models import NodePrice
from pools.models import GpuNodePool, Node


def pools_left_unpriced(*, removed: Iterable[NodePrice], now: datetime, moved: NodePrice | None = None) -> list[str]:
    """The billed pools (as "name (node type, GPU model)") whose node type and GPU model have no
    price in force at `now` once `removed` are gone and `moved` (an edited row, not saved yet:
    the stored one is what it was) takes its new `effective_from`, node type and GPU model; []
    when every one still has one."""
    removed = list(removed)
    was = NodePrice.objects.filter(pk=moved.pk).values_list("node_type_id", "gpu_model_id").first() if moved and moved.pk else None
    kinds = {(p.node_type_id, p.gpu_model_id) for p in [*removed, *([moved] if moved else [])]} | ({was} if was else set())
    if not kinds:
        return []
    billed = Q(deleted_at__isnull=True) | Q(pk__in=Node.objects.exclude(phase=Node.Phase.TERMINATED).values("pool_id"))
    kind = Q()
    for node_type, gpu_model in kinds:
        kind |= Q(node_type_id=node_type, gpu_model_id=gpu_model)
    pools = GpuNodePool.objects.filter(billed, kind).select_related("node_type", "gpu_model").order_by("name")
    ignored = [p.pk for p in removed] + ([moved.pk] if moved and moved.pk else [])
    in_force = NodePrice.objects.filter(effective_from__lte=now).exclude(pk__in=ignored)
    priced = set(in_force.values_list("node_type_id", "gpu_model_id"))
    if moved is not None and moved.effective_from <= now:
        priced.add((moved.node_type_id, moved.gpu_model_id))
    return [f"{p.name} ({p.node_type.name}, {p.gpu_model.name})" for p in pools if (p.node_type_id, p.gpu_model_id) not in priced]
