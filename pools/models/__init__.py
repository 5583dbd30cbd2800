"""The pool domain's models, one module per sub-domain; Django finds them all here.

- `pools`: teams, memberships, the catalog, quotas, pools, orders, nodes, events, scaling
  activities and the audit log.
- `pods`: pods of the simulated cluster (and the read model of a real one), priority classes,
  fragmentation samples.
- `cluster`: namespaces' teams and the pod mirror's cursor (a real cluster).
- `repair`: repair requests awaiting an admin's approval.
- `notifications`: what a team must be told (budget and capacity alerts), delivered once.
- `cloud`: the simulated cloud's state and the controllers' per-pool claims.
- `lookups`: `__any_of`, a list as one array parameter on PostgreSQL.
"""

from pools.models import lookups  # noqa: F401 (registers `__any_of`)
from pools.models.cloud import (
    PoolClaim,
    SimClusterNode,
    SimFailure,
    SimGpuFault,
    SimMachine,
    SimPayment,
    SimStock,
)
from pools.models.cluster import NamespaceTeam, WatchCursor
from pools.models.notifications import Notification
from pools.models.pods import FragmentationSample, Pod, PodDisruptionBudget, PriorityClass
from pools.models.pools import (
    AuditEntry,
    GpuModel,
    GpuNodePool,
    Membership,
    Node,
    NodeType,
    PoolChildQuerySet,
    PoolEvent,
    PoolOrder,
    PoolQuerySet,
    Quota,
    ScalingActivity,
    Team,
    TeamScopedQuerySet,
    Zone,
)
from pools.models.repair import RepairApproval

__all__ = [
    "AuditEntry",
    "FragmentationSample",
    "GpuModel",
    "GpuNodePool",
    "Membership",
    "NamespaceTeam",
    "Node",
    "Notification",
    "NodeType",
    "Pod",
    "PodDisruptionBudget",
    "PoolChildQuerySet",
    "PoolClaim",
    "PoolEvent",
    "PoolOrder",
    "PoolQuerySet",
    "PriorityClass",
    "Quota",
    "RepairApproval",
    "ScalingActivity",
    "SimClusterNode",
    "SimFailure",
    "SimGpuFault",
    "SimMachine",
    "SimPayment",
    "SimStock",
    "Team",
    "TeamScopedQuerySet",
    "WatchCursor",
    "Zone",
]
