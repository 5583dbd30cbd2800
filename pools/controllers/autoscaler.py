"""The live autoscaler: a monthly baseline plus on-demand burst nodes (seed D3, O4, G4; issue 5).

Every pass, for each pool with `burst.enabled` (by its `scaling` block, else the defaults of an
empty one: `PoolSpec.autoscaling`):
1. read its metrics from live state — GPU-memory utilisation from the node agents' latest
   reports (`monitoring`), queued pods = Pending pods that would fit one of the pool's nodes
   (expendable pods, below `EBCLOUD_EXPENDABLE_PODS_PRIORITY_CUTOFF`, left out);
2. ask the pure HPA core (`pools.core.autoscaling.decide`) for the node count, bounded below by the
   monthly nodes (paid for anyway, never removed here) and above by `nodeCount.max` and
   `burst.maxNodes`;
3. scale up only by the nodes Pending pods would actually use, as Cluster Autoscaler decides it
   (`pools.core.scale_up`): pods that fit the free capacity of the team's Ready nodes or its
   upcoming nodes (still being provisioned) buy nothing; the rest are packed onto template
   nodes of the pool; the GPU quotas (region-wide and the team's) cap the count. If no Pending
   pod fits a new node, do not scale and say why, once (Warning event + ScalingActivity); with
   no Pending pod at all, GPU memory alone buys nothing and says nothing;
4. scale down only burst nodes whose pods may all go (`pools.controllers.scale_down`),
   cordoned with the decision and their pods checked again before the drain (`_scale_down`);
   the lifecycle controller drains and releases them. A cordon whose drain never started (its
   pass stopped) is lifted by a later pass, whose scale-down decides again
   (`cordons_left_settle`). A pool that no longer bursts gives its burst nodes back by the
   same rules, at once (`_burst_off`). A Ready burst node that held no pod for the whole
   scale-down window goes even where HPA's arithmetic keeps the count: Cluster Autoscaler's
   unneeded-node rule, as the offline replay applies it (`_unneeded`).

Within one pass over every pool (`autoscale_all`) the pools are decided in the order they were
created (by id), and a pool's planned nodes count as upcoming nodes for the team's next pools:
the pool created first serves a pod that several pools of the team could take, and the others
do not buy a node for it too (CA expands one node group per pod). The order is the one the pass
has always walked, stable across renames and new pools; a team steers a pod to a given pool with
a node selector or affinity.

New burst nodes are Node rows in phase Ordering: the lifecycle controller provisions them like
any other node. The pass claims the pool with the lifecycle's claim, so reconcile and autoscale
never act on the same pool at once, whatever the number of workers; a scale-up decides and buys
under its team's row lock, so two workers deciding two pools of one team at once buy one node
for one pod too, the second seeing the first one's Ordering node as upcoming. It reads the
team's Pending pods again there, with the capacity and under the scheduler's lock: a pod bound
since the pass read the queue is counted once, where it runs, not also as Pending.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

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
from pools.controllers.node_sync import observe
from pools.controllers.provisioning import burst_cancel
from pools.controllers.scale_down import (
    PodsRecheck,
    Removable,
    removable_burst_nodes,
    repack,
)
from pools.controllers.scale_down_cordons import cordons_left_settle, decision_cordon
from pools.controllers.scheduler import scheduler_lock
from pools.controllers.state import pools_update
from pools.core import lifecycle as rules
from pools.core.autoscaling import (
    READY_FOR_NEW_SCALE,
    SCALE_DOWN_UNNEEDED,
    ScalingDecision,
    burst_ceiling,
    decide,
    unneeded_removals,
)
from pools.core.durations import format_duration
from pools.core.scale_up import QuotaRooms, QuotaScope, scale_up_need
from pools.core.scaling_history import ScalingHistory
from pools.core.scheduling.nodes import NodeState, filter_node
from pools.core.scheduling.nodes import Pod as CorePod
from pools.core.spec import parse_document
from pools.core.stall_messages import QUOTA_EXCEEDED
from pools.models import GpuNodePool, Node, ScalingActivity, Team
from pools.providers import get_cloud_provider, get_cluster_backend, real_cluster
from pools.selectors.autoscaler_view import FleetView, fleet_view, queues_read, scale_up_inputs_load
from pools.selectors.queue import template_node
from pools.services.events import WARNING, event_record
from pools.services.pools import quota_limits_lock

logger = logging.getLogger("ebcloud.autoscaler")
GPU_MEMORY = "gpu-memory"
QUEUED_PODS = "queued_pods"
NOT_TRIGGER_SCALE_UP = "NotTriggerScaleUp"
SCALE_DOWN_BLOCKED = "ScaleDownBlocked"
BURST_DISABLED = "BurstDisabled"
LIMITING_POLICY_LENGTH = ScalingActivity._meta.get_field("limiting_policy").max_length  # PostgreSQL refuses a longer one


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
    (`fleet_view`) and each pool is decided in memory; the pools that would scale up then read
    the room their teams' pools have and the GPU quotas, once for all of them
    (`scale_up_inputs_load`), and are decided again in id order, each one's planned nodes
    counting as upcoming for the next. A pool whose decision changes nothing costs no statement
    of its own: the stored histories are written with one UPDATE. Pools that scale or record a
    blocked or limited decision are claimed together (the lifecycle's claim, so reconcile and
    autoscale never act on one pool at once) and decided again on fresh rows by the per-pool
    pass before they act (a scale-up on its team's Pending pods and its scale-up inputs read
    again together, under its team's lock and the scheduler's).
    With `part`, only that part's pools (`pools.claims.Part`), as the lifecycle controller
    splits its pass.
    """
    now = now or timezone.now()
    live = part.of(GpuNodePool.objects.active().exclude(phase=GpuNodePool.Phase.DELETING), "pk")
    pools = list(live.select_related(*POOL_RELATED).order_by("pk"))
    seen = claims_seen(p.pk for p in pools)
    busy = seen.busy
    view = fleet_view([p for p in pools if p.pk not in busy])
    plans = _dry_runs([p for p in pools if p.pk not in busy], now, view)
    wanting = [p for p in pools if p.pk in plans and plans[p.pk].needs_inputs]
    if wanting:
        scale_up_inputs_load(view.inputs, wanting, view.catalog)
        plans.update(_dry_runs(wanting, now, view))
    results: dict[int, AutoscaleResult] = {}
    acting, stores = [], []
    for pool in pools:
        plan = plans.get(pool.pk)
        if plan is None:
            continue
        if plan.acts or view.cordoned.get(pool.pk):  # a cordon a stopped pass left is settled under the claim
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


