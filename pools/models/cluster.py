"""What the control plane keeps of a real Kubernetes cluster besides its pods (issue 18):
which team a namespace belongs to, and where the pod mirror's watch stands.

A namespace's team comes from an admin's mapping here, else from the namespace's own label
`ebcloud.io/team` (pools/providers/kubernetes_pods.py reads it); pods of a namespace with
neither belong to no team and only admins see them."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from pools.models.pools import Team


class NamespaceTeam(models.Model):
    """An admin's mapping of a cluster namespace to the team that owns (and pays for) its pods;
    it wins over the namespace's `ebcloud.io/team` label."""

    namespace = models.CharField(max_length=63, unique=True)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="namespaces")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["namespace"]

    def __str__(self) -> str:
        return f"{self.namespace} -> {self.team.slug}"


class WatchCursor(models.Model):
    """The resourceVersion up to which a watched collection is mirrored: a mirror that restarts
    resumes its watch there (and relists when the API server answers 410 Gone)."""

    resource = models.CharField(max_length=40, unique=True)
    resource_version = models.CharField(max_length=64, blank=True)
    listed_at = models.DateTimeField(
        null=True, blank=True, help_text="When the collection was last listed whole"
    )
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.resource}@{self.resource_version or '-'}"
