"""Monitoring reads: aggregates per pool in a few queries (for /metrics and the rollup)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, F, Sum

from monitoring.models import AlertEpisode, AlertSilence, NodeAgentState
from pools.core.errors import ValidationError
from pools.core.spec import parse_document
from pools.models import GpuNodePool, Node, NodeType, PoolEvent
from pools.models.pods import Pod
from pools.selectors.cluster import readable_core_pod
from pools.selectors.pools import catalog_current
from pools.selectors.queue import fitting_pods, template_node

# Nodes that have joined and hold GPUs the pool can count on (not being bought, not gone).
CAPACITY_PHASES = (
    Node.Phase.READY, Node.Phase.CORDONED, Node.Phase.DRAINING, Node.Phase.REPAIRING, Node.Phase.UNKNOWN,
)

# Joined nodes that cannot run work and nobody chose that: the agent's heartbeat is lost
# (Kubernetes' NotReady/Unknown) or auto-repair is rebuilding it. Cordoned and Draining are chosen.
NOT_READY_PHASES = (Node.Phase.UNKNOWN, Node.Phase.REPAIRING)


@dataclass
class PoolStats:
    pool: GpuNodePool
    capacity_gpus: int = 0
    nodes: dict[tuple[str, str], int] = field(default_factory=dict)  # (phase, billing) -> count
    fb_used_mib: int = 0
    fb_total_mib: int = 0
    gpu_util_sum: float = 0.0
    gpu_util_nodes: int = 0

    @property
    def nodes_by_phase(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for (phase, _), n in self.nodes.items():
            out[phase] += n
        return dict(out)

    @property
    def not_ready_nodes(self) -> int:
        return sum(n for (phase, _), n in self.nodes.items() if phase in NOT_READY_PHASES)

    @property
    def gpu_memory_used_pct(self) -> float | None:
        return memory_used_pct(self.fb_used_mib, self.fb_total_mib)

    @property
    def gpu_util_avg(self) -> float | None:
        return round(self.gpu_util_sum / self.gpu_util_nodes, 2) if self.gpu_util_nodes else None


def pool_stats(*, pools=None) -> list[PoolStats]:
    """Every live pool (or those of `pools`, a queryset such as `for_user(user)`) with node
    counts by (phase, billing), capacity GPUs and the agents' latest GPU memory and utilisation.
    Three queries, whatever the number of pools and nodes."""
    pools = (GpuNodePool.objects.all() if pools is None else pools).active().select_related("team", "gpu_model", "zone").order_by("name", "pk")
    stats = {p.pk: PoolStats(pool=p) for p in pools}
    rows = (
        Node.objects.filter(pool_id__in=stats).exclude(phase=Node.Phase.TERMINATED)
        .values("pool_id", "phase", "billing").annotate(n=Count("id"), gpus=Sum("gpu_count")).order_by()
    )
    for row in rows:
        s = stats[row["pool_id"]]
        s.nodes[(row["phase"], row["billing"])] = row["n"]
        if row["phase"] in CAPACITY_PHASES:
            s.capacity_gpus += row["gpus"] or 0
    for pool_id, (used, total, util, util_nodes) in agent_totals(pool_ids=list(stats)).items():
        s = stats[pool_id]
        s.fb_used_mib, s.fb_total_mib, s.gpu_util_sum, s.gpu_util_nodes = used, total, util, util_nodes
    return list(stats.values())


def agent_totals(*, pool_ids) -> dict[int, tuple[int, int, float, int]]:
    """Per pool, what the agents of its capacity nodes last reported: (GPU memory used MiB,
    GPU memory MiB, sum of GPU utilisation averages, nodes reporting utilisation). One query."""
    rows = (
        NodeAgentState.objects.filter(node__pool_id__in=pool_ids, node__phase__in=CAPACITY_PHASES)
        .values("node__pool_id").annotate(used=Sum("fb_used_mib"), total=Sum("fb_total_mib"),
                                          util=Sum("gpu_util_avg"), util_nodes=Count("gpu_util_avg")).order_by()
    )
    return {row["node__pool_id"]: (row["used"] or 0, row["total"] or 0, row["util"] or 0.0, row["util_nodes"] or 0) for row in rows}


def memory_used_pct(used_mib: int, total_mib: int) -> float | None:
    """GPU memory used, in percent of the GPUs' memory (None when no agent reports any)."""
    return round(100.0 * used_mib / total_mib, 2) if total_mib else None


