"""One reconcile of one pool (`ReconcilePass`): what the lifecycle steps work on, shared by the
lifecycle controller (pools/controllers/lifecycle.py), the exits (pools/controllers/exits.py)
and repair (pools/controllers/repair.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import QuerySet

from pools.core.node_labels import ClusterNodeState
from pools.core.spec import PoolSpec
from pools.models import GpuNodePool, Node
from pools.providers.base import CloudProvider, ClusterBackend
from pools.services.events import NORMAL, event_record


@dataclass
class ReconcilePass:
    """One reconcile of one pool: what it works on and the stalls it found (for pendingReason)."""

    pool: GpuNodePool
    spec: PoolSpec
    now: datetime
    cloud: CloudProvider
    cluster: ClusterBackend
    notices: dict[str, datetime] | None = None  # the cloud's reclaim notices, read once per pass over all pools
    observed: Mapping[str, ClusterNodeState] | None = None  # the cluster's nodes, read once per pass over all pools
    stalls: list[str] = field(default_factory=list)
    hold_generation: bool = False  # the spec is not rolled out to every node yet: observedGeneration stays

    def stall(self, text: str) -> None:
        self.stalls.append(text)

    def live_nodes(self) -> QuerySet[Node]:
        return Node.objects.filter(pool=self.pool).exclude(phase=Node.Phase.TERMINATED).select_related("zone").order_by("name")

    def event(self, reason: str, message: str, *, node: Node | None = None, type: str = NORMAL) -> None:
        event_record(pool=self.pool, node=node, reason=reason, message=message, type=type, now=self.now)
