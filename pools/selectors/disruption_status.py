"""The simulated cluster's PodDisruptionBudgets as policy/v1 documents, each with the status the
disruption controller would write now, counted from the pods its selector picks (so it is never
stale). Read by the budget pages and API, and by the simulated cluster's Eviction API."""

from __future__ import annotations

from collections.abc import Sequence

from pools.core.disruption import BudgetPod, budget_status, selector_matches
from pools.core.disruption_spec import API_VERSION, KIND
from pools.models import Node
from pools.models.pods import Pod, PodDisruptionBudget

# A simulated pod is one replica of its own owner (evicted, it is Pending again: recreated):
# its owner wants it until it Succeeded or Failed.
_WANTED = (Pod.Phase.PENDING, Pod.Phase.RUNNING)


def unready_on(node_phase: str | None) -> bool:
    """Whether a Running pod on a node in this phase is not Ready: the node lifecycle controller
    marks every pod of a node whose kubelet stopped reporting (status Unknown) Ready=False
    (`MarkPodsNotReady`), so a disruption budget no longer counts it healthy, and
    unhealthyPodEvictionPolicy decides whether it may go without spending a disruption."""
    return node_phase == Node.Phase.UNKNOWN


def budget_documents(budgets: Sequence[PodDisruptionBudget]) -> list[dict]:
    """The simulated cluster's budgets as policy/v1 documents with their status, in one query
    of their namespaces' live pods."""
    pods: dict[str, list[tuple[dict, str]]] = {}
    namespaces = {budget.namespace for budget in budgets}
    for namespace, labels, phase, node_phase in Pod.objects.live().filter(namespace__in=namespaces).values_list("namespace", "labels", "phase", "node__phase"):
        pods.setdefault(namespace, []).append((labels or {}, phase, node_phase))
    return [_document(budget, pods.get(budget.namespace, ())) for budget in budgets]


def _document(budget: PodDisruptionBudget, pods) -> dict:
    spec = budget.spec
    selected = [
        BudgetPod(healthy=phase == Pod.Phase.RUNNING and not unready_on(node_phase), wanted=phase in _WANTED)
        for labels, phase, node_phase in pods if selector_matches(spec.get("selector"), labels)
    ]  # fmt: skip
    status = budget_status(min_available=spec.get("minAvailable"), max_unavailable=spec.get("maxUnavailable"), pods=selected)
    metadata = {
        **(budget.document.get("metadata") or {}), "name": budget.name, "namespace": budget.namespace,
        "team": budget.team.slug, "generation": budget.generation, "creationTimestamp": budget.created_at.isoformat().replace("+00:00", "Z"),
    }  # fmt: skip
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec, "status": {"observedGeneration": budget.generation, **status}}