def _dry_runs(pools: list[GpuNodePool], now: datetime, view: FleetView) -> dict[int, Plan]:
    """Each pool's decision, writing nothing; a pool whose decision fails is left out."""
    plans = {}
    for pool in pools:
        try:
            plans[pool.pk] = _autoscale(pool, now, view, dry_run=True)
        except Exception:  # one broken pool must not stop the others; the next pass retries
            logger.exception("autoscale of pool %s failed", pool.name)
    return plans


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


@dataclass(frozen=True)
class Plan:
    """A decision: its result, the history to store, whether it acts (scales or records), and
    whether it needs the scale-up inputs to know (a dry run before they are read)."""

    result: AutoscaleResult
    history: ScalingHistory | None = None
    acts: bool = False
    needs_inputs: bool = False  # a scale-up: its pool reads the scale-up inputs


@dataclass(frozen=True)
class _Decided:
    """One pool's decision, with what acting on it needs."""

    pool: GpuNodePool
    now: datetime
    view: FleetView
    decision: ScalingDecision
    history: ScalingHistory  # as stored before this pass
    current: int
    template: NodeState
    shown: dict
    policy_text: str

    @property
    def result(self) -> AutoscaleResult:
        return AutoscaleResult(pool=self.pool.name, claimed=True, current=self.current, desired=self.decision.desired, reason=self.decision.reason)

    def quiet(self, reason: str, *, dry_run: bool, current: int | None = None) -> Plan:
        """Nothing to do or to say: the recommendation is stored (for the stabilization
        windows), no node changes and nothing is recorded."""
        history = self.history.record(at=self.now, recommendation=self.decision.raw_recommendation)
        current = self.current if current is None else current
        result = AutoscaleResult(pool=self.pool.name, claimed=True, current=current, desired=current, reason=reason)
        if dry_run:
            return Plan(result, history=history)
        _store(self.pool, history)
        return Plan(result)

    def blocked(self, reason: str, message: str, *, current: int | None = None, policy: str | None = None) -> Plan:
        """A decision that could not be carried out: recorded (a Warning), the recommendation stored."""
        current = self.current if current is None else current
        _record(self.pool, self.now, current, current, reason, message, self.shown, self.policy_text if policy is None else policy, blocked=True)
        _store(self.pool, self.history.record(at=self.now, recommendation=self.decision.raw_recommendation))
        return Plan(AutoscaleResult(pool=self.pool.name, claimed=True, current=current, desired=current, reason=reason))

    def said_already(self, reason: str, current: int | None = None, detail: str | None = None) -> bool:
        """Whether the pool's latest activity is this blocked reason from the same size (and,
        given `detail`, its message ends with it in parentheses): said once, as a limit that
        holds a decision back is, not every pass."""
        last = self.view.last.get(self.pool.pk)
        same = last is not None and last[:2] == (reason, self.current if current is None else current)
        return same and (detail is None or last[2].endswith(f"({detail})"))


