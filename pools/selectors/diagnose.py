"""Load one pool's state for the self-checks (seed T5) and run them (`pools.core.diagnose.checks`).

A fixed number of queries whatever the number of nodes, pods, events or cost rows: each input
of the snapshot is one query, aggregated in the database where the checks need only sums.
The web page, the API and (through the API) the CLI all call `pool_diagnose`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal
from functools import partial

from django.db.models import Avg, Count, F, Max, Min, Q, Subquery, Sum

from billing.models import CostRecord, PoolResourceSample
from monitoring.models import GpuErrorEvent, PoolSample
from pools.core.diagnose import checks as core
from pools.core.spec import PoolSpec
from pools.models import GpuNodePool, Node, PoolEvent, PoolOrder
from pools.models.pods import FragmentationSample, Pod, PriorityClass
from pools.selectors.cluster import (
    core_pod_leaving_out_fault,
    core_pod_or_fault,
    log_unreadable,
    team_id_of,
)
from pools.selectors.prospects import live_pools, pool_templates, stored_spec

MAX_PENDING = 500  # the longest-waiting Pending pods of the team are read; more would not change a finding
MAX_RUNNING = 500  # the pool's Running pods read for the preemption check (its details show 10)
MAX_EVENTS = 200
EVENT_REASONS = (*core.SCALE_UP_REASONS, "ScaleDownBlocked")


@dataclass(frozen=True)
class Diagnosis:
    pool: str
    checked_at: datetime
    status: str  # the worst check's status
    checks: list[core.Check]

    def count(self, status: str) -> int:
        return sum(1 for c in self.checks if c.status == status)

    @property
    def summary(self) -> dict[str, int | str]:
        return {"status": self.status, **{s: self.count(s) for s in (core.FAILING, core.WARNING, core.UNKNOWN, core.OK)}}


def pool_diagnose(*, pool: GpuNodePool, now: datetime) -> Diagnosis:
    """The self-check table for a pool the caller may see (`selectors.pool_get`). A stored spec
    that no longer parses leaves the pool's labels and taints unknown, so the Pending-pod check
    says so rather than "no pod is aimed at this pool"."""
    spec = stored_spec(pool)
    checks = core.diagnose(pool_snapshot(pool=pool, now=now, spec=spec), now)
    if spec is None:
        checks = [_pending_unknown(c) if c.id == "pods-pending" else c for c in checks]
    return Diagnosis(pool=pool.name, checked_at=now, status=core.overall(checks), checks=checks)


def _pending_unknown(check: core.Check) -> core.Check:
    return replace(
        check, status=core.UNKNOWN, details=(),
        found="The pool's stored spec no longer passes validation, so which Pending pods are aimed at it cannot be told.",
        cause="A validation rule changed since the spec was saved; the control plane's log names the field.",
        action="Apply the pool's YAML again with that field fixed: ebcloud node-pool apply -f <file>.",
    )  # fmt: skip


def pool_snapshot(*, pool: GpuNodePool, now: datetime, spec: PoolSpec | None) -> core.PoolSnapshot:
    """The checks' inputs; `spec` is the pool's `stored_spec`."""
    since = now - core.WINDOW
    return core.PoolSnapshot(
        name=pool.name,
        zone=pool.zone.name,
        region=pool.zone.region,
        gpu_model=pool.gpu_model.name,
        node_type=pool.node_type.name,
        gpus_per_node=pool.node_type.gpu_count,
        min_nodes=pool.min_nodes,
        max_nodes=pool.max_nodes,
        phase=pool.phase,
        pending_reason=pool.pending_reason,
        auto_repair=spec.auto_repair if spec else True,
        system_image=spec.system_image if spec else "",
        taints=tuple(f"{t.key}={t.value}:{t.effect}" for t in spec.node_taints) if spec else (),
        scaling=spec.autoscaling if spec else None,
        burst_enabled=spec.autoscaling is not None if spec else False,
        burst_max_nodes=spec.burst.max_nodes if spec else 0,
        events=_events(pool, since),
        orders=_orders(pool, since),
        nodes=_nodes(pool, since),
        pending_pods=_pending(pool, spec),
        gpu_errors=_gpu_errors(pool, since, now),
        utilisation=_utilisation(pool, since),
        costs=_costs(pool, now),
        fragmentation=_fragmentation(pool),
        preemptible=pool.preemptible,
        running_pods=tuple(core.RunningPod(f"{ns}/{name}", priority, checkpointable) for ns, name, priority, checkpointable in
                           Pod.objects.filter(phase=Pod.Phase.RUNNING, node__pool=pool).order_by("namespace", "name")
                           .values_list("namespace", "name", "priority", "checkpointable")[:MAX_RUNNING]),
        preempting_classes=tuple(PriorityClass.objects.filter(preemption_policy=PriorityClass.Policy.PREEMPT_LOWER_PRIORITY).values_list("name", "value")),
    )  # fmt: skip


def _events(pool: GpuNodePool, since: datetime) -> tuple[core.EventInfo, ...]:
    rows = (
        PoolEvent.objects.filter(pool=pool, last_timestamp__gte=since, reason__in=EVENT_REASONS)
        .order_by("-last_timestamp", "-id")
        .values_list("reason", "message", "last_timestamp", "count", "node__name")[:MAX_EVENTS]
    )
    return tuple(core.EventInfo(reason, message, at, count, node or "") for reason, message, at, count, node in rows)


def _orders(pool: GpuNodePool, since: datetime) -> tuple[core.OrderInfo, ...]:
    """Pending orders, those refused within the window, and the capacity orders after the first
    of those, which may have made it good (a renewal adds no capacity)."""
    refused = Q(status__in=(PoolOrder.Status.REJECTED, PoolOrder.Status.FAILED)) & (Q(decided_at__gte=since) | Q(created_at__gte=since))
    first_refused = Subquery(pool.orders.filter(refused).order_by("pk").values("pk")[:1])
    held = (PoolOrder.Status.APPROVED, PoolOrder.Status.PAYING, PoolOrder.Status.PAID)
    made_good = Q(status__in=held, pk__gt=first_refused) & ~Q(kind=PoolOrder.Kind.RENEW)
    rows = pool.orders.filter(Q(status=PoolOrder.Status.PENDING) | refused | made_good).order_by("pk").values_list("pk", "status", "reason")
    return tuple(core.OrderInfo(pk, status, reason) for pk, status, reason in rows)


def _nodes(pool: GpuNodePool, since: datetime) -> tuple[core.NodeInfo, ...]:
    """Live nodes with their Running pods' GPUs and the last pod end of the window (a pod that
    ended earlier cannot make a node look busy within any scale-down window, at most 1 h)."""
    running = Q(phase=Pod.Phase.RUNNING)
    request = F("gpu_count") * F("gpu_milli")
    pods = {
        row["node_id"]: row
        for row in Pod.objects.filter(running | Q(finished_at__gte=since), node__pool=pool).values("node_id")
        .annotate(allocated=Sum(request, filter=running), largest=Max(request, filter=running), finished=Max("finished_at"))
        .order_by()
    }  # fmt: skip
    rows = (
        Node.objects.filter(pool=pool).exclude(phase=Node.Phase.TERMINATED).order_by("name")
        .values("pk", "name", "phase", "billing", "gpu_count", "created_at", "ready_at", "last_error", "release_reason",
                "cluster_fault", "agent_state__last_report_at", "agent_state__conditions")
    )  # fmt: skip
    nodes = []
    for row in rows:
        use = pods.get(row["pk"], {})
        nodes.append(core.NodeInfo(
            name=row["name"], phase=row["phase"], billing=row["billing"], gpu_count=row["gpu_count"],
            created_at=row["created_at"], ready_at=row["ready_at"], last_error=row["last_error"],
            draining=bool(row["release_reason"]), cluster_fault=row["cluster_fault"],
            allocated_gpus=(use.get("allocated") or 0) / 1000, largest_pod_gpus=(use.get("largest") or 0) / 1000,
            last_pod_finished_at=use.get("finished"),
            reported=row["agent_state__last_report_at"] is not None,
            conditions=tuple(c for c in row["agent_state__conditions"] or () if isinstance(c, dict)),
        ))  # fmt: skip
    return tuple(nodes)


def _pending(pool: GpuNodePool, spec: PoolSpec | None) -> tuple[core.PendingPod, ...]:
    """The Pending pods aimed at this pool (`pending_pod_facts`), of the teams that may use it,
    with what stops each on an empty node: every live pool's template is read, so that a pod
    another pool of its team takes is left to that pool."""
    if spec is None:
        return ()
    templates = pool_templates(live_pools())
    template = templates.get(pool.pk)
    if template is None:  # being deleted: nothing is aimed at it any more
        return ()
    teams = [team_id_of(team) for team in template.teams or () if team]
    others = [t for pk, t in templates.items() if pk != pool.pk]
    pods = Pod.objects.filter(phase=Pod.Phase.PENDING, team_id__in=teams).order_by("pending_since", "pk")[:MAX_PENDING]
    facts = (_pending_fact(p, template, others, owned=p.team_id == pool.team_id) for p in pods)
    return tuple(f for f in facts if f is not None)


def _pending_fact(pod: Pod, template, others, *, owned: bool) -> core.PendingPod | None:
    """`pending_pod_facts` of one pod. One the scheduling core refuses (a field stored before
    its check) waits on no node: it is shown, as what to fix, where it would be aimed but for
    the field refused, or, where no one field explains it, on the pools of its own team (never
    on a pool lent to it: its lender can do nothing about it), rather than left out."""
    read = core_pod_or_fault(pod)
    facts = partial(core.pending_pod_facts, template=template, pending_since=pod.pending_since, others=others, explanation=pod.explanation, hints=pod.hints or ())
    if not isinstance(read, Exception):
        return facts(read)
    log_unreadable(pod.key, read)
    if (aimed := core_pod_leaving_out_fault(pod)) is not None:
        fact = facts(aimed)
    else:
        fact = core.PendingPod(key=pod.key, pending_since=pod.pending_since, gpus=pod.gpu_count, blocker=core.INVALID_SPEC, explanation=pod.explanation) if owned else None
    return None if fact is None else replace(fact, blocker=core.INVALID_SPEC, reason=str(read), blockers=())


def _gpu_errors(pool: GpuNodePool, since: datetime, now: datetime) -> tuple[core.GpuErrorInfo, ...]:
    """The Xids of the pool's nodes still there: one replaced or released took its fault with it
    (Diagnose said FAILING for a day of a node gone since; its page keeps the history). Up to
    `now`, as the repair reads them: one dated later is no fault of the last 24 h."""
    rows = (
        GpuErrorEvent.objects.filter(node__pool=pool, at__gte=since, at__lte=now).exclude(node__phase=Node.Phase.TERMINATED)
        .values_list("node__name", "xid", "kind").annotate(n=Count("id"), last=Max("at")).order_by()
    )  # fmt: skip
    return tuple(core.GpuErrorInfo(node, xid, kind, n, last) for node, xid, kind, n, last in rows)


def _utilisation(pool: GpuNodePool, since: datetime) -> core.UtilisationInfo:
    reported, allocated = Q(gpu_util_avg__isnull=False), Q(allocated_gpus__isnull=False)
    row = PoolSample.objects.filter(pool=pool, minute__gte=since).aggregate(
        n=Count("gpu_util_avg"), first=Min("minute", filter=reported), mean=Avg("gpu_util_avg"), top=Max("gpu_util_avg"),
        used=Sum("allocated_gpus", filter=allocated), capacity=Sum("capacity_gpus", filter=allocated),
    )  # fmt: skip
    share = 100.0 * row["used"] / row["capacity"] if row["capacity"] else None
    return core.UtilisationInfo(samples=row["n"], first_minute=row["first"], mean_util_pct=row["mean"], max_util_pct=row["top"], allocated_pct=share)


def _costs(pool: GpuNodePool, now: datetime) -> core.CostInfo | None:
    """Metered hours only (the current hour is not billed yet): the last 24 of them, and the
    up to 7 days before as a daily average."""
    until = now.replace(minute=0, second=0, microsecond=0)
    split = until - core.WINDOW
    start = split - timedelta(days=core.PREVIOUS_DAYS)
    before = Q(hour__lt=split)
    rows = (
        CostRecord.objects.filter(pool=pool, hour__gte=start, hour__lt=until)
        .values_list("currency", "component", "cost_kind")
        .annotate(recent=Sum("amount", filter=Q(hour__gte=split)), previous=Sum("amount", filter=before), first=Min("hour", filter=before))
        .order_by()
    )  # fmt: skip
    by_currency: dict[str, Decimal] = defaultdict(Decimal)
    rows = list(rows)
    for currency, _, _, recent, _, _ in rows:
        by_currency[currency] += recent or 0
    if not rows:
        return None
    currency = max(by_currency, key=lambda c: (by_currency[c], c))
    recent: dict[str, Decimal] = defaultdict(Decimal)
    previous: dict[str, Decimal] = defaultdict(Decimal)
    idle, first = Decimal(0), None
    for cur, component, cost_kind, amount, earlier, first_hour in rows:
        if cur != currency:
            continue
        recent[component] += amount or 0
        previous[component] += earlier or 0
        if component == "gpu" and cost_kind == "idle":
            idle += amount or 0
        if first_hour is not None and (first is None or first_hour < first):
            first = first_hour
    days = min(core.PREVIOUS_DAYS, -(-(split - first) // core.WINDOW)) if first else 0
    daily = {k: (v / days).quantize(Decimal("0.01")) for k, v in previous.items()} if days else {}
    gb = PoolResourceSample.objects.filter(pool=pool, hour__gte=split, hour__lt=until).aggregate(gb=Sum("cross_zone_gb"))["gb"]
    return core.CostInfo(currency=currency, recent=dict(recent), previous_daily=daily, previous_days=days, recent_idle=idle, cross_zone_gb=gb)


def _fragmentation(pool: GpuNodePool) -> core.FragmentationInfo | None:
    latest = FragmentationSample.objects.filter(pool=pool).order_by("-taken_at", "-id").values_list("underused_nodes", "freeable_nodes").first()
    return core.FragmentationInfo(*latest) if latest else None
