"""Fragmentation report and repack over the database (seed C3, P3, T4).

Loads a pool's (or every pool's) live nodes with their Running pods, runs the pure
`fragmentation_report` and `repack_plan`, and applies a plan: each move is an eviction and a
re-placement (conditional UPDATE on the pod still Running where the plan found it) with an
event, at most `max_nodes` nodes drained per application (the disruption budget). Moves only
go into free capacity and never displace anyone, so priority is respected; a pod whose
eviction a disruption budget refuses now is not moved (the cluster backend says which).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from pools import roles
from pools.controllers.scheduler import scheduler_lock
from pools.core.disruption import DisruptionBudget, eviction_opted_out
from pools.core.errors import ConflictError, ValidationError
from pools.core.scheduling.fragmentation import (
    FragmentationReport,
    PodShape,
    Workload,
    fragmentation_report,
    workload_from_pods,
)
from pools.core.scheduling.nodes import MILLI, static_filter_reason
from pools.core.scheduling.repack import Move, RepackPlan, repack_plan
from pools.models import GpuNodePool
from pools.models.pods import FragmentationSample, Pod
from pools.providers import get_cluster_backend, real_cluster
from pools.providers.kubernetes import CLUSTER_UNREACHABLE
from pools.selectors.cluster import cluster_state, core_pods_of, live_nodes
from pools.services.events import event_record
from pools.services.pod_placements import placements_end
from pools.services.pods import pods_bind

logger = logging.getLogger("ebcloud.fragmentation")

DEFAULT_WORKLOAD = Workload(((PodShape(0, 1, MILLI), 1),), observed=0)  # whole GPUs when no pod ran yet
MAX_DISRUPTION_NODES = 100


@dataclass(frozen=True)
class FragmentationView:
    scope: str
    report: FragmentationReport
    plan: RepackPlan | None
    moved: tuple[str, ...] = ()
    started: tuple[str, ...] = ()  # waiting pods the share packing bound


def _load(pools: list[GpuNodePool] | None):
    nodes = live_nodes(pools=pools)
    pods = list(Pod.objects.filter(phase=Pod.Phase.RUNNING, node__in=nodes).order_by("pk"))
    states = cluster_state(nodes, pods)
    return nodes, pods, states, _workload(states.values())


def _workload(states) -> Workload:
    """The pod shapes the report measures fragmentation against: those bound on these nodes."""
    bound = [b.pod for s in states for b in s.bound.values()]
    return workload_from_pods(bound) if bound else DEFAULT_WORKLOAD


def fragmentation_by_pool(*, pools: list[GpuNodePool]) -> dict[str, FragmentationReport]:
    """Each pool's report, as `fragmentation_for` gives it for that pool alone (its own nodes
    against its own pods' shapes), read in one load whatever the number of pools."""
    _, _, states, _ = _load(pools)
    by_pool: dict[str, list] = {pool.name: [] for pool in pools}
    for state in states.values():
        by_pool.setdefault(state.pool, []).append(state)
    return {name: fragmentation_report(nodes, _workload(nodes)) for name, nodes in by_pool.items()}


def _budgets(pods: list[Pod]) -> list[DisruptionBudget]:
    """The disruption budgets over the running pods: the repack moves no more of a budget's
    pods than it lets go now. If a real cluster cannot be asked, the plan knows none: its
    drains still go through the Eviction API, which refuses what they refuse."""
    if not pods:
        return []
    try:
        return get_cluster_backend().disruption_budgets(pods={p.key: p.labels for p in pods})
    except CLUSTER_UNREACHABLE as exc:
        logger.warning("the cluster's disruption budgets could not be read: %s", exc)
        return []


def _kept(pods: list[Pod]) -> dict[str, str]:
    """The pods whose annotations forbid moving them (`eviction_opted_out`), with why."""
    return {p.key: why for p in pods if (why := eviction_opted_out(p.key, p.annotations))}


def _waiting(states) -> list:
    """The Pending GPU pods the share packing may make room for, in the scheduler's queue
    order: those of the highest priority among the ones that pass some node's static filters
    here (team, taints, affinity, model), so that room is never made for a pod while one of
    higher priority waits. Checked once per pod shape (a workload's replicas share one)."""
    nodes = [state for state in states.values() if state.gpu_count and state.ready]
    queue = Pod.objects.live().filter(phase=Pod.Phase.PENDING, gpu_count__gt=0).order_by("-priority", "submitted_at", "id")
    fits: dict[tuple, bool] = {}
    waiting = []
    for _, _, pod in core_pods_of(queue):
        if isinstance(pod, Exception):
            continue
        if waiting and pod.priority < waiting[0].priority:  # the queue is by priority: none below waits first
            break
        if pod.shape_key not in fits:
            fits[pod.shape_key] = any(static_filter_reason(pod, node) is None for node in nodes)
        if fits[pod.shape_key]:
            waiting.append(pod)
    return waiting


