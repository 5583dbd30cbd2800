"""A node with an unrepaired GPU fault takes no new pods while it waits for its repair (issue 21:
an Xid 48 left its node Ready and taking pods for the ten minutes the fault had to persist, and
the autoscaler then scaled it in unrepaired).

NVIDIA's catalog puts a reset-class Xid (46, 48, 62, 64, 74, 95, ...) in a bucket whose immediate
action is a GPU reset: until then the GPU is in a bad state and new work on it fails. So while
the repair pass waits (for the fault to persist, for the pool's one repair at a time, for an
admin's approval) the node is cordoned, as `kubectl cordon` does: `spec.unschedulable` on the
cluster's Node, `unschedulable` and phase `Cordoned` on our row (the scheduler, the extender and
the autoscaler's scale-in read those). Running pods stay: a cordon evicts nothing, and the
repair itself moves them. When no fault is left open (an application Xid, the fault aged out
of the ladder's window, a reset or reboot that held) the node is uncordoned.

The row's phase says whether our cordon must hold, so the writes are ordered for a pass killed
between the cluster call and the row: a cordon writes the row first (Ready -> Cordoned), then
calls the cluster; an uncordon calls the cluster first, then writes the row (-> Ready) with its
event in one transaction. Either way, what a killed pass left is a row in a cordoned phase
(`CORDONED_PHASES`) that the next pass finishes (the repair pass calls the cluster again, an
idempotent call) and that the drift check keeps cordoned meanwhile (pools/controllers/node_sync.py):
never a Ready row with our cordon left in the cluster, which nothing would lift (a Ready node
cordoned in the cluster is, for the drift check, an administrator's `kubectl cordon`).
"""

from __future__ import annotations

import logging

from django.db import transaction

from pools.models import GpuNodePool, Node
from pools.providers.base import ClusterBackend
from pools.services.events import WARNING, event_record

logger = logging.getLogger("ebcloud.repair")


def _cluster_call(cluster: ClusterBackend, name: str, *, cordon: bool, theirs: bool = False) -> str:
    """Run the cluster's cordon/uncordon; the cordon marked as the control plane's own (`mark`,
    as a drain's), the uncordon leaving a cordon someone set before ours (`theirs`: a node an
    administrator keeps free with `kubectl cordon` stays so when its repair ends or is
    rejected). A failure, or a cordon left as theirs, is told in the event (the control
    plane's own view, which its scheduler, extender and autoscaler read, is already right)."""
    try:
        done = cluster.cordon(name=name, mark=True) if cordon else cluster.uncordon(name=name, mark=theirs)
    except Exception as exc:  # an unreachable API server must not stop the repair pass
        logger.warning("cordon change of %s in the cluster failed", name, exc_info=True)
        how = "cordon" if cordon else "uncordon"
        return f" (the cluster's Node could not be updated: {str(exc)[:200]}; run kubectl {how} {name} to match)"
    if not cordon and theirs and done is False:
        return f" (the cordon someone else set on the cluster's Node before the repair's stays theirs: kubectl uncordon {name} lifts it)"
    return ""


def cordoned_by_someone(cluster: ClusterBackend, node: Node) -> bool:
    """Whether the cluster's Node is cordoned already, before the repair cordons a node whose
    row says it takes pods: someone else's cordon then (`Node.cordon_theirs`), to leave when the
    repair's ends. A read that fails counts it as not (the repair's cordon is lifted whole, as
    a cordon set before this was recorded is: its rows say nothing of whose it was)."""
    try:
        state = cluster.nodes_state(names=[node.name]).get(node.name)
    except Exception:  # an API server out of reach decides nothing here
        logger.warning("reading Node %s before cordoning it failed", node.name, exc_info=True)
        return False
    return bool(state is not None and state.unschedulable)


def wait_cordon(*, pool: GpuNodePool, node: Node, cluster: ClusterBackend, waiting_for: str, now) -> bool:
    """Cordon a Ready node whose repair has to wait; True when this call cordoned it. One
    conditional UPDATE (Ready -> Cordoned), so overlapping passes cordon once and write one
    `NodeCordoned` event; the row before the cluster (module docstring: a pass killed between
    leaves a Cordoned row, which the drift check cordons in the cluster)."""
    if node.phase != Node.Phase.READY:
        return False
    theirs = cordoned_by_someone(cluster, node)
    if not Node.objects.filter(pk=node.pk, phase=Node.Phase.READY).update(phase=Node.Phase.CORDONED, unschedulable=True, cordon_theirs=theirs):
        return False
    node.phase, node.unschedulable, node.cordon_theirs = Node.Phase.CORDONED, True, theirs
    note = _cluster_call(cluster, node.name, cordon=True)
    event_record(pool=pool, node=node, reason="NodeCordoned", type=WARNING, now=now,
                 message=f"Node {node.name} cordoned while its GPU fault waits for repair ({waiting_for}): "
                         f"no new pods are placed on it; running pods stay until the repair moves them{note}")  # fmt: skip
    return True


def repair_uncordon(*, pool: GpuNodePool, node: Node, cluster: ClusterBackend, why: str, now) -> bool:
    """Make a node cordoned for a repair schedulable again; True when this call did it. The
    cluster first (idempotent), then one conditional UPDATE (Cordoned -> Ready) with its
    `NodeUncordoned` event in one transaction (module docstring: a pass killed in between
    leaves the row Cordoned, and the next pass uncordons again)."""
    if node.phase != Node.Phase.CORDONED:
        return False
    note = _cluster_call(cluster, node.name, cordon=False, theirs=node.cordon_theirs)
    with transaction.atomic():
        if not Node.objects.filter(pk=node.pk, phase=Node.Phase.CORDONED).update(phase=Node.Phase.READY, unschedulable=False, cordon_theirs=False):
            return False
        node.phase, node.unschedulable, node.cordon_theirs = Node.Phase.READY, False, False
        event_record(pool=pool, node=node, reason="NodeUncordoned", now=now,
                     message=f"Node {node.name} takes new pods again: {why}{note}")  # fmt: skip
    return True


def cluster_cordon(*, node: Node, cluster: ClusterBackend, on: bool) -> str:
    """Set or lift the cluster's cordon of a node whose reset or reboot starts or held (our row
    says so already, and whether a cordon was someone else's first); returns what to add to the
    event when the cluster could not be updated or keeps theirs."""
    return _cluster_call(cluster, node.name, cordon=on, theirs=node.cordon_theirs)