def _autoscale(pool: GpuNodePool, now: datetime, view: FleetView, *, dry_run: bool = False) -> Plan:
    """Decide, and unless `dry_run` act: scale, record, store the history. A dry run writes
    nothing: it says whether acting is needed (anything beyond storing the history), and
    returns the history to store when it is not."""
    spec = parse_document(pool.document, view.catalog)
    if not dry_run and view.cordoned.get(pool.pk):
        cordons_left_settle(pool, now)  # lifted only: no node leaves, the view's counts hold
    scaling = spec.autoscaling
    if scaling is None:
        return _burst_off(pool, spec, now, view, dry_run=dry_run)
    current, burst_count = view.nodes.get(pool.pk, (0, 0))
    baseline = current - burst_count
    upper = burst_ceiling(baseline=baseline, max_nodes=spec.max_nodes, burst_max_nodes=spec.burst.max_nodes)
    pending = view.pending.get(pool.team_id, [])
    template = template_node(pool, spec, daemon_sets=view.daemon_sets.get(pool.pk, ()))
    fits = view.shapes[pool.team_id].fitting(template) if pool.team_id in view.shapes else []
    metrics = {QUEUED_PODS: float(sum(len(group) for group in fits))}
    if pool.pk in view.memory:
        metrics[GPU_MEMORY] = view.memory[pool.pk]
    history = ScalingHistory.from_json(pool.scaling_history or None)
    decision = decide(spec=scaling, current=current, min_nodes=baseline, max_nodes=upper, metrics=metrics, history=history, now=now)
    shown = {m.name: m.value for m in decision.metrics}
    policy = decision.limiting_policy
    policy_text = f"{policy.type} {policy.value} per {policy.period_seconds}s" if policy else ""
    d = _Decided(pool=pool, now=now, view=view, decision=decision, history=history, current=current, template=template, shown=shown, policy_text=policy_text)
    if decision.desired > current:
        return _scale_up(d, [pod for group in fits for pod in group], pending, dry_run=dry_run)
    if decision.desired < current:
        return Plan(d.result, acts=True) if dry_run else _scale_down(d, spec)
    if unneeded := _unneeded(d, scaling, baseline):
        removal, idle = unneeded
        return Plan(d.result, acts=True) if dry_run else _scale_down(removal, spec, only=idle)
    # A limit that holds back the recommendation is recorded once (a Normal event), not each pass.
    limited = (
        decision.reason in ("ScaleUpLimit", "ScaleDownStabilized", "TooManyReplicas")
        and decision.raw_recommendation != current
        and not d.said_already(decision.reason)
    )
    if dry_run:  # nothing below runs: it is the acting pass's, under the pool's claim
        return Plan(d.result, acts=limited, history=None if limited else decision.history)
    if limited:
        _record(pool, now, current, current, decision.reason, decision.message, shown, policy_text)
    _store(pool, decision.history)
    return Plan(d.result)