def fragmentation_for(*, pools: list[GpuNodePool] | None, scope: str, with_plan: bool = False, max_nodes: int | None = None) -> FragmentationView:
    """The report for these pools (None: the whole cluster), with the repack plan if asked: by
    default the whole plan (every node it can free); applying it plans again for `max_nodes`
    nodes at a time, so each wave is the best drain of that size at that moment."""
    _, pods, states, workload = _load(pools)
    nodes = list(states.values())
    report = fragmentation_report(nodes, workload)
    budget = max_nodes if max_nodes is not None else max(1, len(nodes))
    plan = repack_plan(nodes, workload=workload, max_drained_nodes=budget, waiting=_waiting(states), budgets=_budgets(pods), kept=_kept(pods)) if with_plan else None
    return FragmentationView(scope, report, plan)


def repack_apply(*, user, pool: GpuNodePool | None, max_nodes: int = 1, shares: bool = False, now: datetime | None = None) -> FragmentationView:
    """Apply the repack plan of one pool (its leads, admins) or of the cluster (admins only):
    its drains, at most `max_nodes` nodes; or, with `shares`, its second part, which packs the
    GPU shares into fewer GPUs (all its moves at once: they free whole GPUs, not nodes)."""
    now = now or timezone.now()
    if pool is None and not roles.is_admin(user):
        raise PermissionDenied("only platform admins can repack the whole cluster")
    if pool is not None and not roles.can_manage_team_pools(user, pool.team_id):
        raise PermissionDenied(f"only leads of team {pool.team.slug} and platform admins can repack this pool")
    if not 1 <= max_nodes <= MAX_DISRUPTION_NODES:
        raise ValidationError(f"must be from 1 to {MAX_DISRUPTION_NODES}", field="maxNodes")
    if real_cluster():
        raise ConflictError("a real cluster's pods cannot be moved in place: to free a node, drain it (its pods are evicted and kube-scheduler places them again); the plan above says which nodes")
    with transaction.atomic():
        scheduler_lock()
        nodes, pods, states, workload = _load([pool] if pool is not None else None)
        plan = repack_plan(
            list(states.values()), workload=workload, max_drained_nodes=0 if shares else max_nodes, pack_shares=shares,
            waiting=_waiting(states) if shares else (), budgets=_budgets(pods), kept=_kept(pods),
        )  # fmt: skip
        by_name = {n.name: n for n in nodes}
        by_key = {p.key: p for p in pods}
        moved, started, left = [], (), []
        why = "to pack GPU shares into fewer GPUs" if shares else "to free node {}"
        for move in plan.share_moves if shares else plan.moves:
            pod, source, target = by_key[move.pod], by_name[move.from_node], by_name[move.to_node]
            changed = Pod.objects.filter(pk=pod.pk, phase=Pod.Phase.RUNNING, node=source).update(
                node=target, gpu_indices=list(move.gpu_indices), reason="Repacked", placed_at=now
            )
            if not changed:
                continue
            moved.append(move.pod)
            left.append((pod.pk, source.pk, pod.placed_at, pod.started_at))  # its time on `source` stays billed there
            event_record(pool=source.pool, node=source, reason="Evicted", message=f"Pod {move.pod} evicted by the repack {why.format(source.name)}", actor=user, now=now)
            event_record(pool=target.pool, node=target, reason="Repacked", message=f"Pod {move.pod} re-placed from {source.name} to {target.name} (GPU {', '.join(map(str, move.gpu_indices)) or 'none'})", actor=user, now=now)
        placements_end(left, now)
        if shares and len(moved) == len(plan.share_moves):  # the room they were planned into is there
            started = _bind_waiting(plan.share_placements, by_name, user=user, now=now)
        for name in plan.freed_nodes:  # none when packing shares (no drains planned)
            node = by_name[name]
            event_record(pool=node.pool, node=node, reason="NodeFreed", message=f"Node {name} runs no pods after the repack: give it new work or scale in ({node.gpu_count * 168} GPU-hours a week)", actor=user, now=now)
    scope = pool.name if pool is not None else "cluster"
    view = fragmentation_for(pools=[pool] if pool is not None else None, scope=scope)
    return FragmentationView(scope, view.report, plan, tuple(moved), started)


def _bind_waiting(placements, by_name, *, user, now: datetime) -> tuple[str, ...]:
    """Bind the waiting shares the share packing made room for, as the scheduler pass binds
    (each only if still Pending), with a `Scheduled` event each; returns their keys."""
    where = {p.pod: p for p in placements}
    rows = Pod.objects.live().filter(phase=Pod.Phase.PENDING).named(key.split("/", 1) for key in where)
    pk_of = {row.key: row.pk for row in rows.only("pk", "namespace", "name")}
    bound = pods_bind(binds={pk: (by_name[where[key].node].pk, where[key].gpu_indices) for key, pk in pk_of.items()}, now=now)
    started = []
    for placement in placements:
        if pk_of.get(placement.pod) in bound:
            started.append(placement.pod)
            node = by_name[placement.node]
            gpus = ", ".join(map(str, placement.gpu_indices))
            event_record(pool=node.pool, node=node, reason="Scheduled", message=f"Successfully assigned {placement.pod} to {node.name} on GPU(s) {gpus}, in the room packing GPU shares made", actor=user, now=now)
    return tuple(started)


