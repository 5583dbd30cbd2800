"""Namespaces belong to teams: the checks every namespaced object of the simulated cluster (pods,
disruption budgets) passes before it is written into one."""

from __future__ import annotations

from django.http import Http404

from pools import roles
from pools.core.errors import ConflictError, ValidationError
from pools.models import NamespaceTeam, Team
from pools.selectors.namespaces import namespace_owner


def namespace_require(*, user, namespace: str, team: Team, kind: str) -> None:
    """Another team's namespace does not exist for you (404, as for every cross-team object);
    an admin writing for one team into another's is told which. A namespace nobody has yet
    becomes the writing team's (`namespace_claim`)."""
    owner = namespace_owner(namespace)
    if owner is None or owner.pk == team.pk:
        return
    if roles.is_admin(user):
        raise ValidationError(f"namespace {namespace!r} belongs to team {owner.slug!r}; submit the {kind} for that team (team={owner.slug})", field="metadata.namespace")
    if owner.pk in roles.team_ids(user):
        raise ValidationError(f"namespace {namespace!r} belongs to your team {owner.slug!r}; submit the {kind} for that team (team={owner.slug})", field="metadata.namespace")
    raise Http404(f"namespace {namespace} not found")


def namespace_claim(*, namespace: str, team: Team) -> None:
    """Inside the writing transaction: the namespace is the team's, or becomes it now."""
    claim, _ = NamespaceTeam.objects.get_or_create(namespace=namespace, defaults={"team": team})
    if claim.team_id != team.pk:  # another team's first object claimed it a moment ago
        raise ConflictError(f"namespace {namespace} was just taken by another team; choose another namespace")