def _unneeded(d: _Decided, scaling, baseline: int) -> tuple[_Decided, set[int]] | None:
    """The decision again as a scale-down of the burst nodes idle for the whole scale-down
    window (Cluster Autoscaler's unneeded-node rule, `burst_idle`), with those nodes, when HPA's
    arithmetic keeps the count and the scale-down policies let some go (`unneeded_removals`);
    None otherwise. The removal is stored in the history like any scale event, as the offline
    replay does."""
    window = scaling.scale_down.stabilization_window_seconds
    due = [pk for since, pk in d.view.idle.get(d.pool.pk, ()) if since <= d.now - timedelta(seconds=window)]
    count = unneeded_removals(due=len(due), current=d.current, baseline=baseline, rules=scaling.scale_down, history=d.history, now=d.now) if due else 0
    if not count:
        return None
    decision = replace(
        d.decision, desired=d.current - count, reason=SCALE_DOWN_UNNEEDED,
        message=f"{count} burst node(s) held no pod for the scale-down window ({format_duration(window)})",
        history=d.history.record(at=d.now, recommendation=d.decision.raw_recommendation, change=-count),
    )  # fmt: skip
    return replace(d, decision=decision), set(due)


def _scale_up(d: _Decided, fits: list[CorePod], pending: list[CorePod], *, dry_run: bool) -> Plan:
    """Add the on-demand nodes the Pending pods that fit the pool would use (`_buy`); acting,
    decided again on the team's Pending pods and scale-up inputs read together, under locks."""
    pool, view = d.pool, d.view
    if dry_run:
        if not fits:
            return _no_fit(d, pending, dry_run=True)
        return _buy(d, fits, dry_run=True) if view.inputs.has(pool) else Plan(d.result, acts=True, needs_inputs=True)
    with transaction.atomic():
        # Decided again on what the team has, holds and waits for now, under the quota rows'
        # locks (as every writer of orders takes them) and the team's: another worker, or an
        # order, may have bought since the pass read. The Pending pods are read again with the
        # capacity, under the scheduler's lock: a pod bound since the pass read the queue would
        # count twice, Pending and on its node. (kube-scheduler binds without that lock: the
        # queue is read last, so such a pod counts nowhere this pass rather than twice.)
        quota_limits_lock(region=pool.zone.region, gpu_model_id=pool.gpu_model_id, team_id=pool.team_id)
        _team_lock(pool.team_id)
        scheduler_lock()
        scale_up_inputs_load(view.inputs, [pool], view.catalog)
        queues, shapes = queues_read([pool.team_id])
        groups = shapes[pool.team_id].fitting(d.template) if pool.team_id in shapes else []
        fits, pending = [pod for group in groups for pod in group], queues.get(pool.team_id, [])
        if not fits:
            return _no_fit(d, pending, dry_run=False)
        return _buy(d, fits, dry_run=False)


def _no_fit(d: _Decided, pending: list[CorePod], *, dry_run: bool) -> Plan:
    """No Pending pod fits a new node of the pool: with none waiting, a hot pool buys nothing
    and says nothing; else why not, once."""
    if not pending:
        return d.quiet("NoPendingPods", dry_run=dry_run)
    why = _why_not(pending, d.template)  # said again when the pods or their reasons change (Cluster Autoscaler tells each pod)
    if d.said_already(NOT_TRIGGER_SCALE_UP, detail=why):
        return d.quiet(NOT_TRIGGER_SCALE_UP, dry_run=dry_run)
    if dry_run:
        return Plan(d.result, acts=True)
    return d.blocked(NOT_TRIGGER_SCALE_UP, f"Scale-up to {d.decision.desired} not done: no Pending pod would fit a new {d.pool.node_type.name} node of this pool ({why})")


