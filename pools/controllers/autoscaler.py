"""The live autoscaler: a monthly baseline plus on-demand burst nodes (seed D3, O4, G4; issue 5).

Every pass, for each pool with `burst.enabled` (by its `scaling` block, else the defaults of an
empty one: `PoolSpec.autoscaling`):
1. read its metrics from live state — GPU-memory utilisation from the node agents' latest
   reports (`monitoring`), queued pods = Pending pods that would fit one of the pool's nodes;
2. ask the pure HPA core (`pools.core.autoscaling.decide`) for the node count, bounded below by the
   monthly nodes (paid for anyway, never removed here) and above by `nodeCount.max` and
   `burst.maxNodes`;
3. scale up only by nodes that Pending pods would actually fit on (a fit simulation on template
   nodes of the pool, as Cluster Autoscaler does); if nothing pending fits a new node, do not
   scale and say why (Warning event + ScalingActivity);
4. scale down only burst nodes, empty ones first, then ones whose pods fit on the rest (monthly
   capacity first: it is paid already); the lifecycle controller drains and releases them.

New burst nodes are Node rows in phase Ordering: the lifecycle controller provisions them like
any other node. The pass claims the pool with the lifecycle's claim, so reconcile and autoscale
never act on the same pool at once, whatever the number of workers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.db.models import Count, OuterRef, Subquery
from django.utils import timezone

from monitoring.selectors import gpu_memory_used_pct
from pools.claims import (
    WHOLE,
    WORKER_ID,
    Claims,
    ClaimsSeen,
    Part,
    claim_acquire,
    claim_release,
    claims_seen,
    collector_paused,
)
from pools.controllers.context import ReconcilePass
from pools.controllers.exits import drain_start
from pools.controllers.lifecycle import node_names_next
from pools.controllers.scheduler import scheduler_lock
from pools.controllers.state import pools_update
from pools.core import lifecycle as rules
from pools.core.autoscaling import decide
from pools.core.scaling_history import ScalingHistory
from pools.core.scheduling.nodes import (
    NO_EXECUTE,
    NO_SCHEDULE,
    NodeState,
    best_fit_gpus,
    filter_node,
)
from pools.core.scheduling.nodes import Pod as CorePod
from pools.core.spec import Catalog, parse_document
from pools.models import GpuNodePool, Node, ScalingActivity
from pools.models.pods import Pod
from pools.providers import get_cloud_provider, get_cluster_backend, real_cluster
from pools.selectors.cluster import cluster_state, core_pod_of, core_pods_of
from pools.selectors.pools import catalog_current
from pools.selectors.queue import template_node
from pools.services.events import WARNING, event_record

logger = logging.getLogger("ebcloud.autoscaler")
GPU_MEMORY = "gpu-memory"
QUEUED_PODS = "queued_pods"


@dataclass(frozen=True)
class AutoscaleResult:
    pool: str
    claimed: bool
    current: int = 0
    desired: int = 0
    reason: str = ""


@collector_paused()
def autoscale_all(*, now: datetime | None = None, part: Part = WHOLE) -> list[AutoscaleResult]:
    """One pass over every live pool that autoscales (the task and `manage.py autoscale --once`).

    Batched (issue 9): the inputs of every pool's decision — node counts, Pending pods, GPU
    memory, the last recorded activity — are loaded with a fixed number of queries
    (`fleet_view`) and each pool is decided in memory. A pool whose decision changes nothing
    costs no statement of its own: the stored histories are written with one UPDATE. Pools
    that scale or record a blocked or limited decision are claimed together (the lifecycle's
    claim, so reconcile and autoscale never act on one pool at once) and decided again on
    fresh rows by the per-pool pass before they act. With `part`, only that part's pools
    (`pools.claims.Part`), as the lifecycle controller splits its pass.
    """
    now = now or timezone.now()
    live = part.of(GpuNodePool.objects.active().exclude(phase=GpuNodePool.Phase.DELETING), "pk")
    pools = list(live.select_related(*POOL_RELATED).order_by("pk"))
    seen = claims_seen(p.pk for p in pools)
    busy = seen.busy
    view = fleet_view([p for p in pools if p.pk not in busy])
    results: dict[int, AutoscaleResult] = {}
    acting, stores = [], []
    for pool in pools:
        if pool.pk in busy:
            continue
        try:
            plan = _autoscale(pool, now, view, dry_run=True)
        except Exception:  # one broken pool must not stop the others; the next pass retries
            logger.exception("autoscale of pool %s failed", pool.name)
            continue
        if plan.acts:
            acting.append(pool)
            continue
        results[pool.pk] = plan.result
        if plan.history is not None:
            stores.append((pool, plan.history))
    histories_write(stores, seen=seen)
    skipped = set(busy)
    with Claims([p.pk for p in acting], owner=WORKER_ID) as claims:
        for pool in acting:
            if pool.pk not in claims:
                skipped.add(pool.pk)
                continue
            try:
                fresh = GpuNodePool.objects.select_related(*POOL_RELATED).get(pk=pool.pk)  # its history as of the claim
                results[pool.pk] = _autoscale(fresh, now, fleet_view([fresh], queue_of=view)).result
            except Exception:  # one broken pool must not stop the others; the next pass retries
                logger.exception("autoscale of pool %s failed", pool.name)
    out = []
    for pool in pools:
        if pool.pk in results:
            out.append(results[pool.pk])
        elif pool.pk in skipped:
            out.append(AutoscaleResult(pool=pool.name, claimed=False))
    return out


def pool_autoscale(*, pool_id: int, now: datetime | None = None) -> AutoscaleResult:
    now = now or timezone.now()
    version = claim_acquire(pool_id=pool_id)
    if version is None:
        return AutoscaleResult(pool=str(pool_id), claimed=False)
    try:
        pool = GpuNodePool.objects.select_related(*POOL_RELATED).get(pk=pool_id)
        return _autoscale(pool, now, fleet_view([pool])).result
    finally:
        claim_release(pool_id=pool_id, version=version)


POOL_RELATED = ("node_type", "gpu_model", "zone", "team")


@dataclass
class Shapes:
    """A team's Pending pods grouped by shape (`shape_key`: pods of one shape filter alike),
    with two indexes so that a pool tries only the shapes that could fit its nodes, not the
    team's whole queue (at 1,000 pools most shapes are meant for one pool): each shape is
    listed under one pair of its nodeSelector (or as having none), and under what each of its
    tolerations can tolerate. A shape fits a node only if the node has that label pair and
    every NoSchedule/NoExecute taint of the node is tolerated, so the shapes left out would
    fail `filter_node` anyway: the result is exactly that of trying them all."""

    groups: dict[tuple, list[CorePod]] = field(default_factory=dict)  # shape_key -> its pods, first seen first
    # By shape number (the order first seen): its pods and the nodeSelector pair it is listed under.
    numbered: list[list[CorePod]] = field(default_factory=list)
    selector: list[tuple[str, str] | None] = field(default_factory=list)
    by_selector: dict[tuple[str, str] | None, list[int]] = field(default_factory=dict)  # a pair (None: no selector) -> shapes
    by_toleration: dict[tuple, list[int]] = field(default_factory=dict)  # (key, value) / (key, None) for Exists / () for any key -> shapes

    def add(self, pod: CorePod) -> None:
        group = self.groups.get(pod.shape_key)
        if group is None:
            number, pair = len(self.numbered), min(pod.node_selector.items()) if pod.node_selector else None
            group = self.groups[pod.shape_key] = []
            self.numbered.append(group)
            self.selector.append(pair)
            self.by_selector.setdefault(pair, []).append(number)
            for t in pod.tolerations:
                tolerates = () if not t.key else (t.key, None) if t.operator == "Exists" else (t.key, t.value)
                self.by_toleration.setdefault(tolerates, []).append(number)
        group.append(pod)

    def fitting(self, template: NodeState) -> list[list[CorePod]]:
        """The groups whose pods fit an empty node like `template`, in the order first seen."""
        hard = next((t for t in template.taints if t.effect in (NO_SCHEDULE, NO_EXECUTE)), None)
        if hard is None:
            numbers = [*self.by_selector.get(None, ()), *(n for pair in template.labels.items() for n in self.by_selector.get(pair, ()))]
        else:  # the shapes that tolerate the node's first hard taint, then those it can select
            index, labels = self.by_toleration, template.labels
            tolerating = {*index.get((hard.key, hard.value), ()), *index.get((hard.key, None), ()), *index.get((), ())}
            numbers = [n for n in tolerating if (pair := self.selector[n]) is None or labels.get(pair[0]) == pair[1]]
        numbers.sort()
        return [self.numbered[n] for n in numbers if filter_node(self.numbered[n][0], template) is None]


@dataclass
class FleetView:
    """The inputs of the autoscaler's decisions for many pools, read with a fixed number of
    queries: node counts, Pending pods per team (as rows, and as the core's pods grouped by
    shape), the agents' GPU memory, and each pool's latest recorded activity (to deduplicate)."""

    catalog: Catalog
    nodes: dict[int, tuple[int, int]]  # pool -> (live nodes not leaving, of which on demand)
    pending: dict[int, list[CorePod]]  # team -> Pending pods, oldest first
    shapes: dict[int, Shapes]  # team -> its Pending pods (core), grouped by shape
    memory: dict[int, float]  # pool -> GPU memory used (%), where agents report it
    last: dict[int, tuple[str, int]]  # pool -> (reason, from_nodes) of its latest ScalingActivity


def fleet_view(pools: list[GpuNodePool], *, queue_of: FleetView | None = None) -> FleetView:
    """The view of these pools. With `queue_of`, the Pending pods (and the catalog) are taken
    from that view, read moments before: a pool decided again before it acts re-reads only
    its own rows."""
    ids = [p.pk for p in pools]
    nodes: dict[int, tuple[int, int]] = {}
    live = Node.objects.filter(pool_id__in=ids, release_reason="").exclude(phase=Node.Phase.TERMINATED)
    for pool_id, billing, n in live.values_list("pool_id", "billing").annotate(n=Count("pk")).order_by():
        total, burst = nodes.get(pool_id, (0, 0))
        nodes[pool_id] = (total + n, burst + (n if billing == Node.Billing.ON_DEMAND else 0))
    if queue_of is not None:
        pending, shapes, catalog = queue_of.pending, queue_of.shapes, queue_of.catalog
    else:
        pending, shapes, catalog = {}, {}, catalog_current()
        queue = Pod.objects.filter(phase=Pod.Phase.PENDING, team_id__in={p.team_id for p in pools}).order_by("submitted_at", "pk")
        for team_id, key, core in core_pods_of(queue):
            if isinstance(core, Exception):  # a pod the scheduling core refuses fits nowhere; it must not stop the pass
                logger.error("pending pod %s is not a valid pod for the scheduling core: %s", key, core)
                continue
            pending.setdefault(team_id, []).append(core)
            if team_id not in shapes:
                shapes[team_id] = Shapes()
            shapes[team_id].add(core)
    memory = gpu_memory_used_pct(pool_ids=ids) if ids else {}
    latest = ScalingActivity.objects.filter(pool=OuterRef("pk")).order_by("-at", "-id")
    last = {
        pk: (reason, before)
        for pk, reason, before in GpuNodePool.objects.filter(pk__in=ids)
        .annotate(reason=Subquery(latest.values("reason")[:1]), before=Subquery(latest.values("from_nodes")[:1]))
        .values_list("pk", "reason", "before")
        if reason is not None
    } if ids else {}
    return FleetView(catalog=catalog, nodes=nodes, pending=pending, shapes=shapes, memory=memory, last=last)


@dataclass(frozen=True)
class Plan:
    """A decision: its result, the history to store, and whether it acts (scales or records)."""

    result: AutoscaleResult
    history: ScalingHistory | None = None
    acts: bool = False


def _autoscale(pool: GpuNodePool, now: datetime, view: FleetView, *, dry_run: bool = False) -> Plan:
    """Decide, and unless `dry_run` act: scale, record, store the history. A dry run writes
    nothing: it says whether acting is needed (anything beyond storing the history), and
    returns the history to store when it is not."""
    spec = parse_document(pool.document, view.catalog)
    scaling = spec.autoscaling
    if scaling is None:
        return Plan(AutoscaleResult(pool=pool.name, claimed=True, reason="NotAutoscaled"))
    current, burst_count = view.nodes.get(pool.pk, (0, 0))
    baseline = current - burst_count
    burst_cap = spec.burst.max_nodes or spec.max_nodes
    upper = max(baseline, min(spec.max_nodes, baseline + burst_cap))
    pending = view.pending.get(pool.team_id, [])
    template = template_node(pool, spec)
    fits = view.shapes[pool.team_id].fitting(template) if pool.team_id in view.shapes else []
    metrics = {QUEUED_PODS: float(sum(len(group) for group in fits))}
    if pool.pk in view.memory:
        metrics[GPU_MEMORY] = view.memory[pool.pk]
    history = ScalingHistory.from_json(pool.scaling_history or None)
    decision = decide(spec=scaling, current=current, min_nodes=baseline, max_nodes=upper, metrics=metrics, history=history, now=now)
    shown = {m.name: m.value for m in decision.metrics}
    policy = decision.limiting_policy
    policy_text = f"{policy.type} {policy.value} per {policy.period_seconds}s" if policy else ""
    result = AutoscaleResult(pool=pool.name, claimed=True, current=current, desired=decision.desired, reason=decision.reason)
    # A limit that holds back the recommendation is recorded once (a Normal event), not each pass.
    limited = (
        decision.reason in ("ScaleUpLimit", "ScaleDownStabilized", "TooManyReplicas")
        and decision.raw_recommendation != current
        and view.last.get(pool.pk) != (decision.reason, current)
    )
    if dry_run:  # nothing below runs: it is the acting pass's, under the pool's claim
        acts = decision.desired != current or limited
        return Plan(result, acts=acts, history=None if acts else decision.history)
    if decision.desired > current:
        needed = nodes_needed([pod for group in fits for pod in group], template)
        add = min(decision.desired - current, needed)
        if add == 0:
            why = _why_not(pending, template) if pending else "no Pending pod"
            _record(pool, now, current, current, "NotTriggerScaleUp", f"Scale-up to {decision.desired} not done: no Pending pod would fit a new {spec.node_type} node of this pool ({why})", shown, policy_text, blocked=True)
            _store(pool, history.record(at=now, recommendation=decision.raw_recommendation))
            return Plan(AutoscaleResult(pool=pool.name, claimed=True, current=current, desired=current, reason="NotTriggerScaleUp"))
        with transaction.atomic():
            _burst_nodes_create(pool, now, add)
            _record(pool, now, current, current + add, "ScaledUp", f"Scaled up from {current} to {current + add} node(s) with {add} on-demand node(s): {decision.message}", shown, policy_text)
            _store(pool, decision.history if add == decision.delta else history.record(at=now, recommendation=decision.raw_recommendation, change=add))
        return Plan(AutoscaleResult(pool=pool.name, claimed=True, current=current, desired=current + add, reason="ScaledUp"))
    if decision.desired < current:
        live = list(pool.nodes.exclude(phase=Node.Phase.TERMINATED).filter(release_reason="").select_related("pool__node_type", "pool__gpu_model", "pool"))
        burst = [n for n in live if n.billing == Node.Billing.ON_DEMAND]
        victims = removable_burst_nodes(burst, live, pool, limit=len(live) - decision.desired)
        if not victims:
            _record(pool, now, len(live), len(live), "ScaleDownBlocked", f"Scale-down to {decision.desired} not done: every burst node runs pods that fit nowhere else", shown, policy_text, blocked=True)
            _store(pool, history.record(at=now, recommendation=decision.raw_recommendation))
            return Plan(AutoscaleResult(pool=pool.name, claimed=True, current=len(live), desired=len(live), reason="ScaleDownBlocked"))
        p = ReconcilePass(pool=pool, spec=spec, now=now, cloud=get_cloud_provider(), cluster=get_cluster_backend())
        if not real_cluster():  # a real cluster's pods are evicted by the drain and placed again by kube-scheduler
            with transaction.atomic():
                scheduler_lock()  # pods move like a scheduler bind: never at the same time as a pass
                for node, moves in victims:
                    _repack(pool, node, moves, now)
        for node, _ in victims:
            drain_start(p, node, reason=rules.SCALED_IN, event_reason="ScaledDown", message=f"Autoscaler removes burst node {node.name}: {decision.message}")
        _record(pool, now, len(live), len(live) - len(victims), "ScaledDown", f"Scaled down from {len(live)} to {len(live) - len(victims)} node(s): {decision.message}", shown, policy_text, emit=False)
        _store(pool, decision.history if len(victims) == -decision.delta else history.record(at=now, recommendation=decision.raw_recommendation, change=-len(victims)))
        return Plan(AutoscaleResult(pool=pool.name, claimed=True, current=len(live), desired=len(live) - len(victims), reason="ScaledDown"))
    if limited:
        _record(pool, now, current, current, decision.reason, decision.message, shown, policy_text)
    _store(pool, decision.history)
    return Plan(result)


def nodes_needed(pods: list[CorePod], template: NodeState) -> int:
    """How many new nodes the pods need, packed first-fit-decreasing on copies of the template."""
    nodes: list[NodeState] = []
    for pod in sorted(pods, key=lambda p: (-p.gpu_count, -p.gpu_milli, -p.cpu_milli, p.name)):
        for node in nodes:
            if filter_node(pod, node) is None:
                node.bind(pod, best_fit_gpus(pod, node.gpu_free))
                break
        else:
            node = template.clone()
            node.name = f"{template.name}-{len(nodes)}"
            if filter_node(pod, node) is None:
                node.bind(pod, best_fit_gpus(pod, node.gpu_free))
                nodes.append(node)
    return len(nodes)


@dataclass(frozen=True)
class Move:
    pod: Pod
    node: Node
    gpu_indices: tuple[int, ...]


def removable_burst_nodes(burst: list[Node], live: list[Node], pool: GpuNodePool, *, limit: int) -> list[tuple[Node, list[Move]]]:
    """Burst nodes that can go, with where their pods move: empty nodes first, then nodes whose
    pods all fit on the others — monthly nodes tried first, their capacity is paid already.
    Never more than `limit`; the moves of one choice are reserved before the next is tried."""
    running = list(Pod.objects.filter(node__in=live, phase=Pod.Phase.RUNNING))
    states = cluster_state(live, running)
    by_node: dict[int, list[Pod]] = {}
    for pod in running:
        by_node.setdefault(pod.node_id, []).append(pod)
    targets = sorted((n for n in live if n.phase == Node.Phase.READY and n.billing != Node.Billing.ON_DEMAND), key=lambda n: n.name)
    targets += sorted((n for n in live if n.phase == Node.Phase.READY and n.billing == Node.Billing.ON_DEMAND), key=lambda n: n.name)
    chosen: list[tuple[Node, list[Move]]] = []
    for node in sorted(burst, key=lambda n: (len(by_node.get(n.pk, [])), n.name)):
        if len(chosen) == limit:
            break
        leaving = {n.pk for n, _ in chosen} | {node.pk}
        moves = _place_elsewhere(by_node.get(node.pk, []), [t for t in targets if t.pk not in leaving], states)
        if moves is not None:
            chosen.append((node, moves))
    return chosen


def _place_elsewhere(pods: list[Pod], targets: list[Node], states: dict[str, NodeState]) -> list[Move] | None:
    """Where each pod goes (first target where every filter passes), binding it there so the
    next pod sees the space taken; None, and nothing bound, if one pod fits nowhere."""
    trial = {t.name: states[t.name].clone() for t in targets}
    moves = []
    for pod in pods:
        core = core_pod_of(pod)
        target = next((t for t in targets if filter_node(core, trial[t.name]) is None), None)
        if target is None:
            return None
        gpus = best_fit_gpus(core, trial[target.name].gpu_free)
        trial[target.name].bind(core, gpus)
        moves.append(Move(pod=pod, node=target, gpu_indices=tuple(gpus)))
    for name, state in trial.items():
        states[name] = state
    return moves


def _repack(pool: GpuNodePool, source: Node, moves: list[Move], now: datetime) -> None:
    """Move the pods of a burst node onto the capacity chosen for them before it is drained
    (issue 5 §4: monthly capacity is paid already). A pod that changed meanwhile is left to the drain."""
    for move in moves:
        if Pod.objects.filter(pk=move.pod.pk, phase=Pod.Phase.RUNNING, node=source).update(node=move.node, gpu_indices=list(move.gpu_indices), reason="Repacked"):
            event_record(pool=pool, node=move.node, reason="Repacked", now=now,
                         message=f"Pod {move.pod.key} moved from burst node {source.name} to {move.node.billing} node {move.node.name} before scale-down")  # fmt: skip


def _why_not(pending: list[CorePod], template: NodeState) -> str:
    reasons = {}
    for pod in pending[:20]:
        reason = filter_node(pod, template)
        if reason:
            reasons.setdefault(reason, []).append(pod.name)
    return "; ".join(f"{', '.join(keys[:3])}: {reason}" for reason, keys in reasons.items()) or "no Pending pod"


def _burst_nodes_create(pool: GpuNodePool, now: datetime, count: int) -> list[Node]:
    """`count` on-demand nodes, Ordering: the lifecycle controller buys and boots them."""
    return Node.objects.bulk_create(
        Node(pool=pool, name=name, billing=Node.Billing.ON_DEMAND, phase=Node.Phase.ORDERING, zone=pool.zone, gpu_count=pool.node_type.gpu_count, created_at=now)
        for name in node_names_next(pool, count)
    )  # fmt: skip


def _record(pool, now, before, after, reason, message, metrics, policy, *, blocked=False, emit=True) -> None:
    """A ScalingActivity and an event with the metric values. (A limited decision that repeats
    the last one recorded — the same limit, from the same size — is not recorded again: the
    caller checks `FleetView.last`.)"""
    ScalingActivity.objects.create(pool=pool, at=now, from_nodes=before, to_nodes=after, reason=reason, message=message, blocked=blocked, metrics=metrics, limiting_policy=policy)
    if emit:
        event_record(pool=pool, reason=reason, message=message, type=WARNING if blocked else "Normal", now=now)


def _store(pool: GpuNodePool, history: ScalingHistory) -> None:
    GpuNodePool.objects.filter(pk=pool.pk).update(scaling_history=history.to_json())


def histories_write(stores: list[tuple[GpuNodePool, ScalingHistory]], *, seen: ClaimsSeen) -> None:
    """The histories of pools whose decision changed nothing, in one UPDATE; a pool a worker
    holds meanwhile is skipped (it writes its own)."""
    pools_update({pool.pk: {"scaling_history": history.to_json()} for pool, history in stores}, seen=seen)
