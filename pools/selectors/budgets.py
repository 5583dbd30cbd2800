"""PodDisruptionBudgets of the simulated cluster as the API returns them, each with the status the
disruption controller would write now, counted from the pods its selector picks (issue 22
item 2). Another team's budget does not exist for you (404), as for every team object."""

from __future__ import annotations

from collections.abc import Sequence

from django.db.models import QuerySet
from django.http import Http404

from pools.core.budget_spec import API_VERSION, KIND
from pools.core.disruption import BudgetPod, budget_status, selector_matches
from pools.models.pods import Pod, PodDisruptionBudget

# A simulated pod is one replica of its own owner (evicted, it is Pending again: recreated):
# its owner wants it until it Succeeded or Failed.
_WANTED = (Pod.Phase.PENDING, Pod.Phase.RUNNING)


def budgets_for_user(*, user, namespace: str = "") -> QuerySet[PodDisruptionBudget]:
    budgets = PodDisruptionBudget.objects.for_user(user).select_related("team")
    return budgets.filter(namespace=namespace) if namespace else budgets


def budget_get(*, user, namespace: str, name: str) -> PodDisruptionBudget:
    budget = budgets_for_user(user=user, namespace=namespace).filter(name=name).first()
    if budget is None:
        raise Http404(f"poddisruptionbudget {namespace}/{name} not found")
    return budget


def budgets_guarding(pod: Pod) -> list[dict]:
    """The budgets whose selector picks this pod (two or more: it cannot be evicted at all)."""
    budgets = PodDisruptionBudget.objects.filter(namespace=pod.namespace).select_related("team")
    return budget_documents([b for b in budgets if selector_matches(b.spec.get("selector"), pod.labels or {})])


def budget_documents(budgets: Sequence[PodDisruptionBudget]) -> list[dict]:
    """The budgets as policy/v1 documents with their status, in one query of their namespaces'
    live pods."""
    pods: dict[str, list[tuple[dict, str]]] = {}
    namespaces = {budget.namespace for budget in budgets}
    for namespace, labels, phase in Pod.objects.live().filter(namespace__in=namespaces).values_list("namespace", "labels", "phase"):
        pods.setdefault(namespace, []).append((labels or {}, phase))
    return [_document(budget, pods.get(budget.namespace, ())) for budget in budgets]


def _document(budget: PodDisruptionBudget, pods) -> dict:
    spec = budget.spec
    selected = [BudgetPod(healthy=phase == Pod.Phase.RUNNING, wanted=phase in _WANTED) for labels, phase in pods if selector_matches(spec.get("selector"), labels)]
    status = budget_status(min_available=spec.get("minAvailable"), max_unavailable=spec.get("maxUnavailable"), pods=selected)
    metadata = {
        **(budget.document.get("metadata") or {}), "name": budget.name, "namespace": budget.namespace,
        "team": budget.team.slug, "generation": budget.generation, "creationTimestamp": budget.created_at.isoformat().replace("+00:00", "Z"),
    }  # fmt: skip
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec, "status": {"observedGeneration": budget.generation, **status}}
