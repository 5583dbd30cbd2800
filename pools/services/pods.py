"""Pods: the writes (submit, delete) and reads (list, get) every front door shares (design §6).

Authorization is `Pod.objects.for_user`: another team's pod does not exist for you (404). Team
members, leads and platform admins submit pods; the team comes from the submitter's own
memberships (`?team=` chooses among them), never from the document. Finance reads, never writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.db.models import BigIntegerField, Case, JSONField, QuerySet, Value, When
from django.http import Http404
from django.utils import timezone

from pools import roles
from pools.core.documents import split_server_fields
from pools.core.errors import ConflictError, ValidationError
from pools.core.isolation import admission_error
from pools.core.podspec import admit, affinity_terms, parse_pod, with_defaults
from pools.core.priority import Admitted, admitted_spec
from pools.models import Team
from pools.models.pods import Pod, priority_classes_for
from pools.providers import real_cluster
from pools.selectors.pools import pools_access
from pools.services.events import event_record
from pools.services.namespaces import namespace_claim, namespace_require
from pools.services.pools import team_choose


@dataclass(frozen=True)
class PodFilters:
    namespace: str = ""
    phase: str = ""
    team: str = ""


def pods_for_user(*, user, filters: PodFilters | None = None) -> QuerySet[Pod]:
    filters = filters or PodFilters()
    pods = Pod.objects.for_user(user).live().select_related("team", "node", "node__pool")
    if filters.namespace:
        pods = pods.filter(namespace=filters.namespace)
    if filters.phase:
        pods = pods.filter(phase=filters.phase)
    if filters.team:
        pods = pods.filter(team__slug=filters.team)
    return pods.order_by("namespace", "name")


def pod_get(*, user, namespace: str, name: str) -> Pod:
    pod = pods_for_user(user=user).filter(namespace=namespace, name=name).first()
    if pod is None:
        raise Http404(f"pod {namespace}/{name} not found")
    return pod


def teams_submitting_for(*, user) -> list[Team]:
    """Teams the user may submit pods into: their own (any role); every team for admins."""
    if roles.is_admin(user):
        return list(Team.objects.all())
    return list(Team.objects.filter(pk__in=roles.team_ids(user)))


def _team_for_new_pod(*, user, team_slug: str) -> Team:
    teams = teams_submitting_for(user=user)
    if not teams:
        raise PermissionDenied("only team members and platform admins can submit pods")
    return team_choose(teams=list(teams), team_slug=team_slug, action="submit pods", several="you belong to several teams")


def pod_create(*, user, document: Any, team_slug: str = "", now: datetime | None = None) -> Pod:
    """Submit a Pod document; it waits Pending for the next scheduler pass. Its priority comes
    from its PriorityClass (`spec.priorityClassName`, else the globalDefault class, else 0), as
    kube-apiserver's Priority admission plugin sets it; the stored document shows the result."""
    now = now or timezone.now()
    _refuse_on_real_cluster("submitted")
    document, _ = split_server_fields(document)
    team = _team_for_new_pod(user=user, team_slug=team_slug)
    spec = parse_pod(document, default_namespace=team.slug)
    spec = admit(spec, priority_classes_for(spec.priority_class_name))
    admitted = Admitted(spec.priority, spec.preemption_policy, spec.priority_class_name)
    document = {**document, "spec": admitted_spec(document["spec"], admitted)}
    namespace_require(user=user, namespace=spec.namespace, team=team, kind="pod")
    refused = admission_error(team=team.slug, node_selector=spec.node_selector, affinity_terms=affinity_terms(spec.affinity), pools=pools_access())
    if refused:
        raise ValidationError(refused, field="spec.affinity" if spec.affinity else "spec.nodeSelector")
    if Pod.objects.live().filter(namespace=spec.namespace, name=spec.name).exists():
        raise ConflictError(f"pod {spec.namespace}/{spec.name} already exists")
    try:
        with transaction.atomic():
            namespace_claim(namespace=spec.namespace, team=team)
            return Pod.objects.create(
                namespace=spec.namespace,
                name=spec.name,
                team=team,
                labels=dict(spec.labels),
                priority=spec.priority,
                preemption_policy=spec.preemption_policy,
                checkpointable=spec.checkpointable,
                cpu_milli=spec.cpu_milli,
                memory_mib=spec.memory_mib,
                gpu_count=spec.gpu_count,
                gpu_milli=spec.gpu_milli,
                gpu_shares=spec.gpu_shares,
                gpu_models=list(spec.gpu_models),
                tolerations=list(spec.tolerations),
                node_selector=dict(spec.node_selector),
                affinity=dict(spec.affinity),
                duration_seconds=spec.duration_seconds,
                document=with_defaults(document),  # requests filled from limits, as Kubernetes stores it
                submitted_by=user if user.is_authenticated else None,
                submitted_at=now,
                pending_since=now,
                explanation="Waiting for the next scheduler pass.",
            )
    except IntegrityError as exc:
        raise ConflictError(f"pod {spec.namespace}/{spec.name} already exists") from exc


def pod_delete(*, user, pod: Pod, now: datetime | None = None) -> None:
    """Delete a pod (its GPUs are free at once); an event on its node's pool if it ran."""
    if not roles.writes_for_team(user, pod.team_id):
        raise PermissionDenied(f"only members of team {pod.team.slug if pod.team else '(none)'} and platform admins can delete this pod")
    _refuse_on_real_cluster("deleted")
    with transaction.atomic():
        node = pod.node if pod.phase == Pod.Phase.RUNNING else None
        pod.delete()
        if node is not None:
            event_record(pool=node.pool, node=node, reason="Killing", message=f"Pod {pod.key} deleted by {user.get_username()}; its resources are free", actor=user, now=now)


def _refuse_on_real_cluster(done: str) -> None:
    """On a real cluster the pods are the cluster's own (shown here as it reports them): they
    are submitted and deleted with kubectl or the team's own tools, never behind its back."""
    if real_cluster():
        raise ConflictError(f"pods of this cluster are {done} with kubectl (kubectl apply -f pod.yaml, kubectl delete pod NAME -n NAMESPACE); this product shows them as the cluster reports them")


def by_pk(mapping: dict[int, object], output_field) -> Case:
    """One column's value per row, for an UPDATE of many rows at once."""
    return Case(*(When(pk=pk, then=Value(v, output_field=output_field)) for pk, v in mapping.items()), output_field=output_field)


def pods_bind(*, binds: dict[int, tuple[int, tuple[int, ...]]], now: datetime) -> set[int]:
    """Bind Pending pods, pk -> (node pk, GPU indices), in one UPDATE, each only if it is still
    Pending (one deleted or bound meanwhile is left alone), as the scheduler's bind does.
    Returns the pks it bound."""
    if not binds:
        return set()
    bound = Pod.objects.filter(pk__in=binds, phase=Pod.Phase.PENDING).update(
        phase=Pod.Phase.RUNNING, started_at=now, reason="Scheduled", explanation="",
        node_id=by_pk({k: v[0] for k, v in binds.items()}, BigIntegerField()),
        gpu_indices=by_pk({k: list(v[1]) for k, v in binds.items()}, JSONField()),
        hints=Value([], output_field=JSONField()),
    )  # fmt: skip
    if bound == len(binds):
        return set(binds)
    return set(Pod.objects.filter(pk__in=binds, phase=Pod.Phase.RUNNING, started_at=now).values_list("pk", flat=True))
