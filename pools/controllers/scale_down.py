"""Which burst nodes the autoscaler may remove, and where their pods move (issue 5 §4).

A node can go when every pod on it can go, by Cluster Autoscaler's rules (kubernetes/autoscaler,
cluster-autoscaler/FAQ.md, "What types of pods can prevent CA from removing a node?"):
- a pod annotated `cluster-autoscaler.kubernetes.io/safe-to-evict: "false"` keeps its node;
- a pod whose PodDisruptionBudget allows no more disruptions now keeps its node (the moves of
  one pass are evictions: they spend the budgets in turn, `pools.core.disruption.refused`);
- a pod that fits on no other node keeps its node.
Expendable pods (priority below `EBCLOUD_EXPENDABLE_PODS_PRIORITY_CUTOFF`, CA's
--expendable-pods-priority-cutoff) keep no node: CA builds its scale-down simulation from the
scheduled pods that are not expendable (core/static_autoscaler.go and the actuator's snapshot,
`FilterOutExpendablePods`), so neither their annotation nor a budget is asked, they are not
moved, and a node with only them is empty ("killed without any consideration during scale
down", as its flag says: they are meant to run only on spare room). The drain evicts them,
lowest priority first (one a budget keeps waits no longer than the drain's deadline). On the
nodes that stay they still hold their room: a pod moved there is bound beside them, never over
them (the repack binds, it does not preempt), where CA counts that room free and leaves the
preemption to the scheduler.
Empty nodes go first, then nodes whose pods all fit on the others, monthly nodes tried first:
their capacity is paid already. Why a node is kept is said in the pool's `ScaleDownBlocked`
activity. In the simulated cluster the pods are moved (`repack`) under the scheduler's lock,
planned on the rows read under it; a real cluster's drain evicts them and kube-scheduler places
them again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings

from pools.core.disruption import DisruptionBudget, eviction_opted_out, refused
from pools.core.scheduling.nodes import NodeState, best_fit_gpus, filter_node
from pools.models import GpuNodePool, Node
from pools.models.pods import Pod
from pools.providers import get_cluster_backend
from pools.providers.kubernetes import CLUSTER_UNREACHABLE
from pools.selectors.cluster import cluster_state, core_pod_of
from pools.services.events import event_record
from pools.services.pod_placements import placements_end

logger = logging.getLogger("ebcloud.autoscaler")


@dataclass(frozen=True)
class Move:
    pod: Pod
    node: Node
    gpu_indices: tuple[int, ...]


@dataclass
class Removable:
    """The burst nodes chosen, each with where its pods move, and why the others are kept (node name -> reason)."""

    chosen: list[tuple[Node, list[Move]]] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)


def removable_burst_nodes(burst: list[Node], live: list[Node], *, limit: int) -> Removable:
    """Burst nodes that can go (at most `limit`), with where their pods move; the moves of one
    choice are reserved (and its evictions spent from the budgets) before the next is tried."""
    running = list(Pod.objects.filter(node__in=live, phase=Pod.Phase.RUNNING).order_by("pk"))
    states = cluster_state(live, running)
    by_node: dict[int, list[Pod]] = {}
    for pod in running:
        if pod.priority >= settings.EBCLOUD_EXPENDABLE_PODS_PRIORITY_CUTOFF:  # an expendable pod keeps no node
            by_node.setdefault(pod.node_id, []).append(pod)
    budgets = _budgets([p for n in burst for p in by_node.get(n.pk, [])])
    targets = sorted((n for n in live if n.phase == Node.Phase.READY and n.billing != Node.Billing.ON_DEMAND), key=lambda n: n.name)
    targets += sorted((n for n in live if n.phase == Node.Phase.READY and n.billing == Node.Billing.ON_DEMAND), key=lambda n: n.name)
    out, evicting = Removable(), []
    for node in sorted(burst, key=lambda n: (len(by_node.get(n.pk, [])), n.name)):
        if len(out.chosen) == limit:
            break
        pods = by_node.get(node.pk, [])
        why = _kept_by_pod(pods, evicting, budgets)
        if why is None:
            leaving = {n.pk for n, _ in out.chosen} | {node.pk}
            moves = _place_elsewhere(pods, [t for t in targets if t.pk not in leaving], states)
            if isinstance(moves, str):
                why = f"pod {moves} fits on no other node"
            else:
                out.chosen.append((node, moves))
                evicting += [p.key for p in pods]
                continue
        out.kept[node.name] = why
    return out


def _kept_by_pod(pods: list[Pod], evicting: list[str], budgets: list[DisruptionBudget] | None) -> str | None:
    """Why these pods keep their node, or None when every one may be evicted after `evicting`."""
    for pod in pods:
        if why := eviction_opted_out(pod.key, pod.annotations):
            return why
    if not pods:
        return None
    if budgets is None:
        return "the cluster's disruption budgets could not be read"
    keys = [p.key for p in pods]
    refusing = [key for key in refused(evicting + keys, budgets) if key in set(keys)]
    if not refusing:
        return None
    named = next((b.named for b in budgets if refusing[0] in b.pods), "a disruption budget")
    return f"pod {refusing[0]} may not be evicted now: {named} allows no more disruptions"


def _budgets(pods: list[Pod]) -> list[DisruptionBudget] | None:
    """The disruption budgets over the burst nodes' pods (None: a real cluster could not be
    asked, and no node with pods is removed until it can be)."""
    if not pods:
        return []
    try:
        return get_cluster_backend().disruption_budgets(pods={p.key: p.labels or {} for p in pods})
    except CLUSTER_UNREACHABLE as exc:
        logger.warning("the cluster's disruption budgets could not be read: %s", exc)
        return None


def _place_elsewhere(pods: list[Pod], targets: list[Node], states: dict[str, NodeState]) -> list[Move] | str:
    """Where each pod goes (first target where every filter passes), binding it there so the
    next pod sees the space taken; the name of the first pod that fits nowhere (and nothing
    bound) otherwise."""
    trial = {t.name: states[t.name].clone() for t in targets}
    moves = []
    for pod in pods:
        core = core_pod_of(pod)
        target = next((t for t in targets if filter_node(core, trial[t.name]) is None), None)
        if target is None:
            return pod.key
        gpus = best_fit_gpus(core, trial[target.name].gpu_free)
        trial[target.name].bind(core, gpus)
        moves.append(Move(pod=pod, node=target, gpu_indices=tuple(gpus)))
    for name, state in trial.items():
        states[name] = state
    return moves


def repack(pool: GpuNodePool, source: Node, moves: list[Move], now: datetime) -> None:
    """Move the pods of a burst node onto the capacity chosen for them before it is drained
    (issue 5 §4: monthly capacity is paid already). Run under the scheduler's lock, on a plan
    made under it. A pod that changed meanwhile is left to the drain. Its time on the burst
    node is kept (`placements_end`), so metering charges that node for it."""
    left = []
    for move in moves:
        if Pod.objects.filter(pk=move.pod.pk, phase=Pod.Phase.RUNNING, node=source).update(node=move.node, gpu_indices=list(move.gpu_indices), reason="Repacked", placed_at=now):
            left.append((move.pod.pk, source.pk, move.pod.placed_at, move.pod.started_at))
            event_record(pool=pool, node=move.node, reason="Repacked", now=now,
                         message=f"Pod {move.pod.key} moved from burst node {source.name} to {move.node.billing} node {move.node.name} before scale-down")  # fmt: skip
    placements_end(left, now)
