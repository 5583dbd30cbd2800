"""Which namespaces a team may have (design §3: a pod's namespace belongs to a team).

Kubernetes keeps `default`, `kube-system`, `kube-public` and `kube-node-lease` for the cluster
itself, and reserves the `kube-` prefix for more of its own: they belong to no team, so neither a
team's first pod or disruption budget nor a team's slug (a team's own namespace is its slug) may
take one. A team's slug must also be a namespace Kubernetes accepts (a DNS-1123 label), or the
team could never use its own namespace."""

from __future__ import annotations

from pools.core.fields import DNS1123_LABEL

KUBERNETES_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
KUBERNETES_PREFIX = "kube-"


def is_reserved(namespace: str) -> bool:
    """One of Kubernetes' own namespaces, or one its `kube-` prefix keeps for them."""
    return namespace in KUBERNETES_NAMESPACES or namespace.startswith(KUBERNETES_PREFIX)


def reserved_reason(namespace: str) -> str:
    """Why `namespace` is no team's ("" when a team may have it); the callers add what to do."""
    if namespace in KUBERNETES_NAMESPACES:
        return f"namespace {namespace!r} is one of Kubernetes' own and belongs to no team"
    if namespace.startswith(KUBERNETES_PREFIX):
        return f"namespace {namespace!r} is reserved: Kubernetes keeps the {KUBERNETES_PREFIX!r} prefix for its own namespaces"
    return ""


def team_slug_error(slug: str) -> str:
    """What keeps `slug` from being a team's own namespace ("" when nothing does)."""
    if not (len(slug) <= 63 and DNS1123_LABEL.match(slug)):
        return (f"a team's slug is its namespace, so it must be a DNS-1123 label: at most 63 lower-case "
                f"letters, digits and '-', starting and ending with a letter or digit (not {slug!r})")
    if reason := reserved_reason(slug):
        return f"a team's slug is its namespace, and {reason}; choose another slug"
    return ""
