"""What the autoscaler decides from (pools/controllers/autoscaler.py), read for many pools in a
fixed number of queries (issue 9): the fleet view (node counts, the teams' Pending pods grouped by
shape, GPU memory, the latest activities, the idle burst nodes) and, for the pools that scale
up, the scale-up inputs (the room of each team's pools, the GPU quotas)."""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, OuterRef, Q, Subquery

from monitoring.selectors import gpu_memory_used_pct
from pools.core.node_labels import LEFTOVER_PHASES
from pools.core.scale_up import Capacity, QuotaRooms, Shapes
from pools.core.scheduling.nodes import Pod as CorePod
from pools.core.spec import Catalog
from pools.models import GpuNodePool, Node, ScalingActivity
from pools.selectors.burst_idle import burst_idle
from pools.selectors.cluster import core_pods_of, log_unreadable
from pools.selectors.pools import catalog_current
from pools.selectors.queue import daemon_set_pods, scale_up_queue
from pools.selectors.scale_up import quota_rooms, team_capacity

logger = logging.getLogger("ebcloud.autoscaler")


@dataclass
class ScaleUpInputs:
    """What only a scale-up reads: the room of each team's pools (free and upcoming) and the
    GPU quotas, read once for the pools that need it (`scale_up_inputs_load`). The plans made
    since (a pool's new nodes, the GPUs they hold) are added as they are made, so the team's
    next pools see them."""

    capacity: dict[int, Capacity] = field(default_factory=dict)  # team -> free and upcoming room, once read
    quotas: QuotaRooms = field(default_factory=QuotaRooms)
    quota_scopes: set[tuple[str, int]] = field(default_factory=set)  # the (region, GPU model id) in `quotas`

    def has(self, pool: GpuNodePool) -> bool:
        return pool.team_id in self.capacity and (pool.zone.region, pool.gpu_model_id) in self.quota_scopes


@dataclass
class FleetView:
    """The inputs of the autoscaler's decisions for many pools, read with a fixed number of
    queries: node counts, Pending pods per team (as rows, and as the core's pods grouped by
    shape), the agents' GPU memory, and each pool's latest recorded activity (to deduplicate).
    What only a scale-up needs — the room of each team's pools, the GPU quotas — is read later,
    for the pools that would scale up (`scale_up_inputs_load`)."""

    catalog: Catalog
    nodes: dict[int, tuple[int, int]]  # pool -> (live nodes not leaving, of which on demand)
    pending: dict[int, list[CorePod]]  # team -> Pending pods (not expendable), oldest first
    shapes: dict[int, Shapes]  # team -> its Pending pods (core), grouped by shape
    memory: dict[int, float]  # pool -> GPU memory used (%), where agents report it
    last: dict[int, tuple[str, int, str]]  # pool -> (reason, from_nodes, message) of its latest ScalingActivity
    inputs: ScaleUpInputs = field(default_factory=ScaleUpInputs)
    # pool -> its Ready (or Unknown) nodes cordoned and not leaving: a scale-down decision's
    # cordon, maybe left by a pass that stopped before its drain (pools/controllers/scale_down_cordons.py)
    cordoned: dict[int, int] = field(default_factory=dict)
    # pool -> its Ready burst nodes holding no pod, (idle since, node id), longest idle first
    idle: dict[int, list[tuple[datetime, int]]] = field(default_factory=dict)
    # pool -> the DaemonSet pods a new node of it runs, on a real cluster (`daemon_set_pods`)
    daemon_sets: dict[int, list[CorePod]] = field(default_factory=dict)