def report_document(view: FragmentationView) -> dict:
    """The API's shape of a report (GPU amounts in GPUs, not milli)."""
    report = view.report
    document = {
        "scope": view.scope,
        "nodes": [
            {
                "name": n.name,
                "pool": n.pool,
                "gpuCount": n.gpu_count,
                "allocatedPct": round(n.allocated_pct, 1),
                "freeGpus": n.free_milli / MILLI,
                "fragmentationGpus": round(n.fragmentation_milli / MILLI, 3),
            }
            for n in report.nodes
        ],
        "totalGpus": report.total_gpu_milli / MILLI,
        "allocatedGpus": report.allocated_gpu_milli / MILLI,
        "unallocatedPct": round(report.unallocated_pct, 1),
        "fragmentationGpus": round(report.cluster_fragmentation_milli / MILLI, 3),
        "fragmentedShareOfFree": round(report.fragmented_share_of_free, 3),
        "underusedNodes": list(report.underused_nodes),
        "freeFragmentHistogram": dict(report.free_fragment_histogram),
    }
    if view.plan is not None:
        document["plan"] = plan_document(view.plan)
    if view.moved:
        document["applied"] = list(view.moved)
    if view.started:
        document["started"] = list(view.started)
    return document


def _move_document(move: Move) -> dict:
    return {"pod": move.pod, "from": move.from_node, "to": move.to_node, "gpuIndices": list(move.gpu_indices)}


def plan_document(plan: RepackPlan) -> dict:
    return {
        "moves": [_move_document(m) for m in plan.moves],
        "freedNodes": list(plan.freed_nodes),
        "emptyNodes": list(plan.empty_nodes),
        "gpuHoursSavedPerWeek": plan.gpu_hours_saved_per_week,
        "fragmentationBeforeGpus": round(plan.fragmentation_before_milli / MILLI, 3),
        "fragmentationAfterGpus": round(plan.fragmentation_after_milli / MILLI, 3),
        "skipped": dict(plan.skipped),
        "shareMoves": [_move_document(m) for m in plan.share_moves],
        "shareGpusFreed": plan.share_gpus_freed,
        "sharePlacements": [{"pod": p.pod, "node": p.node, "gpuIndices": list(p.gpu_indices)} for p in plan.share_placements],
    }


def fragmentation_record(*, now: datetime | None = None) -> list[FragmentationSample]:
    """Store one trend point per live pool with nodes, and one for the whole cluster."""
    now = now or timezone.now()
    _, pods, states, workload = _load(None)
    budgets, kept = _budgets(pods), _kept(pods)
    by_pool: dict[str, list] = {}
    for state in states.values():
        by_pool.setdefault(state.pool, []).append(state)
    pools = {p.name: p for p in GpuNodePool.objects.active().filter(name__in=by_pool)}
    samples = []
    for name, members in [*((n, by_pool[n]) for n in sorted(pools)), ("", list(states.values()))]:
        report = fragmentation_report(members, workload)
        plan = repack_plan(members, workload=workload, max_drained_nodes=len(members) or 1, pack_shares=False, budgets=budgets, kept=kept)
        samples.append(
            FragmentationSample(
                pool=pools.get(name),
                taken_at=now,
                total_gpus=report.total_gpu_milli / MILLI,
                allocated_gpus=report.allocated_gpu_milli / MILLI,
                unallocated_pct=round(report.unallocated_pct, 2),
                fragmentation_gpus=round(report.cluster_fragmentation_milli / MILLI, 3),
                underused_nodes=len(report.underused_nodes),
                freeable_nodes=len(plan.freed_nodes),
                gpu_hours_saved_per_week=plan.gpu_hours_saved_per_week,
            )
        )
    return FragmentationSample.objects.bulk_create(samples)


WEEKLY_SLACK = timedelta(days=6)


def fragmentation_record_weekly(*, now: datetime | None = None) -> list[FragmentationSample]:
    """`fragmentation_record` once a week: a second delivery of the same week's task (a retry,
    another worker) finds this week's cluster point and records nothing. The check and the
    write hold the scheduler's lock, so two deliveries at once record one point."""
    now = now or timezone.now()
    with transaction.atomic():
        scheduler_lock()
        if FragmentationSample.objects.filter(pool__isnull=True, taken_at__gt=now - WEEKLY_SLACK).exists():
            return []
        return fragmentation_record(now=now)


def fragmentation_trend(*, user, pool: GpuNodePool | None, limit: int = 104) -> list[FragmentationSample]:
    """The last `limit` trend points (two years of weekly points), oldest first."""
    samples = FragmentationSample.objects.for_user(user)
    samples = samples.filter(pool=pool) if pool is not None else samples.filter(pool__isnull=True)
    return list(reversed(samples.order_by("-taken_at", "-id")[:limit]))

