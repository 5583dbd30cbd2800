"""Namespaces belong to teams: the checks every namespaced object of the simulated cluster (pods,
disruption budgets) passes before it is written into one.

The rule (docs/pods.md): a team's own namespace is its slug; another namespace becomes the team
of its first pod or budget (a `NamespaceTeam` claim) unless it is one of Kubernetes' own
(`default`, `kube-system`, any `kube-` prefix: no team's) or another team's slug. A refused
request writes nothing: the claim is made in the transaction that writes the object."""

from __future__ import annotations

from django.http import Http404

from pools import roles
from pools.core.errors import ConflictError, ValidationError
from pools.core.namespaces import reserved_reason
from pools.models import NamespaceTeam, Team
from pools.selectors.namespaces import namespace_owner


def namespace_require(*, user, namespace: str, team: Team, kind: str) -> None:
    """Kubernetes' own namespaces are no team's (400, for admins too: the simulated cluster's
    `kube-system` holds no team's work, and a claim there would make its pods and bills a
    team's). Another team's namespace does not exist for you (404, as for every cross-team
    object); an admin writing for one team into another's is told which. A namespace nobody has
    yet becomes the writing team's (`namespace_claim`)."""
    if reason := reserved_reason(namespace):
        raise ValidationError(f"{reason}; submit the {kind} into the team's own namespace ({team.slug}) or another namespace of its own", field="metadata.namespace")
    owner = namespace_owner(namespace)
    if owner is None or owner.pk == team.pk:
        return
    if roles.is_admin(user):
        raise ValidationError(f"namespace {namespace!r} belongs to team {owner.slug!r}; submit the {kind} for that team (team={owner.slug})", field="metadata.namespace")
    if owner.pk in roles.team_ids(user):
        raise ValidationError(f"namespace {namespace!r} belongs to your team {owner.slug!r}; submit the {kind} for that team (team={owner.slug})", field="metadata.namespace")
    raise Http404(f"namespace {namespace} not found")


def namespace_claim(*, namespace: str, team: Team) -> None:
    """Inside the writing transaction: the namespace is the team's, or becomes it now. A team
    named like the namespace that appeared since `namespace_require` keeps it: its own
    namespace is never another team's claim (the caller's transaction rolls the claim back)."""
    claim, created = NamespaceTeam.objects.get_or_create(namespace=namespace, defaults={"team": team})
    taken = claim.team_id != team.pk  # another team's first object claimed it a moment ago
    if taken or (created and Team.objects.filter(slug=namespace).exclude(pk=team.pk).exists()):
        raise ConflictError(f"namespace {namespace} was just taken by another team; choose another namespace")
