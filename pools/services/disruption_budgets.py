"""PodDisruptionBudgets of the simulated cluster: create, replace and delete (issue 22 item 2: the
repack's moves and a drain's evictions spend them). As for pods, the team comes from the
writer's memberships, never from the document; a budget lives in its team's namespace and
selects only that namespace's pods, so it can never hold back another team's pods. On a real
cluster budgets are the cluster's own, written with kubectl; the product reads them there.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.utils import timezone

from pools import roles
from pools.core.disruption_spec import BudgetSpec, parse_budget
from pools.core.documents import split_server_fields
from pools.core.errors import ConflictError, ValidationError
from pools.models.pods import PodDisruptionBudget
from pools.providers import real_cluster
from pools.selectors.disruption_budgets import budget_get
from pools.services.audit import audit_record
from pools.services.namespaces import namespace_claim, namespace_require
from pools.services.pods import teams_submitting_for
from pools.services.pools import team_choose


def budget_create(*, user, document: Any, team_slug: str = "") -> PodDisruptionBudget:
    _refuse_on_real_cluster()
    document, _ = split_server_fields(document)
    teams = teams_submitting_for(user=user)
    if not teams:
        raise PermissionDenied("only team members and platform admins can create disruption budgets")
    team = team_choose(teams=teams, team_slug=team_slug, action="create disruption budgets", several="you belong to several teams")
    spec = parse_budget(document, default_namespace=team.slug)
    namespace_require(user=user, namespace=spec.namespace, team=team, kind="disruption budget")
    if PodDisruptionBudget.objects.filter(namespace=spec.namespace, name=spec.name).exists():
        raise ConflictError(f"poddisruptionbudget {spec.namespace}/{spec.name} already exists")
    try:
        with transaction.atomic():
            namespace_claim(namespace=spec.namespace, team=team)
            budget = PodDisruptionBudget.objects.create(
                namespace=spec.namespace, name=spec.name, team=team, labels=spec.labels, document=_stored(spec, document),
                created_by=user if user.is_authenticated else None, created_at=timezone.now(),
            )  # fmt: skip
            audit_record(actor=user, action="poddisruptionbudget.create", obj=budget, after=budget.document)
            return budget
    except IntegrityError as exc:
        raise ConflictError(f"poddisruptionbudget {spec.namespace}/{spec.name} already exists") from exc


def budget_replace(*, user, namespace: str, name: str, document: Any) -> PodDisruptionBudget:
    """PUT: the whole document again (as `kubectl replace`); a changed spec is a new generation."""
    _refuse_on_real_cluster()
    budget = budget_get(user=user, namespace=namespace, name=name)
    _require_writer(user, budget)
    document, _ = split_server_fields(document)
    spec = parse_budget(document, default_namespace=budget.namespace)
    if (spec.namespace, spec.name) != (budget.namespace, budget.name):
        field = "metadata.name" if spec.name != budget.name else "metadata.namespace"
        raise ValidationError(f"the object ({spec.namespace}/{spec.name}) does not match the one on the URL ({budget.namespace}/{budget.name})", field=field)
    with transaction.atomic():
        locked = PodDisruptionBudget.objects.select_for_update().get(pk=budget.pk)
        before, stored = locked.document, _stored(spec, document)
        if stored["spec"] != locked.spec:
            locked.generation += 1
        locked.labels, locked.document = spec.labels, stored
        locked.save(update_fields=["labels", "document", "generation"])
        audit_record(actor=user, action="poddisruptionbudget.update", obj=locked, before=before, after=stored)
    return locked


def budget_delete(*, user, namespace: str, name: str) -> None:
    _refuse_on_real_cluster()
    budget = budget_get(user=user, namespace=namespace, name=name)
    _require_writer(user, budget)
    with transaction.atomic():
        audit_record(actor=user, action="poddisruptionbudget.delete", obj=budget, before=budget.document)
        budget.delete()


def _stored(spec: BudgetSpec, document: dict) -> dict:
    metadata = {"name": spec.name, "namespace": spec.namespace}
    if spec.labels:
        metadata["labels"] = spec.labels
    if document["metadata"].get("annotations"):
        metadata["annotations"] = document["metadata"]["annotations"]
    return {"metadata": metadata, "spec": spec.spec_document()}


def _require_writer(user, budget: PodDisruptionBudget) -> None:
    if not roles.writes_for_team(user, budget.team_id):
        raise PermissionDenied(f"only members of team {budget.team.slug} and platform admins can change this disruption budget")


def _refuse_on_real_cluster() -> None:
    if real_cluster():
        raise ConflictError("disruption budgets of this cluster are written with kubectl (kubectl apply -f pdb.yaml); this product reads them from the cluster")