def _team_lock(team_id: int) -> None:
    """Serialise the scale-ups of a team's pools across workers: two workers deciding two of
    its pools at once would each buy a node for the same Pending pod (within one pass, the
    earlier pool's planned nodes are upcoming for the next; across workers only the row lock
    makes the second wait for the first one's Ordering nodes, read after it). The lock order
    is that of the writers of orders with the team's row inserted: the quota rows (region-wide
    first), the team's row, the pool's row (its history written), its orders; nothing else
    locks a team's row, so no cycle. FOR NO KEY UPDATE: a row that refers to the team (a pod
    submitted, a pool created) takes only a key-share lock on it and does not wait."""
    Team.objects.select_for_update(no_key=True).only("pk").get(pk=team_id)


def _buy(d: _Decided, fits: list[CorePod], *, dry_run: bool) -> Plan:
    """The scale-up from the scale-up inputs (`view.inputs`, read for the pool): the nodes the
    pods need beyond the team's free and upcoming room (`scale_up_need`), no more than the
    metrics ask for nor than the GPU quotas allow. Unless `dry_run`, buy them."""
    pool, inputs, decision, current = d.pool, d.view.inputs, d.decision, d.current
    region, team_id, gpus = pool.zone.region, pool.team_id, pool.node_type.gpu_count
    if inputs.capacity[team_id].backoff(pool.pk, d.now) is not None:  # a burst node of it was given up: the team's next pools buy
        return d.quiet("ScaleUpBackoff", dry_run=dry_run)
    wanted = min(decision.desired - current, scale_up_need(fits, d.template, inputs.capacity[team_id]).new_nodes)
    if wanted == 0:  # every pod fits free capacity or an upcoming node: the scheduler places it there
        return d.quiet("PodsFitUpcomingOrFreeCapacity", dry_run=dry_run)
    allowed, scope = inputs.quotas.nodes_allowed(region, pool.gpu_model_id, team_id, gpus)
    add = min(wanted, allowed)
    if add == 0:
        if d.said_already(QUOTA_EXCEEDED):
            return d.quiet(QUOTA_EXCEEDED, dry_run=dry_run)
        if dry_run:
            return Plan(d.result, acts=True, needs_inputs=True)
        quota = _quota_text(pool, inputs.quotas, scope)
        return d.blocked(QUOTA_EXCEEDED, f"Scale-up to {decision.desired} not done: {wanted} on-demand node(s) of {gpus} GPU(s) would pass the {quota}", policy=_quota_name(pool, scope))
    inputs.capacity[team_id].plan_nodes(d.template, add)  # the team's next pools see these nodes as upcoming,
    inputs.quotas.take(region, pool.gpu_model_id, team_id, add * gpus)  # and their GPUs as taken
    if dry_run:
        return Plan(d.result, acts=True, needs_inputs=True)
    capped = f"; {wanted - add} more would pass the {_quota_text(pool, inputs.quotas, scope)}" if add < wanted else ""
    _burst_nodes_create(pool, d.now, add)
    message = f"Scaled up from {current} to {current + add} node(s) with {add} on-demand node(s){capped}: {decision.message}"
    _record(pool, d.now, current, current + add, "ScaledUp", message, d.shown, _quota_name(pool, scope) if capped else d.policy_text)
    _store(pool, decision.history if add == decision.delta else d.history.record(at=d.now, recommendation=decision.raw_recommendation, change=add))
    return Plan(AutoscaleResult(pool=pool.name, claimed=True, current=current, desired=current + add, reason="ScaledUp"))


def _quota_name(pool: GpuNodePool, scope: QuotaScope | None) -> str:
    """The quota that limits a scale-up, short enough for the activity's limiting policy (the
    message says the numbers)."""
    return f"GPU quota of team {pool.team.slug}" if scope is not None and scope[2] is not None else "GPU quota"


def _quota_text(pool: GpuNodePool, rooms: QuotaRooms, scope: QuotaScope | None) -> str:
    """The quota that limits a scale-up, in words and numbers."""
    if scope is None:
        return "GPU quota"
    region, _, team_id = scope
    whose = f" of team {pool.team.slug}" if team_id is not None else ""
    if scope not in rooms.limits:
        return f"GPU quota: there is none for {pool.gpu_model.name} in {region}; ask a platform admin for one"
    return f"GPU quota{whose} for {pool.gpu_model.name} in {region}: {rooms.in_use.get(scope, 0)} of {rooms.limits[scope]} GPU(s) in use"


