"""The scheduler pass: load nodes and pods, run the pure core, write binds and events (seed O3, T2).

One pass, in one transaction, in a constant number of queries whatever the number of pods:

1. take the binders' advisory lock (PostgreSQL), so two workers' passes run one after the other
   and never oversubscribe a node; load the live nodes and the Pending and Running pods;
2. finish Running pods whose duration has elapsed (`Succeeded`, event `Completed`);
3. requeue Running pods whose node is gone (Pending, event `NodeLost`), and those a NoExecute
   taint of their node evicts
   (event `TaintManagerEviction`, as Kubernetes' taint manager deletes them: at once when no
   toleration tolerates the taint, else once the shortest `tolerationSeconds` ran out since the
   taint's `timeAdded`; `pools.core.scheduling.taint_eviction`, and no PodDisruptionBudget
   applies). Pods on `Unknown` nodes keep running (seed D1: a missing heartbeat never evicts,
   and no NoExecute not-ready taint is implied). A draining node's pods are not requeued here:
   the drain evicts them through the cluster's Eviction API, which their disruption budgets may
   refuse (pools/controllers/exits.py);
4. place Pending pods, highest priority first (then oldest): every feasible node is scored by its
   own pool's `schedulingPolicy`; the best wins (ties: smallest node name). A pod that fits
   nowhere may preempt strictly lower-priority pods on one node (`pools.core.scheduling.preempt`):
   the victims return to Pending (event `Preempted` on their node), the preemptor is bound
   (events `Preempting`, `Scheduled`). A pod that still fits nowhere keeps the kube-scheduler
   explanation and the hints on its row (reason `Unschedulable`);
5. write: binds by a conditional UPDATE on `phase = Pending` (a pod is never bound twice),
   requeues (each Pending again since this pass: `Pod.pending_since`) and completions by
   conditional UPDATEs on `phase = Running`, explanations by one bulk update, events by one
   bulk insert. After the transaction, NoExecute taints that have no `timeAdded` yet get this
   pass's time on their Node rows (`_date_noexecute_taints`).

On a real cluster (`EBCLOUD_CLUSTER=kubernetes`) kube-scheduler binds and the kubelets run and
finish the pods: the pass keeps the team-isolation policy and the PriorityClasses in step
(pools/controllers/cluster_sync.py) and adds our hints to kube-scheduler's verdicts
(pools/controllers/pending_hints.py).
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import (
    CharField,
    JSONField,
    TextField,
    Value,
)
from django.utils import timezone

from pools.controllers.cluster_sync import admission_policy_sync, priority_classes_sync
from pools.controllers.pending_hints import OrderCatalog, pending_hints, pending_hints_write
from pools.core.durations import format_duration
from pools.core.scheduling.fragmentation import workload_from_pods
from pools.core.scheduling.nodes import (
    NodeState,
    filter_node,
    soft_penalty,
)
from pools.core.scheduling.nodes import Pod as CorePod
from pools.core.scheduling.policies import policy_for
from pools.core.scheduling.preempt import preempt
from pools.core.scheduling.taint_eviction import (
    EVICTION_REASON,
    Eviction,
    eviction_explanation,
    eviction_message,
    has_noexecute,
    noexecute_eviction,
    timed_taints,
    timed_tolerations,
    with_time_added,
)
from pools.models import Node, PoolEvent
from pools.models.pods import Pod
from pools.providers import get_cluster_backend, real_cluster
from pools.providers.kubernetes import CLUSTER_UNREACHABLE
from pools.selectors.cluster import cluster_state, core_pod_or_fault, live_nodes, log_unreadable
from pools.services.pod_placements import placements_end
from pools.services.pods import by_pk, pods_bind

logger = logging.getLogger("ebcloud.scheduler")

SCHEDULER_LOCK_KEY = 0x5EB_C10D  # pg_advisory_xact_lock key of the pod binders


@dataclass
class PassResult:
    scheduled: list[str] = field(default_factory=list)
    unschedulable: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    succeeded: list[str] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)




def scheduler_lock() -> None:
    """Serialize whatever binds or moves pods (scheduler passes, repack applies) on PostgreSQL,
    until the transaction ends: a transaction-scoped advisory lock, so node rows stay free for
    the lifecycle controller. SQLite allows one writer at a time anyway."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [SCHEDULER_LOCK_KEY])