def fleet_view(pools: list[GpuNodePool], *, queue_of: FleetView | None = None) -> FleetView:
    """The view of these pools. With `queue_of`, the Pending pods, the idle burst nodes (and
    the catalog) are taken from that view, read moments before: a pool decided again before it
    acts re-reads only its own rows (the scale-down plans on fresh ones, and removes only an
    idle node still empty: `removable_burst_nodes`)."""
    ids = [p.pk for p in pools]
    nodes: dict[int, tuple[int, int]] = {}
    cordoned: dict[int, int] = {}
    live = Node.objects.filter(pool_id__in=ids, release_reason="").exclude(phase=Node.Phase.TERMINATED)
    held = Count("pk", filter=Q(unschedulable=True, phase__in=LEFTOVER_PHASES))
    for pool_id, billing, n, k in live.values_list("pool_id", "billing").annotate(n=Count("pk"), k=held).order_by():
        total, burst = nodes.get(pool_id, (0, 0))
        nodes[pool_id] = (total + n, burst + (n if billing == Node.Billing.ON_DEMAND else 0))
        if k:
            cordoned[pool_id] = cordoned.get(pool_id, 0) + k
    if queue_of is not None:
        pending, shapes, catalog, idle = queue_of.pending, queue_of.shapes, queue_of.catalog, queue_of.idle
        daemon_sets = queue_of.daemon_sets
    else:
        (pending, shapes), catalog = queues_read({p.team_id for p in pools}), catalog_current()
        idle = burst_idle([pool_id for pool_id, (_, burst) in nodes.items() if burst])
        daemon_sets = daemon_set_pods(ids)
    memory = gpu_memory_used_pct(pool_ids=ids) if ids else {}
    latest = ScalingActivity.objects.filter(pool=OuterRef("pk")).order_by("-at", "-id")
    last = {
        pk: (reason, before, message)
        for pk, reason, before, message in GpuNodePool.objects.filter(pk__in=ids)
        .annotate(reason=Subquery(latest.values("reason")[:1]), before=Subquery(latest.values("from_nodes")[:1]), said=Subquery(latest.values("message")[:1]))
        .values_list("pk", "reason", "before", "said")
        if reason is not None
    } if ids else {}
    return FleetView(catalog=catalog, nodes=nodes, pending=pending, shapes=shapes, memory=memory, last=last, cordoned=cordoned, idle=idle, daemon_sets=daemon_sets)


def queues_read(team_ids: Collection[int]) -> tuple[dict[int, list[CorePod]], dict[int, Shapes]]:
    """These teams' Pending pods (expendable ones left out), oldest first, as the core's pods
    and grouped by shape: one query. The autoscaler reads them again with the scale-up inputs
    before it buys, so that a pod bound meanwhile is not counted twice (Pending here, and its
    room taken on its node there)."""
    pending: dict[int, list[CorePod]] = {}
    shapes: dict[int, Shapes] = {}
    queue = scale_up_queue().filter(team_id__in=set(team_ids)).order_by("submitted_at", "pk")
    for team_id, key, core in core_pods_of(queue):
        if isinstance(core, Exception):  # a pod the scheduling core refuses fits nowhere; it must not stop the pass
            log_unreadable(key, core, logger)
            continue
        pending.setdefault(team_id, []).append(core)
        if team_id not in shapes:
            shapes[team_id] = Shapes()
        shapes[team_id].add(core)
    return pending, shapes


def scale_up_inputs_load(inputs: ScaleUpInputs, pools: list[GpuNodePool], catalog: Catalog) -> None:
    """Read what these pools' scale-ups need, in a fixed number of queries: the room their
    teams' pools have now (`team_capacity`) and the GPU quotas of their regions and models
    (`quota_rooms`). What is read already is not read again, so the plans made meanwhile
    (planned nodes, GPUs taken) stay."""
    teams = {p.team_id for p in pools} - set(inputs.capacity)
    inputs.capacity.update(team_capacity(team_ids=teams, catalog=catalog))
    scopes = {(p.zone.region, p.gpu_model_id) for p in pools} - inputs.quota_scopes
    inputs.quotas.update(quota_rooms(scopes=scopes))
    inputs.quota_scopes |= scopes