def _scale_down(d: _Decided, spec, *, only: set[int] | None = None) -> Plan:
    """Remove the burst nodes that may go (`removable_burst_nodes`; of `only`, when given, the
    idle ones the unneeded-node rule chose, `_unneeded`); in the simulated cluster
    their pods move first, planned and moved under the scheduler's lock, so that a scheduler
    pass that committed meanwhile is seen by the plan. The nodes chosen are cordoned in the
    plan's transaction (`decision_cordon`), as Cluster Autoscaler taints a node ToBeDeletedByClusterAutoscaler
    as part of its decision, and the drain checks their pods again once the cluster has them
    cordoned (`PodsRecheck`): a node a pod keeps now is uncordoned, said as ScaleDownBlocked. A
    pass that stops between the two leaves the cordon to the next (`cordons_left_settle`)."""
    pool, now, decision = d.pool, d.now, d.decision

    def plan() -> tuple[list[Node], Removable]:
        live = list(pool.nodes.exclude(phase=Node.Phase.TERMINATED).filter(release_reason="").select_related("pool__node_type", "pool__gpu_model", "pool"))
        burst = [n for n in live if n.billing == Node.Billing.ON_DEMAND and (only is None or n.pk in only)]
        pending = [pod for pods in d.view.pending.values() for pod in pods]  # they keep the nodes they would be scheduled on
        seen = observe(cluster, [n.name for n in burst if n.ready_at is not None])  # their annotations and cordons
        return live, removable_burst_nodes(burst, live, limit=len(live) - decision.desired, pending=pending, empty=only is not None, seen=seen)

    cluster = get_cluster_backend()

    if real_cluster():  # a real cluster's pods are evicted by the drain and placed again by kube-scheduler
        live, removable = plan()
        cordoned = decision_cordon(pool, [node for node, _ in removable.chosen], now)
    else:
        with transaction.atomic():
            scheduler_lock()  # pods move like a scheduler bind: never at the same time as a pass
            live, removable = plan()
            for node, moves in removable.chosen:
                repack(pool, node, moves, now)
            cordoned = decision_cordon(pool, [node for node, _ in removable.chosen], now)
    victims = removable.chosen
    if not victims:
        if d.said_already(SCALE_DOWN_BLOCKED, len(live)):
            return d.quiet(SCALE_DOWN_BLOCKED, dry_run=False, current=len(live))
        kept = "; ".join(f"{name}: {why}" for name, why in removable.kept.items()) or "no burst node to remove"
        return d.blocked(SCALE_DOWN_BLOCKED, f"Scale-down to {decision.desired} not done: every burst node is kept ({kept})", current=len(live))
    p = ReconcilePass(pool=pool, spec=spec, now=now, cloud=get_cloud_provider(), cluster=cluster)
    recheck, cancelled = PodsRecheck(cluster, victims), {}
    for node, _ in victims:
        message = f"Autoscaler removes burst node {node.name}: {decision.message}"
        if why := drain_start(p, node, reason=rules.SCALED_IN, event_reason="ScaledDown", message=message, recheck=recheck):
            cancelled[node.name] = why
    if cancelled:  # the nodes that stay take pods again
        recheck.cordons_lift([n for n, _ in victims if n.name in cancelled])
        Node.objects.filter(pk__in=[n.pk for n, _ in victims if n.name in cancelled and n.pk in cordoned], release_reason="").update(unschedulable=False)
        said = "; ".join(f"{name}: {why}" for name, why in cancelled.items())
        if len(cancelled) == len(victims):
            return d.blocked(SCALE_DOWN_BLOCKED, f"Scale-down to {decision.desired} cancelled, the node(s) uncordoned: a pod now on them keeps them ({said})", current=len(live))
        p.event(SCALE_DOWN_BLOCKED, f"Scale-down of {len(cancelled)} burst node(s) cancelled, the node(s) uncordoned: a pod now on them keeps them ({said})", type=WARNING)
    removed = len(victims) - len(cancelled)
    _record(pool, now, len(live), len(live) - removed, "ScaledDown", f"Scaled down from {len(live)} to {len(live) - removed} node(s): {decision.message}", d.shown, d.policy_text, emit=False)
    _store(pool, decision.history if removed == -decision.delta else d.history.record(at=now, recommendation=decision.raw_recommendation, change=-removed))
    return Plan(AutoscaleResult(pool=pool.name, claimed=True, current=len(live), desired=len(live) - removed, reason="ScaledDown"))


