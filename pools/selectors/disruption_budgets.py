"""PodDisruptionBudgets as the API and the pages show them: policy/v1 documents with a status
(issue 22 item 2). The simulated cluster's come from the database, each with the status the
disruption controller would write now, counted from the pods its selector picks; a real
cluster's are read from its API server, with the status its own controller wrote. Either way
a budget belongs to the team of its namespace, and another team's does not exist for you (404).
"""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import Http404

from pools import roles
from pools.core.disruption import selector_matches
from pools.core.errors import Unavailable
from pools.models.pods import Pod, PodDisruptionBudget
from pools.providers import get_cluster_backend, real_cluster
from pools.providers.kubernetes import CLUSTER_UNREACHABLE
from pools.selectors.disruption_status import budget_documents
from pools.selectors.namespaces import namespace_owner


def budgets_for_user(*, user, namespace: str = "") -> QuerySet[PodDisruptionBudget]:
    """The simulated cluster's budget rows the user may see (the ones the services write)."""
    budgets = PodDisruptionBudget.objects.for_user(user).select_related("team")
    return budgets.filter(namespace=namespace) if namespace else budgets


def budget_get(*, user, namespace: str, name: str) -> PodDisruptionBudget:
    budget = budgets_for_user(user=user, namespace=namespace).filter(name=name).first()
    if budget is None:
        raise Http404(f"poddisruptionbudget {namespace}/{name} not found")
    return budget


def budget_list(*, user, namespace: str = "") -> list[dict]:
    """The budgets the user may see, as documents with their status."""
    if not real_cluster():
        return budget_documents(list(budgets_for_user(user=user, namespace=namespace)))
    documents = _backend_documents(namespaces=[namespace] if namespace else None)
    owners = {space: namespace_owner(space) for space in {d["metadata"].get("namespace", "") for d in documents}}
    visible = []
    for document in documents:
        owner = owners[document["metadata"].get("namespace", "")]
        if roles.is_admin(user) or (owner is not None and (roles.is_finance(user) or owner.pk in roles.team_ids(user))):
            document["metadata"]["team"] = owner.slug if owner is not None else ""
            visible.append(document)
    return visible


def budget_one(*, user, namespace: str, name: str) -> dict:
    for document in budget_list(user=user, namespace=namespace):
        if document["metadata"].get("name") == name:
            return document
    raise Http404(f"poddisruptionbudget {namespace}/{name} not found")


def budgets_guarding(pod: Pod) -> list[tuple[str, str]]:
    """The budgets whose selector picks this pod (two or more: it cannot be evicted at all),
    each as (name, how many of its pods may go now: its DisruptionAllowed condition's message
    where it has one)."""
    guarding = []
    for document in _backend_documents(namespaces=[pod.namespace]):
        if selector_matches((document.get("spec") or {}).get("selector"), pod.labels or {}):
            status = document.get("status") or {}
            message = ((status.get("conditions") or [{}])[0]).get("message") or f"{status.get('disruptionsAllowed', 0)} of its pods may be evicted now"
            guarding.append((document["metadata"]["name"], message))
    return guarding


def _backend_documents(*, namespaces: list[str] | None) -> list[dict]:
    try:
        return get_cluster_backend().budget_documents(namespaces=namespaces)
    except CLUSTER_UNREACHABLE as exc:
        raise Unavailable("the cluster's API server cannot be reached now, so its disruption budgets cannot be read; try again in a minute") from exc
