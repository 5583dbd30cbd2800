"""The cordon a scale-down decision sets, and the one a stopped pass leaves behind.

The autoscaler cordons the burst nodes it chose in the decision's transaction (the row's
`unschedulable`, which the scheduler and the scheduler extender read), as Cluster Autoscaler
taints a node ToBeDeletedByClusterAutoscaler as part of its decision, and the drain follows in
the same pass (pools/controllers/autoscaler.py, `_scale_down`). A worker that stops in between
(killed, its task past its timeout, an error between the commit and the drain) leaves the node
cordoned, here and, once the drain had cordoned it there, in the cluster, with nothing to drain
or uncordon it: the next scale-down takes it first only if it is empty, and a node with pods
would stay cordoned for good, its capacity lost. Cluster Autoscaler removes its leftover taints
when it starts (`CleanAllToBeDeleted`) and un-taints a node whose drain failed; here every
autoscale pass that acts on the pool settles them first (`cordons_left_settle`), and a pool
with a cordoned Ready node is acted on (`FleetView.cordoned`).

Which cordon is the decision's is what the decision recorded, never a guess: a
`ScaleDownCordoned` event on the node, written with the cordon in one transaction. A node is a
leftover while its row is Ready (or Unknown: its agent silent), cordoned and not leaving, and the
latest cordon event of any kind on it is that one (`CORDON_EVENTS`). A repair's cordon puts the
row in a cordoned phase (Cordoned, Repairing) and records its own events after the decision's,
and a row cordoned without the decision's event (by anyone else) has none to find: neither is
ever lifted here. (What the rows cannot tell: an administrator's `kubectl cordon` of a node
the decision chose, set in the cluster alone, is lifted with the decision's cordon, as the
drain's own cancel lifts it, `drain_start`.)

The bound on the wait for the drain is the pool's claim time (`EBCLOUD_RECONCILE_CLAIM_SECONDS`,
`pools.claims.claim_ttl`). The decision and its drain run moments apart in one pass under the
pool's claim, and a claim expires after that time, when another worker may take the pool over:
a decision's cordon older than that whose drain has not started belongs to a pass that stopped
(or one so slow it lost the pool: its late drain and this settling then meet in the conditional
UPDATEs below, and the node is drained or uncordoned once).
The drain timeout (`EBCLOUD_DRAIN_TIMEOUT_SECONDS`, ten minutes by default) would be the other
candidate, but it bounds how long evictions may take, not how long a node waits for its drain
to begin; a user expects a stopped pass's leftovers to be put right by the next passes (within
two minutes with the defaults), not the node's capacity held from Pending pods that long.

A leftover is drained now if its pods, checked again as the drain checks them, may go
(`PodsRecheck`: the decision is carried out, late), else uncordoned, each with an event that
says which and why. Only under the pool's claim (as the autoscaler serialises its work per pool), and
idempotent besides: the drain claims the node with a conditional UPDATE, and the uncordon is
one too, its event written only by the worker whose UPDATE changed the row.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction

from pools.claims import claim_ttl
from pools.controllers.context import ReconcilePass
from pools.controllers.exits import drain_start
from pools.controllers.node_sync import REPAIR_CORDONS, REPAIR_UNCORDONS
from pools.controllers.scale_down import PodsRecheck
from pools.core import lifecycle as rules
from pools.core.spec import PoolSpec
from pools.models import GpuNodePool, Node, PoolEvent
from pools.providers import get_cloud_provider, get_cluster_backend
from pools.providers.base import ProviderError
from pools.services.events import WARNING, event_record

SCALE_DOWN_CORDONED = "ScaleDownCordoned"
SCALE_DOWN_UNCORDONED = "ScaleDownUncordoned"
# The events that say who changed a node's cordon last: a scale-down decision, this module, a repair.
CORDON_EVENTS = (SCALE_DOWN_CORDONED, SCALE_DOWN_UNCORDONED, *REPAIR_CORDONS, *REPAIR_UNCORDONS)
LEFTOVER_PHASES = (Node.Phase.READY, Node.Phase.UNKNOWN)  # the phases a cordon says nothing of (not a drain's or a repair's)


def cordon_bound() -> timedelta:
    """How long a decision's cordon waits for its drain before it is settled (module docstring)."""
    return claim_ttl()


