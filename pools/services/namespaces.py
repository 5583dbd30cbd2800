"""Namespaces belong to teams: the checks every namespaced object of the simulated cluster (pods,
disruption budgets) passes before it is written into one.

The rule (docs/pods.md): a team's own namespace is its slug; another namespace becomes the team
of its first pod or budget (a `NamespaceTeam` claim) unless it is one of Kubernetes' own
(`default`, `kube-system`, any `kube-` prefix: no team's) or another team's slug. A refused
request writes nothing: the claim is made in the transaction that writes the object.

Whoever decides a namespace's owner takes that namespace's lock first (`namespace_lock`) and
checks under it, in the transaction that writes: a pod's or budget's claim, the admin creating
or renaming a team (its slug is its namespace), mapping a namespace or removing a mapping. Two
such writes of one namespace then run one after the other, and the second sees what the first
committed: exactly one of a claim and a team named like the namespace wins."""

from __future__ import annotations

import zlib

from django.db import connection
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


# pg_advisory_xact_lock's first key for namespaces (two-key form; billing's keys are others).
NAMESPACE_LOCK = 0x0A3E5ACE


def namespace_lock(*namespaces: str) -> None:
    """Lock `namespaces` until the transaction ends (call it inside the writing transaction,
    before the checks). On PostgreSQL an advisory lock per namespace, since neither the mapping
    nor the team named like it need exist yet (no row to lock), taken in one order so that
    two writers of several never deadlock; a hash collision only makes two namespaces wait for
    each other. SQLite has one writer: its transactions take the write lock when they begin
    (`transaction_mode` IMMEDIATE in the settings), so they run one after the other anyway."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        for namespace in sorted(set(namespaces)):
            key = zlib.crc32(namespace.encode()) - 2**31  # a signed 32-bit key
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [NAMESPACE_LOCK, key])


def namespace_claim(*, namespace: str, team: Team) -> None:
    """Inside the writing transaction: the namespace is the team's, or becomes it now. A team
    named like the namespace that appeared since `namespace_require` keeps it: its own
    namespace is never another team's claim (the caller's transaction rolls the claim back).
    The namespace's lock is taken even when the team holds it already, so that an admin
    removing the mapping meanwhile sees this pod or budget (and refuses) or has removed it
    before (and this claims the namespace again)."""
    namespace_lock(namespace)
    claim, created = NamespaceTeam.objects.get_or_create(namespace=namespace, defaults={"team": team})
    taken = claim.team_id != team.pk  # another team's first object claimed it a moment ago
    if taken or (created and Team.objects.filter(slug=namespace).exclude(pk=team.pk).exists()):
        raise ConflictError(f"namespace {namespace} was just taken by another team; choose another namespace")
