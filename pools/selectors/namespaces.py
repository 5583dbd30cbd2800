"""Which team a namespace belongs to: one rule for the pod API (a namespace of another team does
not exist for you) and the scheduler extender (a pod's team is its namespace's)."""

from __future__ import annotations

from pools.models import NamespaceTeam, Team


def namespace_owner(namespace: str) -> Team | None:
    """The admins' (or its first pod's) mapping, else the team named like it (a team's own
    namespace is its slug); None while nobody has it."""
    mapped = NamespaceTeam.objects.filter(namespace=namespace).select_related("team").first()
    return mapped.team if mapped is not None else Team.objects.filter(slug=namespace).first()