class _Scorer:
    """Scores a node with its own pool's policy, so each pool keeps its packing rule."""

    def __init__(self, states: dict[str, NodeState], nodes: list[Node], workload) -> None:
        by_pool: dict[str, list[NodeState]] = defaultdict(list)
        policies: dict[str, str] = {}
        for node in nodes:
            by_pool[node.pool.name].append(states[node.name])
            policies[node.pool.name] = node.pool.scheduling_policy
        self.policies = {
            name: policy_for(policies[name], nodes=members, workload=workload) for name, members in by_pool.items()
        }

    def best(self, pod: CorePod, states: list[NodeState]) -> tuple[str, tuple[int, ...]] | None:
        best = None
        for node in states:
            if filter_node(pod, node) is not None:
                continue
            score, gpus = self.policies[node.pool].score(pod, node)
            entry = (soft_penalty(pod, node), -score, node.name, gpus)
            if best is None or entry[:3] < best[:3]:
                best = entry
        return None if best is None else (best[2], best[3])


class _Events:
    def __init__(self, now: datetime) -> None:
        self.now, self.rows = now, []  # (pod key, event)

    def add(self, node: Node, reason: str, message: str, type: str = PoolEvent.Type.NORMAL, *, pod: str = "") -> None:
        event = PoolEvent(
            pool_id=node.pool_id, node=node, type=type, reason=reason, message=message,
            first_timestamp=self.now, last_timestamp=self.now,
        )  # fmt: skip
        self.rows.append((pod, event))

    def drop(self, pods: set[str]) -> None:
        self.rows = [(pod, event) for pod, event in self.rows if pod not in pods]

    def save(self) -> None:
        if self.rows:
            PoolEvent.objects.bulk_create([event for _, event in self.rows])


