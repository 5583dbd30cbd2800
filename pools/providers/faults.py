"""GPU faults of the simulated cloud, from injection to the node agent (issue 6: the simulated
GPU source is "driven by the simulated cloud's fault injection").

The path is the real one: a fault is raised on the simulated machine (here, or drawn by
`EBCLOUD_SIM_XID_RATE`); the node's agent — which never touches the database — fetches its own
machine's faults over HTTP with its node credential (`POST /api/agent/v1/simulated-faults/`)
and reports them as Xids; ingest, the repair ladder and the provider do the rest. With another
cloud provider there is nothing to inject and the endpoint does not exist (404).
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.utils import timezone

from pools import roles
from pools.core.errors import ConflictError
from pools.core.repair import classify
from pools.models import Node
from pools.models.cloud import SimGpuFault
from pools.providers import get_cloud_provider
from pools.providers.simulated import SimulatedCloud
from pools.services.audit import audit_record
from pools.services.events import WARNING, event_record


def simulated_cloud() -> SimulatedCloud | None:
    """The configured cloud when it is the simulated one, else None."""
    if settings.EBCLOUD_CLOUD_PROVIDER != "simulated":
        return None
    cloud = get_cloud_provider()
    return cloud if isinstance(cloud, SimulatedCloud) else None


def gpu_fault_inject(*, user, node: Node, gpu: int, xid: int, now: datetime | None = None) -> SimGpuFault:
    """Make GPU `gpu` of `node`'s simulated machine raise Xid `xid` (a platform admin on the node
    page, or an operator with `manage.py inject_fault`: `user` None). Raises PermissionDenied
    for anyone else, ConflictError when the cloud is not simulated or the node has no running
    machine, ValidationError for a GPU index or Xid out of range."""
    if user is not None and not roles.is_admin(user):
        raise PermissionDenied("only platform admins inject simulated GPU faults")
    cloud = simulated_cloud()
    if cloud is None:
        raise ConflictError("fault injection needs the simulated cloud (EBCLOUD_CLOUD_PROVIDER=simulated)")
    now = now or timezone.now()
    fault = cloud.inject_gpu_fault(node=node, gpu=gpu, xid=xid, now=now)
    who = user.get_username() if user is not None else "an operator"
    event_record(pool=node.pool, node=node, reason="GpuFaultInjected", type=WARNING, actor=user, now=now,
                 message=f"Simulated cloud: {who} made GPU {gpu} of {node.name} raise Xid {xid} "
                         f"({classify(xid).description}); the node agent reports it with its next report")  # fmt: skip
    audit_record(actor=user, action="simulator.gpu_fault", obj=fault, after={"node": node.name, "gpu": gpu, "xid": xid})
    return fault


def simulated_faults_take(*, node: Node, now: datetime | None = None) -> list[dict] | None:
    """The node's hardware faults not yet fetched, as the agent's Xid dicts
    (`{"id", "gpu", "xid", "at"}`), each handed out once; None when the cloud is not simulated."""
    cloud = simulated_cloud()
    if cloud is None:
        return None
    faults = cloud.gpu_faults_take(provider_id=node.provider_id, now=now or timezone.now())
    return [{"id": f.pk, "gpu": f.gpu_index, "xid": f.xid, "at": f.created_at.isoformat()} for f in faults]