def gpu_memory_used_pct(*, pool_ids) -> dict[int, float]:
    """`PoolStats.gpu_memory_used_pct` of these pools, where agents report it, without loading
    the pools (the autoscaler's GPU-memory metric for a whole fleet, issue 9). One query."""
    return {
        pool_id: memory_used_pct(used, total)
        for pool_id, (used, total, _, _) in agent_totals(pool_ids=pool_ids).items()
        if total
    }


def allocated_gpus(*, pool_ids: list[int]) -> dict[int, float]:
    """GPUs requested by Running pods per pool (a share counts its milli / 1000): one query."""
    rows = (
        Pod.objects.filter(phase=Pod.Phase.RUNNING, node__pool_id__in=pool_ids)
        .values("node__pool_id").annotate(milli=Sum(F("gpu_count") * F("gpu_milli"))).order_by()
    )
    return {row["node__pool_id"]: (row["milli"] or 0) / 1000 for row in rows}


def heartbeat_ages(*, now: datetime) -> list[tuple[str, str, float]]:
    """(pool, node, seconds since the last heartbeat) for every live node that ever sent one."""
    rows = (
        Node.objects.exclude(phase=Node.Phase.TERMINATED).filter(last_heartbeat__isnull=False, pool__deleted_at__isnull=True)
        .values_list("pool__name", "name", "last_heartbeat").order_by("pool__name", "name")
    )
    return [(pool, node, max(0.0, (now - hb).total_seconds())) for pool, node, hb in rows]


ALERT_REASONS = ("LowGpuUtilization", "HighGpuAllocation", "XidError", "CudaDriverMismatch", "AgentNodeMismatch")


def overview_for_user(*, user, limit: int = 50) -> dict:
    """The cluster overview page: every pool the user may see, with its water level, and the
    latest monitoring Warnings (alerts, Xids, driver mismatches, refused agents)."""
    stats = pool_stats(pools=GpuNodePool.objects.for_user(user))
    events = (
        PoolEvent.objects.for_user(user).filter(type=PoolEvent.Type.WARNING, reason__in=ALERT_REASONS)
        .select_related("pool", "node").order_by("-last_timestamp", "-id")[:limit]
    )
    return {"stats": stats, "events": list(events)}


def pending_pods_by_pool(pools) -> dict[int, list[Pod]]:
    """The Pending pods each pool would take: its team's pods that fit an empty node of the pool
    (the autoscaler's `queued_pods`), the longest waiting first (`Pod.pending_since`: a pod put
    back to Pending waits from then, not from its creation), for all pools in a fixed number of queries
    (catalog, node types, Pending pods) instead of a few per pool. A pool whose document the
    catalog no longer accepts has no template node and is left out."""
    pools = list(pools)
    if not pools:
        return {}
    catalog = catalog_current()
    node_types = NodeType.objects.in_bulk({p.node_type_id for p in pools})
    pending: dict[int, list[tuple[Pod, object]]] = defaultdict(list)
    rows = Pod.objects.filter(phase=Pod.Phase.PENDING, team_id__in={p.team_id for p in pools}).order_by("pending_since", "pk")
    for pod in rows:
        if (core := readable_core_pod(pod)) is not None:
            pending[pod.team_id].append((pod, core))
    out = {}
    for pool in pools:
        pool.node_type = node_types[pool.node_type_id]
        try:
            spec = parse_document(pool.document, catalog)
        except ValidationError:
            continue
        team = pending[pool.team_id]
        fits = {id(core) for core in fitting_pods([core for _, core in team], template_node(pool, spec))}
        out[pool.pk] = [row for row, core in team if id(core) in fits]
    return out


def silences_active(*, pool: GpuNodePool, now: datetime) -> list[AlertSilence]:
    """The pool's silences still in force, the soonest to end first."""
    return list(AlertSilence.objects.filter(pool=pool, until__gt=now).select_related("created_by").order_by("until", "pk"))


def episodes_recent(*, pool: GpuNodePool, limit: int = 20) -> list[AlertEpisode]:
    """The pool's latest alert episodes, newest first."""
    return list(AlertEpisode.objects.filter(pool=pool).order_by("-started_at", "-pk")[:limit])
