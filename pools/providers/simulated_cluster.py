"""The simulated cluster: the embedded default `ClusterBackend`, over the database (issue 3 §1).

Nodes registered by the simulated cloud's kubelet step (pools/providers/simulated.py) and the
pods bound to them, with what a Kubernetes API server does to them: labels and taints applied
like server-side apply, cordons, evictions as the Eviction API decides them (the teams'
PodDisruptionBudgets, each eviction spending one disruption, and the refusals injected as the
simulated cloud's `evict` failure), and pods that lose a removed node.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime

from django.db import transaction
from django.db.models import Q, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from pools.core.disruption import DisruptionBudget, disruption_budgets, evictions
from pools.core.node_labels import labels_taints_decoded
from pools.models import Node
from pools.models.cloud import SimClusterNode
from pools.models.pods import Pod, PodDisruptionBudget
from pools.providers.base import NodeState, PodInfo
from pools.providers.simulated import EVICT, failure_consume, failure_matches, failures_armed
from pools.selectors.disruption_status import budget_documents, unready_on
from pools.services.pod_placements import placements_end_of


class SimulatedCluster:
    """`ClusterBackend` over the database: registered nodes and the pods bound to them."""

    def register_node(self, *, name: str, now: datetime, gpus: int = 0) -> None:
        SimClusterNode.objects.get_or_create(name=name, defaults={"registered_at": now})

    def node_apply(self, *, name: str, labels: Mapping[str, str], taints: Sequence[Mapping[str, str]], applied_taints: Sequence[Mapping[str, str]] = ()) -> None:
        """Like server-side apply with a field manager (pools/providers/kubernetes.py): the node
        keeps labels and taints others set; ours are those in `managed`, from the last apply,
        so a label or taint we stop applying is removed. A (key, effect) we apply replaces
        another's taint with the same key and effect, as one Node cannot hold both."""
        with transaction.atomic():
            row = SimClusterNode.objects.select_for_update().filter(name=name).first()
            if row is None:
                return
            managed = row.managed or {}
            ours_before = set(managed.get("labels", ()))
            kept = {k: v for k, v in (row.labels or {}).items() if k not in ours_before}
            wanted = [{"key": t["key"], "value": t.get("value") or "", "effect": t["effect"]} for t in taints]
            keys = {(t["key"], t["effect"]) for t in wanted}
            taints_before = {tuple(k) for k in managed.get("taints", ())} | {(t["key"], t["effect"]) for t in applied_taints}
            others = [t for t in row.taints or () if (t["key"], t["effect"]) not in taints_before and (t["key"], t["effect"]) not in keys]
            row.labels = {**kept, **labels}
            row.taints = others + wanted
            row.managed = {"labels": sorted(labels), "taints": sorted([k, e] for k, e in keys)}
            row.save(update_fields=["labels", "taints", "managed"])

    def nodes_state(self, *, names: Sequence[str]) -> dict[str, NodeState]:
        """One query: by name for a few nodes, every Node for many (as `kubectl get nodes`: no
        bound on the query's parameters); equal labels and taints decoded once (issue 23)."""
        wanted = set(names)
        if not wanted:
            return {}
        rows = SimClusterNode.objects.all() if len(wanted) > 500 else SimClusterNode.objects.filter(name__in=sorted(wanted))
        texts, decoded, states = {"labels_text": Cast("labels", TextField()), "taints_text": Cast("taints", TextField())}, {}, {}
        for name, *pair, unschedulable in rows.annotate(**texts).values_list("name", *texts, "unschedulable"):
            if name in wanted:
                labels, taints = decoded.get(tuple(pair)) or decoded.setdefault(tuple(pair), labels_taints_decoded(*pair))
                states[name] = NodeState(labels=labels, taints=taints, unschedulable=unschedulable)
        return states

    def cordon(self, *, name: str, mark: bool = False) -> bool:
        """False when the node is not in the cluster (removed, or never registered): nothing
        to cordon, as a real API server's 404. Each is one conditional UPDATE: a marked cordon
        changes only a schedulable node, so a cordon someone set first is never taken for ours."""
        if not mark:
            return bool(SimClusterNode.objects.filter(name=name).update(unschedulable=True, cordoned_for_drain=False))
        rows = SimClusterNode.objects.filter(name=name)
        return bool(rows.filter(unschedulable=False).update(unschedulable=True, cordoned_for_drain=True)) or rows.exists()

    def uncordon(self, *, name: str, mark: bool = False) -> bool:
        rows = SimClusterNode.objects.filter(name=name)
        if not mark:
            return bool(rows.update(unschedulable=False, cordoned_for_drain=False))
        # Only the drain's own cordon (a node not cordoned drops a mark left over); False only
        # where someone else's stays.
        return bool(rows.filter(Q(unschedulable=False) | Q(cordoned_for_drain=True)).update(unschedulable=False, cordoned_for_drain=False)) or not rows.exists()

    def evict_pod(self, *, namespace: str, name: str, reason: str) -> bool:
        """Evict like the Eviction API: the pod leaves its node and is Pending again (its owner
        would recreate it), unless its disruption budget refuses."""
        return (namespace, name) in self.evict_pods(pods=[(namespace, name)], reason=reason)

    def evict_pods(self, *, pods: Sequence[tuple[str, str]], reason: str, now: datetime | None = None) -> set[tuple[str, str]]:
        """`evict_pod` for each (namespace, name) in order, in one UPDATE of live pods (their
        unique index covers only those; issue 9): each eviction of a Running pod spends one of
        its budget's disruptions, and one its budget no longer allows (or an injected refusal)
        is refused. The budgets are locked meanwhile, so two workers cannot spend the same
        disruption. Returns the pods evicted. Optional on the protocol: callers fall back to
        `evict_pod`."""
        with transaction.atomic():
            budgets = []
            if rows := self._budget_rows({namespace for namespace, _ in pods}, lock=True):
                running = list(Pod.objects.live().filter(phase=Pod.Phase.RUNNING).named(pods).values_list("namespace", "name", "labels", "node__phase"))
                unready = {f"{namespace}/{name}" for namespace, name, _, node_phase in running if unready_on(node_phase)}
                labelled = {f"{namespace}/{name}": labels or {} for namespace, name, labels, _ in running}
                budgets = disruption_budgets(budget_documents(rows), labelled, unready=unready)
            candidates = failures_armed(EVICT)
            allowed = set(evictions([f"{namespace}/{name}" for namespace, name in pods], budgets, refused=lambda key: failure_consume(candidates, key) is not None))
            evicted = [(namespace, name) for namespace, name in pods if f"{namespace}/{name}" in allowed]
            if evicted:
                leaving = Pod.objects.live().filter(phase=Pod.Phase.RUNNING).named(evicted)
                now = now or timezone.now()
                placements_end_of(leaving, now)  # its time on the node stays billed, to the caller's clock
                leaving.update(
                    phase=Pod.Phase.PENDING, node=None, gpu_indices=[], reason="Evicted", started_at=None, placed_at=None, pending_since=now,
                    explanation=f"Evicted from its node: {reason}; waiting to be scheduled again",
                )  # fmt: skip
        return set(evicted)

    def disruption_budgets(self, *, pods: Mapping[str, Mapping[str, str]]) -> list[DisruptionBudget]:
        """The budgets over these pods ("namespace/name" -> labels) as the Eviction API would
        spend them now: the teams' PodDisruptionBudgets, and each pod an injected refusal
        (`evict` failure) would refuse under a budget of its own that lets none go. Asking
        evicts nothing and uses up no refusal."""
        armed = failures_armed(EVICT)
        refused = [DisruptionBudget(frozenset({key}), 0) for key in pods if any(failure_matches(f, key) for f in armed)] if armed else []
        rows = self._budget_rows({key.split("/", 1)[0] for key in pods}, lock=False)
        if not rows:
            return refused
        on_unknown = Pod.objects.live().filter(phase=Pod.Phase.RUNNING, node__phase=Node.Phase.UNKNOWN, namespace__in={row.namespace for row in rows})
        unready = {key for key in (f"{namespace}/{name}" for namespace, name in on_unknown.values_list("namespace", "name")) if key in pods}
        return disruption_budgets(budget_documents(rows), pods, unready=unready) + refused

    def budget_documents(self, *, namespaces: Collection[str] | None) -> list[dict]:
        return budget_documents(self._budget_rows(namespaces, lock=False))

    @staticmethod
    def _budget_rows(namespaces: Collection[str] | None, *, lock: bool) -> list[PodDisruptionBudget]:
        """The teams' budgets in these namespaces (None: all), locked (until the transaction
        ends) when they are to be spent."""
        rows = PodDisruptionBudget.objects.select_related("team")
        rows = rows if namespaces is None else rows.filter(namespace__in=namespaces)
        return list(rows.order_by("pk").select_for_update(of=("self",)) if lock else rows)  # locked in one order: no deadlock

    def list_pods(self, *, node_name: str) -> list[PodInfo]:
        pods = Pod.objects.filter(node__name=node_name, phase=Pod.Phase.RUNNING).order_by("namespace", "name")
        return [PodInfo(namespace=p.namespace, name=p.name, priority=p.priority, phase=p.phase, checkpointable=p.checkpointable) for p in pods]

    def remove_node(self, *, name: str, now: datetime | None = None) -> None:
        """Pods still on a removed node lose it and wait to be scheduled again (`NodeLost`);
        their time on it stays billed, to the caller's clock."""
        with transaction.atomic():
            lost = Pod.objects.filter(node__name=name, phase=Pod.Phase.RUNNING)
            now = now or timezone.now()
            placements_end_of(lost, now)
            lost.update(
                phase=Pod.Phase.PENDING, node=None, gpu_indices=[], reason="NodeLost", started_at=None, placed_at=None, pending_since=now,
                explanation=f"Node {name} left the cluster; waiting to be scheduled again",
            )  # fmt: skip
        SimClusterNode.objects.filter(name=name).delete()
