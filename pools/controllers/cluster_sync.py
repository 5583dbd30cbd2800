"""What the real-cluster scheduler pass keeps in step besides pods and nodes, level-triggered:

- the team-isolation admission policy, with the pools, their `spec.sharedWith` and the
  namespaces' teams (design §1: the product keeps a ValidatingAdmissionPolicy in sync): two
  reads when nothing changed, an apply when our pools changed, the whole spec put back (and a
  WARNING) when someone changed the policy or its binding (the rule itself:
  pools/core/isolation.py; the comparison: pools/providers/kubernetes_admission.py);
- the PriorityClasses, which on a real cluster are the cluster's objects (one list): the
  read model's classes follow them, so pages, hints and the preemption check use its values.
"""

from __future__ import annotations

import logging

from pools.core.isolation import POLICY_NAME, admission_policy
from pools.providers.kubernetes_admission import AdmissionPolicies
from pools.providers.kubernetes_pods import ClusterPods
from pools.selectors.namespaces import namespace_teams
from pools.selectors.pools import pools_access
from pools.services.pod_mirror import priority_classes_replace

logger = logging.getLogger("ebcloud.scheduler")


def admission_policy_sync(policies: AdmissionPolicies | None = None) -> list[str]:
    """Apply the policy and its binding where the cluster's differ; returns the kinds applied.

    A spec someone else changed (isolation narrowed or switched off) is put back, and said by a
    WARNING naming what was changed: the operator learns that someone can edit the policy, and
    the pods admitted meanwhile were not checked (the cluster's other problems with this
    sync are WARNINGs of the same logger, `ebcloud.scheduler`)."""
    namespaces = namespace_teams()  # a team's own namespace (its slug) has no mapping row until its first pod
    pools = pools_access(with_nodes=True)
    policies = policies or AdmissionPolicies()
    applied = policies.sync(*admission_policy(pools, namespaces))
    for kind, changes in policies.restored.items():
        logger.warning(
            "team isolation: someone changed the %s %s: %s; put back as the product keeps it (pods admitted meanwhile were not checked)",
            kind, POLICY_NAME, "; ".join(changes),
        )  # fmt: skip
    if applied:
        logger.info("team isolation: applied %s for %d pools", " and ".join(applied), len(pools))
    return applied


def priority_classes_sync(cluster: ClusterPods | None = None) -> list[str]:
    """The read model's PriorityClasses as the cluster has them; returns the names changed."""
    changed = priority_classes_replace((cluster or ClusterPods()).priority_classes())
    if changed:
        logger.info("priority classes mirrored from the cluster: %s", ", ".join(changed))
    return changed
