"""Which burst nodes hold no pod, and since when: Cluster Autoscaler's unneeded-node rule
(FAQ, "How does scale-down work?": a node is removed once it has been unneeded for
--scale-down-unneeded-time) read for the live autoscaler (pools/controllers/autoscaler.py).

HPA's arithmetic alone keeps an idle burst node when the pool's nodes are big: two busy nodes
of three are 66.7% used, and ceil(3 x 66.7 / 85) = 3, so the third node would be paid for ever.
The offline replay removes such a node (pools/simulation/scale_down.py); the live autoscaler
reads here which of its burst nodes are idle, so both remove it alike.

A pod that goes with its node (a DaemonSet's, a mirror pod) or that is expendable holds no node
(`moved_by_scale_down`): a node with only them is empty to Cluster Autoscaler too. A node is
idle since the later of when it became Ready and when a pod last left it (finished, deleted,
moved, evicted or preempted: `PodPlacement`).
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from django.conf import settings
from django.db.models import Max
from django.db.models.functions import Coalesce

from pools.models import Node
from pools.models.pods import Pod, PodPlacement
from pools.providers.kubernetes import MIRROR_ANNOTATION


def moved_by_scale_down(pod: Pod) -> bool:
    """Whether a Running pod counts in the scale-down simulation (it must be allowed to go and
    find room elsewhere). Not an expendable pod (CA's --expendable-pods-priority-cutoff), nor a
    DaemonSet's or a mirror (static) pod: those belong to their node, go with it and would fit
    on no other (a DaemonSet pins each pod to its node by name), as CA and `kubectl drain`
    leave them (pools/providers/kubernetes.py evicts neither)."""
    if pod.priority < settings.EBCLOUD_EXPENDABLE_PODS_PRIORITY_CUTOFF:
        return False
    return pod.controller_kind != "DaemonSet" and MIRROR_ANNOTATION not in pod.annotations


def burst_idle(pool_ids: Collection[int]) -> dict[int, list[tuple[datetime, int]]]:
    """Each pool's Ready burst nodes (schedulable, not leaving) that hold no pod now, as (idle
    since, node id), longest idle first. One query when the pools have no Ready burst node,
    four at most."""
    burst = Node.objects.filter(pool_id__in=pool_ids, billing=Node.Billing.ON_DEMAND, phase=Node.Phase.READY, release_reason="", unschedulable=False)
    nodes = {pk: (pool_id, ready_at) for pk, pool_id, ready_at in burst.values_list("pk", "pool_id", "ready_at")}
    if not nodes:
        return {}
    running = Pod.objects.filter(node_id__in=nodes, phase=Pod.Phase.RUNNING).only("node_id", "priority", "document")
    held = {pod.node_id for pod in running if moved_by_scale_down(pod)}
    idle = [pk for pk in nodes if pk not in held]
    if not idle:
        return {}
    left: dict[int, datetime] = {}
    ends = (
        Pod.objects.filter(node_id__in=idle).values("node_id").annotate(at=Max(Coalesce("finished_at", "deleted_at"))),
        PodPlacement.objects.filter(node_id__in=idle).values("node_id").annotate(at=Max("ended_at")),
    )
    for rows in ends:
        for row in rows.order_by():
            if row["at"] is not None and (row["node_id"] not in left or row["at"] > left[row["node_id"]]):
                left[row["node_id"]] = row["at"]
    out: dict[int, list[tuple[datetime, int]]] = {}
    for pk in idle:
        pool_id, ready_at = nodes[pk]
        if times := [t for t in (ready_at, left.get(pk)) if t is not None]:
            out.setdefault(pool_id, []).append((max(times), pk))
    return {pool_id: sorted(found) for pool_id, found in out.items()}