def scheduler_pass(*, now: datetime | None = None) -> PassResult:
    """One pass over every live node and every Pending/Running pod (see the module docstring)."""
    now = now or timezone.now()
    if real_cluster():  # kube-scheduler binds (see the module docstring)
        for sync in (admission_policy_sync, priority_classes_sync):
            try:
                sync()
            except CLUSTER_UNREACHABLE as exc:  # the API server is away or unset: the next pass retries
                logger.warning("%s: the cluster could not be read or written: %s", sync.__name__, exc)
            except Exception:  # anything else (an object the read model refuses): logged, and the other steps still run
                logger.exception("%s failed; the next pass retries", sync.__name__)
        return PassResult(unschedulable=pending_hints_write(now=now))
    result = PassResult()
    with transaction.atomic():
        scheduler_lock()
        nodes = live_nodes()
        pods = list(Pod.objects.filter(phase__in=(Pod.Phase.PENDING, Pod.Phase.RUNNING)).select_related("team").order_by("-priority", "submitted_at", "id"))
        by_id = {n.pk: n for n in nodes}
        by_name = {n.name: n for n in nodes}
        pools = {n.pool.name: n.pool for n in nodes}
        events = _Events(now)

        running = [p for p in pods if p.phase == Pod.Phase.RUNNING]
        done = [p for p in running if p.node_id in by_id and _elapsed(p, now)]
        lost = [p for p in running if p.node_id not in by_id]
        done_ids = {p.pk for p in done}
        gone_ids = set(done_ids)
        tainted = _taint_evictions([p for p in running if p.pk not in gone_ids and p.node_id in by_id], by_id, now)
        gone_ids |= {p.pk for p, _ in tainted}
        states = cluster_state(nodes, [p for p in running if p.pk not in gone_ids])
        for pod in done:
            events.add(by_id[pod.node_id], "Completed", f"Pod {pod.key} succeeded after {_fmt(pod.duration_seconds)}; released {_resources(pod)}")
            result.succeeded.append(pod.key)
        lost_nodes = {n.pk: n for n in Node.objects.filter(pk__in={p.node_id for p in lost if p.node_id}).select_related("pool")} if lost else {}
        requeue: dict[int, tuple[str, str]] = {}
        for pod in lost:
            requeue[pod.pk] = ("NodeLost", "The pod's node left the cluster; the pod is Pending again.")
            if pod.node_id in lost_nodes:
                events.add(lost_nodes[pod.node_id], "NodeLost", f"Pod {pod.key} requeued: node {lost_nodes[pod.node_id].name} is {lost_nodes[pod.node_id].phase}", PoolEvent.Type.WARNING)
            result.requeued.append(pod.key)
        for pod, eviction in tainted:  # the taint manager deletes the pod; its owner would create it again
            node = by_id[pod.node_id]
            requeue[pod.pk] = (EVICTION_REASON, eviction_explanation(node.name, eviction))
            events.add(node, EVICTION_REASON, eviction_message(pod.key, node.name, eviction), PoolEvent.Type.WARNING)
            result.requeued.append(pod.key)

        core, unreadable = _core_pods([p for p in pods if p.phase == Pod.Phase.PENDING])
        pending = [p for p in pods if p.pk in core]
        explanations: list[Pod] = []
        for pod, fault in unreadable:  # told once; every pass then leaves it waiting, and the others go on
            if pod.reason != UNREADABLE_REASON:
                pod.explanation, pod.hints, pod.reason = unreadable_message(fault), [], UNREADABLE_REASON
                explanations.append(pod)
        observed = [b.pod for s in states.values() for b in s.bound.values()] + list(core.values())
        scorer = _Scorer(states, nodes, workload_from_pods(observed) if observed else None)
        ordered_states = [states[n.name] for n in nodes]
        row_of = {p.key: p for p in running}
        binds: dict[int, tuple[int, tuple[int, ...]]] = {}
        catalog = OrderCatalog()
        budgets = None  # the running pods' disruption budgets, read once, when a pod first needs to preempt
        for pod in pending:
            cpod = core[pod.pk]
            choice = scorer.best(cpod, ordered_states)
            if choice is None:
                if budgets is None and cpod.may_preempt:
                    budgets = get_cluster_backend().disruption_budgets(pods={p.key: p.labels or {} for p in row_of.values()})
                plan = preempt(cpod, ordered_states, budgets or ())
                if plan is not None:
                    target = by_name[plan.node]
                    names = []
                    for victim in plan.victims:
                        states[plan.node].unbind(victim.name)
                        row = row_of[victim.name]
                        requeue[row.pk] = ("Preempted", f"Preempted by {pod.key} (priority {pod.priority}) on node {plan.node}; the pod is Pending again.")
                        events.add(target, "Preempted", f"Pod {victim.name} (priority {victim.priority}{', checkpointable' if victim.checkpointable else ''}) preempted by {pod.key} (priority {pod.priority})", PoolEvent.Type.WARNING)
                        result.preempted.append(victim.name)
                        names.append(victim.name)
                    events.add(target, "Preempting", f"Pod {pod.key} (priority {pod.priority}) preempts {len(names)} lower-priority pod(s) on {plan.node}: {', '.join(names)}", pod=pod.key)
                    choice = (plan.node, plan.gpu_indices)
            if choice is None:
                verdict = pending_hints(cpod, ordered_states, pools, pod.team.slug, catalog)
                if pod.explanation != verdict.message or pod.hints != verdict.hints or pod.reason != "Unschedulable":
                    pod.explanation, pod.hints, pod.reason = verdict.message, verdict.hints, "Unschedulable"
                    explanations.append(pod)
                result.unschedulable.append(pod.key)
                continue
            node_name, gpus = choice
            states[node_name].bind(cpod, gpus)
            binds[pod.pk] = (by_name[node_name].pk, tuple(gpus))
            gpu_text = f" on GPU(s) {', '.join(map(str, gpus))}" if gpus else ""
            events.add(by_name[node_name], "Scheduled", f"Successfully assigned {pod.key} to {node_name}{gpu_text}", pod=pod.key)
            result.scheduled.append(pod.key)

        if done_ids:
            Pod.objects.filter(pk__in=done_ids, phase=Pod.Phase.RUNNING).update(phase=Pod.Phase.SUCCEEDED, reason="Completed", finished_at=now)
        if requeue:  # their time on the node they leave stays billed there
            placements_end([(p.pk, p.node_id, p.placed_at, p.started_at) for p in running if p.pk in requeue], now)
            Pod.objects.filter(pk__in=requeue, phase=Pod.Phase.RUNNING).update(
                phase=Pod.Phase.PENDING, node=None, gpu_indices=Value([], output_field=JSONField()), started_at=None, placed_at=None, pending_since=now,
                reason=by_pk({k: v[0] for k, v in requeue.items()}, CharField()),
                explanation=by_pk({k: v[1] for k, v in requeue.items()}, TextField()),
                hints=Value([], output_field=JSONField()),
            )  # fmt: skip
        if binds:
            kept = pods_bind(binds=binds, now=now)
            if len(kept) != len(binds):  # a pod deleted meanwhile: drop the events of binds that did not happen
                lost_keys = {p.key for p in pending if p.pk in binds and p.pk not in kept}
                events.drop(lost_keys)
                result.scheduled = [k for k in result.scheduled if k not in lost_keys]
        if explanations:
            Pod.objects.bulk_update(explanations, ["explanation", "hints", "reason"])
        events.save()
    _date_noexecute_taints(nodes, now)
    return result