def _burst_off(pool: GpuNodePool, spec, now: datetime, view: FleetView, *, dry_run: bool) -> Plan:
    """A pool that no longer bursts (`burst.enabled: false`, or no `scaling` block nor
    `burst.enabled: true`) gives its on-demand nodes back, as Cluster Autoscaler brings a node
    group whose max was lowered below its size down to it: here the monthly baseline, never
    lower. By the scale-down's rules (`_scale_down`: a node a pod keeps stays, said once, and is
    tried again every pass), but at once: the window and policies were the policy turned off
    (HPA too goes to a lowered max at once). Its burst nodes not Ready yet, which those rules
    never take, are cancelled first (`burst_cancel`), as CA's lowered target size deletes
    unregistered nodes. A pool without burst nodes costs nothing."""
    current, burst = view.nodes.get(pool.pk, (0, 0))
    if burst == 0:
        return Plan(AutoscaleResult(pool=pool.name, claimed=True, reason="NotAutoscaled"))
    baseline = current - burst
    why = "spec.burst.enabled is false" if spec.burst.enabled is False else "the pool has no spec.scaling block and spec.burst.enabled is not set"
    history = ScalingHistory.from_json(pool.scaling_history or None)
    decision = ScalingDecision(
        current=current, desired=baseline, reason=BURST_DISABLED, raw_recommendation=baseline, stabilized=baseline, metrics=(),
        message=f"burst is off ({why}): its on-demand nodes are given back, {current} -> {baseline} nodes",
        able_to_scale_reason=READY_FOR_NEW_SCALE, scaling_limited_reason=BURST_DISABLED, history=history.record(at=now, change=baseline - current),
    )  # fmt: skip
    d = _Decided(pool=pool, now=now, view=view, decision=decision, history=history, current=current, template=template_node(pool, spec), shown={}, policy_text="")
    if dry_run:
        return Plan(d.result, acts=True)
    p = ReconcilePass(pool=pool, spec=spec, now=now, cloud=get_cloud_provider(), cluster=get_cluster_backend())
    if cancelled := burst_cancel(p, decision.message):  # not Ready yet: cancelled at once, never bought or billed on
        after = current - len(cancelled)
        _record(pool, now, current, after, "ScaledDown", f"Cancelled {len(cancelled)} burst node(s) not Ready yet ({', '.join(cancelled)}): {decision.message}", {}, "", emit=False)
        if after == baseline:
            _store(pool, decision.history)
            return Plan(AutoscaleResult(pool=pool.name, claimed=True, current=current, desired=after, reason="ScaledDown"))
        d = replace(d, current=after)
    return _scale_down(d, spec)


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
    """A ScalingActivity and an event with the metric values. (A limited or blocked decision
    that repeats the last one recorded — the same reason, from the same size — is not recorded
    again: the caller checks `FleetView.last`.)"""
    ScalingActivity.objects.create(pool=pool, at=now, from_nodes=before, to_nodes=after, reason=reason, message=message, blocked=blocked, metrics=metrics, limiting_policy=policy[:LIMITING_POLICY_LENGTH])
    if emit:
        event_record(pool=pool, reason=reason, message=message, type=WARNING if blocked else "Normal", now=now)


def _store(pool: GpuNodePool, history: ScalingHistory) -> None:
    GpuNodePool.objects.filter(pk=pool.pk).update(scaling_history=history.to_json())


def histories_write(stores: list[tuple[GpuNodePool, ScalingHistory]], *, seen: ClaimsSeen) -> None:
    """The histories of pools whose decision changed nothing, in one UPDATE; a pool a worker
    holds meanwhile is skipped (it writes its own)."""
    pools_update({pool.pk: {"scaling_history": history.to_json()} for pool, history in stores}, seen=seen)
