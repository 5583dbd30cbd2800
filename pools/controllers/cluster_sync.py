"""What the real-cluster scheduler pass keeps in step besides pods and nodes, level-triggered:

- the team-isolation admission policy, with the pools, their `spec.sharedWith` and the
  namespaces' teams (design §1: the product keeps a ValidatingAdmissionPolicy in sync): two
  reads when nothing changed, an apply when our pools changed or someone changed the policy
  (the rule itself: pools/core/isolation.py);
- the PriorityClasses, which on a real cluster are the cluster's objects (one list): the
  read model's classes follow them, so pages, hints and the preemption check use its values.
"""

from __future__ import annotations

import logging

from pools.core.isolation import admission_policy
from pools.models import NamespaceTeam
from pools.providers.kubernetes_admission import AdmissionPolicies
from pools.providers.kubernetes_pods import ClusterPods
from pools.selectors.pools import pools_access
from pools.services.pod_mirror import priority_classes_replace

logger = logging.getLogger("ebcloud.scheduler")


def admission_policy_sync(policies: AdmissionPolicies | None = None) -> list[str]:
    """Apply the policy and its binding where the cluster's differ; returns the kinds applied."""
    namespaces = dict(NamespaceTeam.objects.values_list("namespace", "team__slug"))
    pools = pools_access()
    applied = (policies or AdmissionPolicies()).sync(*admission_policy(pools, namespaces))
    if applied:
        logger.info("team isolation: applied %s for %d pools", " and ".join(applied), len(pools))
    return applied


def priority_classes_sync(cluster: ClusterPods | None = None) -> list[str]:
    """The read model's PriorityClasses as the cluster has them; returns the names changed."""
    changed = priority_classes_replace((cluster or ClusterPods()).priority_classes())
    if changed:
        logger.info("priority classes mirrored from the cluster: %s", ", ".join(changed))
    return changed