def decision_cordon(pool: GpuNodePool, chosen: list[Node], now: datetime) -> set[int]:
    """Cordon the nodes a scale-down chose, in the decision's transaction: from its commit on,
    the scheduler (and a real cluster's scheduler extender) places no pod there; the drain
    cordons the cluster's Node. Each gets a `ScaleDownCordoned` event with it, which is what
    tells its cordon from anyone else's (module docstring). Returns those this cordoned: one
    cordoned already (a repair's) keeps its cordon if its scale-down is cancelled."""
    fresh = [node for node in chosen if not node.unschedulable]
    if not fresh:
        return set()
    with transaction.atomic():  # the plan's transaction, or its own on a real cluster
        Node.objects.filter(pk__in=[node.pk for node in fresh]).update(unschedulable=True)
        for node in fresh:
            event_record(pool=pool, node=node, reason=SCALE_DOWN_CORDONED, now=now,
                         message=f"Node {node.name} cordoned by the autoscaler's scale-down: no new pods are scheduled on it; it is drained next")  # fmt: skip
    return {node.pk for node in fresh}


def cordons_left(pool: GpuNodePool, now: datetime) -> list[tuple[Node, datetime]]:
    """The pool's nodes a scale-down decision cordoned longer than `cordon_bound()` ago whose
    drain never started, each with when it was cordoned: two queries, one when no Ready node
    is cordoned."""
    nodes = list(Node.objects.filter(pool=pool, phase__in=LEFTOVER_PHASES, unschedulable=True, release_reason="").order_by("name"))
    if not nodes:
        return []
    latest: dict[int, tuple[str, datetime]] = {}
    rows = PoolEvent.objects.filter(node__in=nodes, reason__in=CORDON_EVENTS).order_by("node_id", "-last_timestamp", "-pk")
    for node_id, reason, at in rows.values_list("node_id", "reason", "last_timestamp"):
        latest.setdefault(node_id, (reason, at))
    before = now - cordon_bound()
    return [(node, latest[node.pk][1]) for node in nodes if latest.get(node.pk, ("", now))[0] == SCALE_DOWN_CORDONED and latest[node.pk][1] <= before]


def cordons_left_settle(pool: GpuNodePool, spec: PoolSpec, now: datetime) -> bool:
    """Drain or uncordon each of the pool's leftover cordons (`cordons_left`), with an event
    that says which and why; True when there was one. Call under the pool's claim."""
    left = cordons_left(pool, now)
    if not left:
        return False
    p = ReconcilePass(pool=pool, spec=spec, now=now, cloud=get_cloud_provider(), cluster=get_cluster_backend())
    for node, at in left:
        stopped = f"the scale-down that cordoned it at {at:%H:%M:%S} UTC did not start its drain within {rules.format_duration(cordon_bound())} (the pass that decided it stopped)"
        message = f"Autoscaler removes burst node {node.name}: {stopped}; its pods, checked again, may go"
        if why := drain_start(p, node, reason=rules.SCALED_IN, event_reason="ScaledDown", message=message, recheck=PodsRecheck(p.cluster, [(node, [])])):
            _uncordon(p, node, f"{stopped}; checked again, it is kept: {why}")
    return True


def _uncordon(p: ReconcilePass, node: Node, said: str) -> None:
    """Make a leftover schedulable again: the cluster's Node first (`drain_start` lifted the
    cordon it set, but does not say whether the cluster took it), then the row with its event.
    A cluster that cannot be changed now leaves both cordoned, said, and the next pass tries
    again (the row's cordon is still the decision's)."""
    try:
        p.cluster.uncordon(name=node.name)
    except ProviderError as exc:
        p.event("NodeUpdateFailed", f"Node {node.name} stays cordoned: {said}; the cluster could not uncordon it now ({exc.message}), the next pass tries again", node=node, type=WARNING)
        return
    with transaction.atomic():
        if Node.objects.filter(pk=node.pk, phase__in=LEFTOVER_PHASES, unschedulable=True, release_reason="").update(unschedulable=False):
            p.event(SCALE_DOWN_UNCORDONED, f"Node {node.name} takes new pods again: {said}", node=node, type=WARNING)