def _taint_evictions(pods: list[Pod], by_id: dict[int, Node], now: datetime) -> list[tuple[Pod, Eviction]]:
    """The Running pods (on live nodes) that a NoExecute taint of their node evicts now."""
    taints: dict[int, tuple] = {}
    due = []
    for pod in pods:
        node = by_id[pod.node_id]
        if not node.taints or not has_noexecute(node.taints):
            continue
        if node.pk not in taints:
            taints[node.pk] = timed_taints(node.taints)
        eviction = noexecute_eviction(taints[node.pk], timed_tolerations(pod.tolerations or ()), now=now, bound_at=pod.started_at)
        if eviction is not None and eviction.due(now):
            due.append((pod, eviction))
    return due


def _date_noexecute_taints(nodes: list[Node], now: datetime) -> None:
    """Set `timeAdded` to `now` on the NoExecute taints of these nodes that lack it (see
    `pools.core.scheduling.taint_eviction`): one UPDATE per distinct taint list (a pool's nodes
    share theirs), each only where the row still holds the list this pass read, so a taint list
    written meanwhile (node_sync) is never overwritten; its new taints are dated next pass.
    Outside the pass's transaction: no Node row stays locked with the binders' lock held."""
    groups: dict[str, tuple[list, list, list[int]]] = {}
    for node in nodes:
        if node.taints and (dated := with_time_added(node.taints, now)) is not None:
            groups.setdefault(json.dumps(node.taints), (node.taints, dated, []))[2].append(node.pk)
    for before, dated, pks in groups.values():
        Node.objects.filter(pk__in=pks, taints=before).update(taints=dated)


def _elapsed(pod: Pod, now: datetime) -> bool:
    return pod.duration_seconds is not None and pod.started_at is not None and pod.started_at + timedelta(seconds=pod.duration_seconds) <= now


def _fmt(seconds: int | None) -> str:
    return format_duration(seconds or 0)


def _resources(pod: Pod) -> str:
    gpus = f"{pod.gpu_milli} milli of 1 GPU" if pod.gpu_count == 1 and pod.gpu_milli < 1000 else f"{pod.gpu_count} GPU(s)"
    return f"{gpus}, {pod.cpu_milli}m CPU, {pod.memory_mib}Mi memory"


UNREADABLE_REASON = "InvalidSpec"


def unreadable_message(fault: Exception) -> str:
    return (f"The pod was stored by an earlier release with a field the scheduler cannot read ({fault}): it is not "
            "scheduled. Delete the pod and create it again from its manifest.")  # fmt: skip


def _core_pods(pending: list[Pod]) -> tuple[dict[int, CorePod], list[tuple[Pod, Exception]]]:
    """The scheduling core's pod of each Pending pod it can read (by row id), and the pods it
    cannot, each with why: one stored before a check of its spec existed (a node-affinity key
    of null) made every pass fail, for every team. Such a pod waits, and says why."""
    core, unreadable = {}, []
    for pod in pending:
        read = core_pod_or_fault(pod)
        if isinstance(read, Exception):
            log_unreadable(pod.key, read)
            unreadable.append((pod, read))
        else:
            core[pod.pk] = read
    return core, unreadable
