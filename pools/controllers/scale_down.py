"""Which burst nodes the autoscaler may remove, and where their pods move (issue 5 §4).

A node can go when every pod on it can go, by Cluster Autoscaler's rules (kubernetes/autoscaler,
cluster-autoscaler/FAQ.md, "What types of pods can prevent CA from removing a node?"):
- a pod annotated `cluster-autoscaler.kubernetes.io/safe-to-evict: "false"` keeps its node;
- on a real cluster, a pod no controller owns (no ownerReference with `controller: true`) keeps
  its node unless annotated `safe-to-evict: "true"`: evicted, nothing would create it again
  (`kubectl drain` refuses it without --force). The simulated cluster's pods are the product's
  own: they are moved before the drain, and one evicted is Pending again, as if recreated
  (`SimulatedCluster.evict_pods`), so none of them is lost and none keeps a node;
- a pod whose PodDisruptionBudget allows no more disruptions now keeps its node (the moves of
  one pass are evictions: they spend the budgets in turn, `pools.core.disruption.refused`);
- a pod with local storage (a hostPath or an emptyDir volume not in memory) keeps its node,
  unless annotated `safe-to-evict-local-volumes` with those volumes (or `safe-to-evict: "true"`);
- a pod that fits on no other node keeps its node.
DaemonSet pods and mirror (static) pods keep no node and are not moved: they belong to their
node (a DaemonSet's pod is pinned to it by name) and go with it, as CA and `kubectl drain` leave
them. Expendable pods (priority below `EBCLOUD_EXPENDABLE_PODS_PRIORITY_CUTOFF`, CA's
--expendable-pods-priority-cutoff) keep no node: CA builds its scale-down simulation from the
scheduled pods that are not expendable (core/static_autoscaler.go and the actuator's snapshot,
`FilterOutExpendablePods`), so neither their annotation nor a budget is asked, they are not
moved, and a node with only them is empty ("killed without any consideration during scale
down", as its flag says: they are meant to run only on spare room). The drain evicts them,
lowest priority first (one a budget keeps waits no longer than the drain's deadline). On the
nodes that stay they still hold their room: a pod moved there is bound beside them, never over
them (the repack binds, it does not preempt), where CA counts that room free and leaves the
preemption to the scheduler.
Nodes Pending pods wait for stay. A burst node that has not become Ready (still Ordering,
Provisioning, Initializing or Registering: bought for a queued pod) is never a candidate, as CA
leaves unregistered nodes to its provisioning timeout and Karpenter never consolidates an
uninitialised node. And the Pending pods are placed first, as CA places them in its simulation
before it looks for unneeded nodes: each on the first Ready node where it fits, the nodes that
stay (monthly) first, so a burst node one of them needs is kept and its room is not counted free
for the pods moved off the others.
Empty nodes go first, then nodes whose pods all fit on the others, monthly nodes tried first:
their capacity is paid already. Why a node is kept is said in the pool's `ScaleDownBlocked`
activity. In the simulated cluster the pods are moved (`repack`) under the scheduler's lock,
planned on the rows read under it; a real cluster's drain evicts them and kube-scheduler places
them again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings

from pools.controllers.node_sync import Unread
from pools.core.disruption import (
    SAFE_TO_EVICT,
    DisruptionBudget,
    eviction_opted_out,
    local_storage_kept,
    node_opted_out,
    refused,
)
from pools.core.lifecycle import PROVISIONING_PHASES
from pools.core.node_labels import CORDONED_PHASES, ClusterNodeState
from pools.core.scheduling.nodes import NodeState, best_fit_gpus, filter_node
from pools.core.scheduling.nodes import Pod as CorePod
from pools.models import GpuNodePool, Node
from pools.models.pods import Pod
from pools.providers import get_cluster_backend, real_cluster
from pools.providers.base import ProviderError
from pools.providers.kubernetes import CLUSTER_UNREACHABLE
from pools.selectors.burst_idle import moved_by_scale_down
from pools.selectors.cluster import cluster_state, readable_core_pod
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


def removable_burst_nodes(
    burst: list[Node], live: list[Node], *, limit: int, pending: Sequence[CorePod] = (), empty: bool = False,
    seen: Mapping[str, ClusterNodeState] | None = None,
) -> Removable:
    """Burst nodes that can go (at most `limit`), with where their pods move; the moves of one
    choice are reserved (and its evictions spent from the budgets) before the next is tried.
    `pending`: the Pending pods (the core's, expendable ones left out) that may wait for room
    here; any team's (a node's filters take only the pods its pool admits). `empty`: only nodes
    that hold no pod now (the unneeded-node rule's, chosen idle moments before). `seen`: the
    burst nodes as the cluster has them (`node_sync.observe`): one annotated to opt out of
    scale-down stays (`node_opted_out`), and every one stays while they cannot be read (`Unread`).
    So does one a Pending pod not expendable is nominated to (a real cluster's preemption makes
    room there), as Cluster Autoscaler counts such a pod on its node."""
    seen = seen if seen is not None else {}
    nominated = {
        node: f"{namespace}/{name}"
        for node, namespace, name in Pod.objects.live()
        .filter(phase=Pod.Phase.PENDING, nominated_node_name__in=[n.name for n in burst], priority__gte=settings.EBCLOUD_EXPENDABLE_PODS_PRIORITY_CUTOFF)
        .order_by("-pk").values_list("nominated_node_name", "namespace", "name")
    }  # fmt: skip
    running = list(Pod.objects.filter(node__in=live, phase=Pod.Phase.RUNNING).order_by("pk"))
    states = cluster_state(live, running)
    by_node: dict[int, list[Pod]] = {}
    for pod in running:
        if moved_by_scale_down(pod):
            by_node.setdefault(pod.node_id, []).append(pod)
    out, evicting = Removable(), []
    for node in burst:
        if node.phase in PROVISIONING_PHASES:
            out.kept[node.name] = f"it is still {node.phase}: a node that has not become Ready is not scaled down (a Pending pod may wait for it)"
    order = sorted((n for n in burst if n.phase not in PROVISIONING_PHASES), key=lambda n: (len(by_node.get(n.pk, [])), n.name))
    budgets = _budgets([p for n in order for p in by_node.get(n.pk, [])])
    targets = sorted((n for n in live if n.phase == Node.Phase.READY and n.billing != Node.Billing.ON_DEMAND), key=lambda n: n.name)
    staying_first = targets + [n for n in reversed(order) if n.phase == Node.Phase.READY]  # burst nodes tried last go last
    awaited = _pending_placed(pending, staying_first, states, running={p.key for p in running})
    targets += sorted((n for n in live if n.phase == Node.Phase.READY and n.billing == Node.Billing.ON_DEMAND), key=lambda n: n.name)
    for node in order:
        if len(out.chosen) == limit:
            break
        pods = by_node.get(node.pk, [])
        if isinstance(seen, Unread):
            why = f"the cluster's Nodes could not be read now ({seen.why}): whether it opted out of scale-down is not known"
        elif opted_out := node_opted_out(node.name, getattr(seen.get(node.name), "annotations", {})):
            why = opted_out
        elif node.name in nominated:
            why = f"Pending pod {nominated[node.name]} is nominated to it: it waits there for the lower-priority pods it preempts to go"
        elif empty and pods:
            why = f"pod {pods[0].key} runs on it now: it is not idle any more"
        elif node.pk in awaited:
            why = f"Pending pod {awaited[node.pk]} would be scheduled here: no node that stays has room for it"
        else:
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


def _pending_placed(pending: Sequence[CorePod], nodes: list[Node], states: dict[str, NodeState], *, running: set[str]) -> dict[int, str]:
    """Where the Pending pods would be scheduled: each (highest priority first, then in queue
    order) on the first of `nodes` where every filter passes, its room taken in `states`, as CA
    puts the Pending pods that fit existing nodes into its simulation before it picks unneeded
    nodes. Returns the nodes (by pk) that take one, with the first such pod's name. A pod seen
    Running meanwhile (the view was read before the scheduler's lock) is counted there already;
    a shape that fits no node is tried once (filters only get harder as room is taken)."""
    placed: dict[int, str] = {}
    unfit: set[tuple] = set()
    for pod in sorted(pending, key=lambda p: -p.priority):
        if pod.shape_key in unfit or pod.name in running:
            continue
        node = next((n for n in nodes if filter_node(pod, states[n.name]) is None), None)
        if node is None:
            unfit.add(pod.shape_key)
            continue
        states[node.name].bind(pod, best_fit_gpus(pod, states[node.name].gpu_free))
        placed.setdefault(node.pk, pod.name)
    return placed


def _kept_by_pod(pods: list[Pod], evicting: list[str], budgets: list[DisruptionBudget] | None) -> str | None:
    """Why these pods keep their node, or None when every one may be evicted after `evicting`."""
    for pod in pods:
        if why := pod_keeps_node(pod):
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


def pod_keeps_node(pod: Pod) -> str | None:
    """Why the pod's own metadata keeps its node, or None: annotated safe-to-evict "false" or
    do-not-disrupt "true" (`eviction_opted_out`); unless annotated safe-to-evict "true", data in
    a local volume it has not said it may lose (`local_storage_kept`), or, on a real cluster,
    owned by no controller: evicted, such a pod is gone for good (CA's FAQ:
    "pods that are not backed by a controller object" block a scale-down unless so annotated;
    `kubectl drain` refuses them without --force). Any controller counts (ReplicaSet, Job,
    StatefulSet, a training operator's custom resource...), as for `kubectl drain`. The
    simulated cluster's pods are the product's own and are never lost (the module's
    docstring). Public for the drain's re-check of a node's pods before it evicts."""
    if why := eviction_opted_out(pod.key, pod.annotations):
        return why
    if str(pod.annotations.get(SAFE_TO_EVICT, "")).lower() == "true":
        return None
    if why := local_storage_kept(pod.key, pod.annotations, (pod.document or {}).get("spec") or {}):
        return why
    if not real_cluster() or pod.controller_kind:
        return None
    return f'pod {pod.key} has no controller (no ownerReference with controller: true): evicted, nothing would create it again; annotate it {SAFE_TO_EVICT}: "true" to let its node go'


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
        core = readable_core_pod(pod)  # None: its affinity cannot be read, so nowhere is known to take it
        target = None if core is None else next((t for t in targets if filter_node(core, trial[t.name]) is None), None)
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


class PodsRecheck:
    """The drain's check of a chosen node once the cluster has it cordoned, right before it
    evicts (CA's actuator runs `GetPodsToMove` again on the tainted node): why a pod on it now
    that the plan did not see keeps the node ("" when none does); the plan's pods were judged
    under the plan. The same rules as the plan's (`moved_by_scale_down`, `pod_keeps_node`): an
    expendable, DaemonSet or mirror pod goes with the node; one annotated safe-to-evict
    "false", or (on a real cluster) owned by no controller, keeps it; so does one whose budget
    allows no eviction now (the newcomers of the nodes drained before it counted as evicted
    first, as the Eviction API spends their budgets), or one not in the read model yet.

    The pods of every chosen node are read once per pass, when the drain asks about its first
    node, and the budgets once: the simulated cluster's pods are the read model's rows (one
    query; `SimulatedCluster.list_pods` reads the same rows), and its scheduler has respected
    the cordons of every chosen node since the decision committed them. On a real cluster
    kube-scheduler respects only the cluster's cordon, so the nodes the drain has not reached
    yet are cordoned first, as CA taints every node of a scale-down before it drains any
    (`taintNodesSync`); their drain cordons them again (idempotent). Their pods are then listed
    once per node (a field selector names one node; one list of every pod in the cluster would
    cost more) and looked up in the read model in one query."""

    def __init__(self, cluster, victims: list[tuple[Node, list]]):
        self.cluster = cluster
        self.nodes = [node for node, _ in victims]
        self.planned = {node.pk: {move.pod.key for move in moves} for node, moves in victims}
        self.reasons: dict[int, str] = {}
        self.cordoned_ahead: set[int] = set()  # nodes this cordoned in the cluster before their drain reached them
        self.asked: set[int] = set()

    def __call__(self, node: Node) -> str:
        self.asked.add(node.pk)
        if node.pk not in self.reasons:
            at = next(i for i, n in enumerate(self.nodes) if n.pk == node.pk)  # one of the chosen nodes
            self.reasons.update(self._judged(self.nodes[at:]))
        return self.reasons[node.pk]

    def cordons_lift(self, nodes: list[Node]) -> None:
        """Lift the cluster's cordon of these nodes whose drain was cancelled, where this
        scale-down set it: ahead of the drain (`_pods_on`), or by the drain before it asked here
        (`drain_start` asks only once the cluster has the node cordoned). Nothing else would: a
        Ready node cordoned in the cluster is an administrator's, for the drift check. Only the
        drain's marked cordon is lifted: one someone set before (`kubectl cordon`) stays theirs,
        as Cluster Autoscaler, which marks its nodes with a taint of its own, never touches
        `spec.unschedulable`; so does a repair's (a node in a cordoned phase)."""
        for node in nodes:
            ours = node.pk in self.cordoned_ahead or node.pk in self.asked
            if ours and node.phase not in CORDONED_PHASES:
                try:
                    self.cluster.uncordon(name=node.name, mark=True)
                except ProviderError as exc:
                    logger.warning("node %s stays cordoned in the cluster after its scale-down was cancelled: %s", node.name, exc.message)

    def _judged(self, nodes: list[Node]) -> dict[int, str]:
        """Why each of `nodes` (the first cordoned by its drain already) is kept ("" when not)."""
        reasons: dict[int, str] = {}
        listed = self._pods_on(nodes, reasons)
        newcomers: dict[int, list[Pod]] = {}
        for node in nodes:
            if node.pk in reasons:
                continue
            reasons[node.pk] = ""
            for key, pod in listed[node.pk]:
                if key in self.planned.get(node.pk, ()):
                    continue
                if pod is None:
                    reasons[node.pk] = f"pod {key} is on the node and not known here yet"
                    break
                if not moved_by_scale_down(pod):
                    continue
                if why := pod_keeps_node(pod):
                    reasons[node.pk] = why
                    break
                newcomers.setdefault(node.pk, []).append(pod)
        waiting = [node for node in nodes if not reasons[node.pk] and newcomers.get(node.pk)]
        if not waiting:
            return reasons
        try:
            budgets = self.cluster.disruption_budgets(pods={pod.key: pod.labels or {} for node in waiting for pod in newcomers[node.pk]})
        except (ProviderError, *CLUSTER_UNREACHABLE) as exc:
            return reasons | {node.pk: f"the disruption budgets of its pods could not be read ({exc})" for node in waiting}
        ahead: list[str] = []
        for node in waiting:
            keys = [pod.key for pod in newcomers[node.pk]]
            if refusing := [key for key in refused(ahead + keys, budgets) if key in set(keys)]:
                named = next((b.named for b in budgets if refusing[0] in b.pods), "a disruption budget")
                reasons[node.pk] = f"pod {refusing[0]} may not be evicted now: {named} allows no more disruptions"
            else:
                ahead += keys
        return reasons

    def _pods_on(self, nodes: list[Node], reasons: dict[int, str]) -> dict[int, list[tuple[str, Pod | None]]]:
        """The pods on each node not kept already ("namespace/name" and its row, None when the
        read model does not have it), terminating ones left out: the drain waits for those.
        A node that could not be cordoned or listed gets its reason in `reasons` instead."""
        if not real_cluster():
            rows = Pod.objects.live().filter(node__in=[node.pk for node in nodes], phase=Pod.Phase.RUNNING).order_by("namespace", "name")
            out: dict[int, list[tuple[str, Pod | None]]] = {node.pk: [] for node in nodes}
            for pod in rows:
                out[pod.node_id].append((pod.key, pod))
            return out
        for node in (n for n in nodes[1:] if n.ready_at is not None):  # one never registered has no Node to cordon
            try:
                self.cluster.cordon(name=node.name, mark=True)
                self.cordoned_ahead.add(node.pk)
            except ProviderError as exc:
                reasons[node.pk] = f"node {node.name} could not be cordoned in the cluster now ({exc.message})"
        keys: dict[int, list[tuple[str, str]]] = {}
        for node in nodes:
            if node.pk in reasons:
                continue
            try:
                listed = self.cluster.list_pods(node_name=node.name)
            except ProviderError as exc:
                reasons[node.pk] = f"the pods on {node.name} could not be listed ({exc.message})"
                continue
            planned = self.planned.get(node.pk, ())
            keys[node.pk] = [(x.namespace, x.name) for x in listed if not x.terminating and f"{x.namespace}/{x.name}" not in planned]
        wanted = [key for pairs in keys.values() for key in pairs]
        rows = {pod.key: pod for pod in Pod.objects.live().named(wanted)} if wanted else {}
        return {pk: [(f"{ns}/{name}", rows.get(f"{ns}/{name}")) for ns, name in pairs] for pk, pairs in keys.items()}
