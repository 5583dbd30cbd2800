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
autoscale pass that acts on the pool lifts them first (`cordons_left_settle`), and a pool
with a cordoned Ready node is acted on (`FleetView.cordoned`).

Which cordon is the decision's is what the decision recorded, never a guess: a
`ScaleDownCordoned` event on the node, written with the cordon in one transaction. A node is a
leftover while its row is Ready (or Unknown: its agent silent), cordoned and not leaving, and the
latest cordon event of any kind on it is that one (`CORDON_EVENTS`). A repair's cordon puts the
row in a cordoned phase (Cordoned, Repairing) and records its own events after the decision's,
and a row cordoned without the decision's event (by anyone else) has none to find: neither is
ever lifted here. What the rows cannot tell, the cluster's Node does: an administrator's
`kubectl cordon` of a node the decision chose, set in the cluster alone, carries no drain's
mark (`ClusterBackend.cordon`), so the cluster keeps it while the row's cordon is lifted, as a
drain the pass itself cancels keeps it (`PodsRecheck.cordons_lift`).

The bound on the wait for the drain is the pool's claim time (`EBCLOUD_RECONCILE_CLAIM_SECONDS`,
`pools.claims.claim_ttl`). The decision and its drain run moments apart in one pass under the
pool's claim, and a claim expires after that time, when another worker may take the pool over:
a decision's cordon older than that whose drain has not started belongs to a pass that stopped
(or one so slow it lost the pool: its late drain claims the node with a conditional UPDATE,
and this settling lifts only a row no drain has claimed, so each acts on the node once).
The drain timeout (`EBCLOUD_DRAIN_TIMEOUT_SECONDS`, ten minutes by default) would be the other
candidate, but it bounds how long evictions may take, not how long a node waits for its drain
to begin; a user expects a stopped pass's leftovers to be put right by the next passes (within
two minutes with the defaults), not the node's capacity held from Pending pods that long.

A leftover's cordon is always lifted, never drained on the stale decision: that decision was
taken from a cluster that has changed since (kube-scheduler may have filled the free GPUs its
pods were to move to while the node was cordoned, and the pool may want its capacity now), and
the drain's own check (`PodsRecheck`) reads the pods' annotations and disruption budgets, not
whether they fit elsewhere nor whether the pool still scales down. Cluster Autoscaler's
`CleanAllToBeDeleted` likewise removes the taints and leaves the node to its next decision: the
scale-down that follows (in the same pass, or a later one) decides again from the current state
and may choose the node again, with a cordon, check and drain of its own. The cordon is lifted
in the cluster first, then on the row, with one `ScaleDownUncordoned` event that says why. Only
under the pool's claim (as the autoscaler serialises its work per pool), and idempotent besides:
the row's uncordon is a conditional UPDATE, its event written only by the worker whose UPDATE
changed the row.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction

from pools.claims import claim_ttl
from pools.controllers.node_sync import REPAIR_CORDONS, REPAIR_UNCORDONS
from pools.core import lifecycle as rules
from pools.core.node_labels import LEFTOVER_PHASES
from pools.models import GpuNodePool, Node, PoolEvent
from pools.providers import get_cluster_backend
from pools.providers.base import ClusterBackend, ProviderError
from pools.services.events import WARNING, event_record

SCALE_DOWN_CORDONED = "ScaleDownCordoned"
SCALE_DOWN_UNCORDONED = "ScaleDownUncordoned"
# The events that say who changed a node's cordon last: a scale-down decision, this module, a repair.
CORDON_EVENTS = (SCALE_DOWN_CORDONED, SCALE_DOWN_UNCORDONED, *REPAIR_CORDONS, *REPAIR_UNCORDONS)


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


def cordons_left_settle(pool: GpuNodePool, now: datetime) -> bool:
    """Lift each of the pool's leftover cordons (`cordons_left`), with an event that says why;
    True when there was one. Never drains: the next scale-down decides again (module
    docstring). Call under the pool's claim."""
    left = cordons_left(pool, now)
    if not left:
        return False
    cluster = get_cluster_backend()
    for node, at in left:
        said = (f"the scale-down that cordoned it at {at:%H:%M:%S} UTC did not start its drain within {rules.format_duration(cordon_bound())} "
                "(the pass that decided it stopped); the next scale-down decides again from the current state")  # fmt: skip
        _uncordon(pool, cluster, node, said, now)
    return True


def _uncordon(pool: GpuNodePool, cluster: ClusterBackend, node: Node, said: str, now: datetime) -> None:
    """Make a leftover schedulable again: the cluster's Node first (the stopped pass may have
    cordoned it there too, with the drain's mark), then the row with its event, so that the row
    never says schedulable while kube-scheduler still sees the drain's cordon. A cordon someone
    else set in the cluster stays, and the event says so. A cluster that cannot be changed now
    leaves both cordoned, said, and the next pass tries again (the row's cordon is still the
    decision's)."""
    try:
        schedulable = cluster.uncordon(name=node.name, mark=True)
    except ProviderError as exc:
        event_record(pool=pool, node=node, reason="NodeUpdateFailed", type=WARNING, now=now,
                     message=f"Node {node.name} stays cordoned: {said}; the cluster could not uncordon it now ({exc.message}), the next pass tries again")  # fmt: skip
        return
    kept = "" if schedulable else f"; the cluster keeps the cordon of its Node, which someone else set (kubectl cordon), or which the cluster no longer records as the autoscaler's (kubectl uncordon {node.name} lifts it)"
    with transaction.atomic():
        if Node.objects.filter(pk=node.pk, phase__in=LEFTOVER_PHASES, unschedulable=True, release_reason="").update(unschedulable=False):
            event_record(pool=pool, node=node, reason=SCALE_DOWN_UNCORDONED, type=WARNING, now=now, message=f"Node {node.name} takes new pods again: {said}{kept}")
