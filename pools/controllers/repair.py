"""Auto-repair (seed P4, T3; issue 6 §5): from the agents' Xid reports to a repaired node.

Per pool, each pass:
1. finishes repairs in progress: a node in `Repairing` whose agent acknowledged the reset or
   reboot is Ready again (`RepairSucceeded`), or stays down and climbs the ladder
   (`RepairFailed`);
2. asks the pure ladder (`pools.core.repair.next_action`) what each node needs, from its Xid events
   and past repairs (a node the cluster has run no pod on for 30 minutes is replaced:
   `unavailable_repair`), and the pool gate (`repair_allowed`) whether a repair may start: one at a
   time, the fault persisting 10 minutes (Xid 79 at once), paused with a Warning when more
   of the pool is unhealthy than its `autoRepairPolicy.maxUnhealthy` (20% by default; one
   `RepairPaused` per node while nothing changes, `_pause_said` reading every paused node's
   latest repair event in one query; a node with a fatal fault is cordoned all the same,
   `_paused`). What it reads is read the same way by the node page and the repair pages
   (pools/selectors/repair_health.py);
3. with `autoRepair: true` starts it: a GPU reset or a reboot is a node-local action, sent to
   the agent as a command in its report response (D1), with the node in `Repairing`
   (cordoned: the scheduler re-places its pods); a replacement drains the node and
   releases it through the cloud provider, and the lifecycle controller orders its successor
   into the same lease slot. With `autoRepair: false` it only alerts. With
   `autoRepairPolicy: {requireApproval: true}` it raises a request instead and starts the
   repair on the pass after a platform admin approved it (pools/services/repair.py).

A reset or reboot the agent has not acknowledged within `EBCLOUD_REPAIR_COMMAND_TIMEOUT_SECONDS`
fails (`_commands_expire`), as Karpenter's and EKS's node repair bound theirs: an agent that died
with its machine (a hung reset, a reboot that never came back) would otherwise leave the node
Repairing for ever and, the pool repairing one node at a time, every other fault waiting behind
it. The ladder then climbs (reset, reboot, replace), so a silent node ends up replaced.

A pool being deleted is not repaired: its nodes are drained and released for good, so a
replacement would promise a successor that never comes; its open approval requests are closed.

It runs under the lifecycle's per-pool claim, so it never overlaps reconcile or autoscale.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Count, F, Q, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from monitoring.models import AgentCommand
from monitoring.services import agent_command_enqueue, command_finish
from pools.claims import claim_acquire, claim_release
from pools.controllers.context import ReconcilePass
from pools.controllers.exits import drain_start
from pools.controllers.repair_cordon import (
    cluster_cordon,
    cordoned_by_someone,
    repair_uncordon,
    wait_cordon,
)
from pools.core import lifecycle as rules
from pools.core.node_labels import cluster_fault
from pools.core.repair import (
    NODE_UNAVAILABLE,
    NONE,
    REPLACE,
    NodeHealth,
    RepairPolicy,
    cordon_while_paused,
    repair_allowed,
    zones_held,
)
from pools.core.spec import parse_document
from pools.models import GpuNodePool, Node, PoolEvent
from pools.providers import get_cloud_provider, get_cluster_backend
from pools.selectors.pools import catalog_current
from pools.selectors.repair_health import WATCHED_PHASES, pool_repair_state
from pools.services.audit import audit_node_change, node_state
from pools.services.events import WARNING, event_record
from pools.services.repair import (
    approval_gate,
    approval_rejected,
    approval_unclaim,
    approvals_close,
    approvals_latest,
)

logger = logging.getLogger("ebcloud.repair")
REPAIR_RELEASE = rules.REPAIRED  # release_reason of a node replaced by auto-repair (not a retirement: the slot is refilled)
# Gates that make a faulty node wait (it is cordoned meanwhile: pools/controllers/repair_cordon.py).
# A pause is not one of them: more than a fifth of the pool failing at once points at a driver,
# an image or the network, and cordoning them all would take the pool's capacity for nothing;
# only a fatal fault is cordoned while paused (`pools.core.repair.cordon_while_paused`).
WAITING_FOR = {"WaitingForFaultToPersist": "the fault must persist before a repair", "RepairInProgress": "the pool repairs one node at a time"}
PAUSED = "RepairPaused"
# The node's events after which a pause is news again (`_pause_said`): what the repair did or
# waited for since. Other events (an agent's report, an injected fault) change nothing said.
PAUSE_RESETS = ("RepairStarted", "RepairSucceeded", "RepairFailed", "RepairNeeded", PAUSED, "RepairPendingApproval", "RepairApproved",
                "RepairRejected", "RepairApprovalCancelled", "WaitingForFaultToPersist", "NodeUncordoned")  # fmt: skip


def repair_all(*, now: datetime | None = None) -> int:
    """One pass over every live pool (the task and `manage.py repair --once`); returns repairs started."""
    now = now or timezone.now()
    started = 0
    _outages_hold(now)
    for pool_id in GpuNodePool.objects.active().values_list("pk", flat=True):
        try:
            started += pool_repair(pool_id=pool_id, now=now)
        except Exception:  # one broken pool must not stop the others; the next pass retries
            logger.exception("repair of pool %s failed", pool_id)
    return started


def _outages_hold(now: datetime) -> None:
    """Hold the faults of every zone held (`zones_held`: all of the fleet, or most of a zone, out
    of the cluster's use at once), so that no node there is replaced for it this pass, and its
    30 minutes count from the last pass that held it: a kubelet that posts a minute after the
    others, once a two-hour partition heals, gets its full grace, not a replacement at once.
    The pools' own pauses cannot see this when each pool has one node. `cluster_fault_since`
    keeps when the fault began (the Ready condition's lastTransitionTime, the repair's event).
    One conditional UPDATE: a fault cleared meanwhile is not held."""
    fleet = Node.objects.filter(pool__deleted_at__isnull=True, release_reason="", phase__in=WATCHED_PHASES)
    counts = fleet.values("zone_id", "zone__name").annotate(out=Count("pk", filter=~Q(cluster_fault="")), total=Count("pk")).order_by()
    names = {row["zone__name"]: row["zone_id"] for row in counts}
    held = zones_held({row["zone__name"]: (row["out"], row["total"]) for row in counts})
    if held:
        logger.warning("most nodes of zone(s) %s are out of the cluster's use at once: none is replaced for it until fewer are", ", ".join(sorted(held)))
        fleet.filter(zone_id__in=[names[zone] for zone in held]).exclude(cluster_fault="").update(cluster_fault_held_at=now)


def pool_repair(*, pool_id: int, now: datetime) -> int:
    version = claim_acquire(pool_id=pool_id)
    if version is None:
        return 0
    try:
        return _repair(GpuNodePool.objects.select_related("team").get(pk=pool_id), now)
    finally:
        claim_release(pool_id=pool_id, version=version)


def _repair(pool: GpuNodePool, now: datetime) -> int:
    if pool.phase == GpuNodePool.Phase.DELETING:  # its nodes leave for good: nothing to repair or replace
        approvals_close(pool=pool, keep=set(), now=now, note="the pool is being deleted: its nodes are released, not repaired")
        return 0
    spec = parse_document(pool.document, catalog_current())
    policy = RepairPolicy()
    nodes = list(pool.nodes.filter(phase__in=WATCHED_PHASES, release_reason=""))
    cluster = get_cluster_backend()
    since = now - policy.window
    _commands_expire(pool, nodes, now)
    state = pool_repair_state(pool_id=pool.pk, nodes=nodes, now=now, policy=policy, max_unhealthy=spec.repair_max_unhealthy)
    for node in [n for n in nodes if n.phase == Node.Phase.REPAIRING]:
        _finish(pool, node, state.last_command.get(node.pk), cluster, now)
    decisions, health = state.decisions, state.health
    started = 0
    said: dict[int, PoolEvent] | None = None  # the waiting nodes' latest repair events, read at the first pause
    gated = spec.auto_repair and spec.repair_requires_approval
    approvals = approvals_latest(nodes=nodes, since=since) if gated else {}
    if gated:
        approvals_close(pool=pool, keep={n.pk for n in nodes if decisions[n.pk].action != NONE}, now=now)
    else:
        approvals_close(pool=pool, keep=set(), now=now, note="the pool no longer asks for approval (autoRepair / autoRepairPolicy changed)")
    for node in nodes:
        decision = decisions[node.pk]
        if node.phase == Node.Phase.REPAIRING:
            continue
        if decision.action == NONE:
            if node.phase == Node.Phase.CORDONED:
                repair_uncordon(pool=pool, node=node, cluster=cluster, now=now, why=f"no GPU fault waits for repair ({decision.message or decision.reason})")
            continue
        last_fault = max(filter(None, (state.xids[node.pk][-1].at if state.xids.get(node.pk) else None,
                                       node.cluster_fault_since if decision.reason == NODE_UNAVAILABLE else None)), default=None)
        if gated and approval_rejected(latest=approvals.get(node.pk), decision=decision, last_fault_at=last_fault):
            _rejected(pool, node, next(h for h in health if h.name == node.name), cluster, now)
            continue
        gate = repair_allowed(health, node=node.name, now=now, max_unhealthy=spec.repair_max_unhealthy)
        if gate.reason == PAUSED:
            if said is None:  # after `approvals_close`, whose cancellations are repair events too
                said = _latest_repair_events([n.pk for n in nodes if decisions[n.pk].action != NONE and n.phase != Node.Phase.REPAIRING])
            _paused(pool, spec, node, decision, gate, next(h for h in health if h.name == node.name), cluster, now, said.get(node.pk))
            continue
        if not gate.allowed:
            if gate.event_type == "Warning" or gate.reason != "RepairInProgress":
                event_record(pool=pool, node=node, reason=gate.reason, message=gate.message, type=gate.event_type, now=now)
            if gate.reason in WAITING_FOR and spec.auto_repair:
                wait_cordon(pool=pool, node=node, cluster=cluster, waiting_for=WAITING_FOR[gate.reason], now=now)
            continue
        if not spec.auto_repair:
            event_record(pool=pool, node=node, reason="RepairNeeded", type=WARNING, now=now,
                         message=f"{decision.message or decision.reason}; autoRepair is off: repair {node.name} by hand ({decision.action})")  # fmt: skip
            continue
        if decision.reason == NODE_UNAVAILABLE and not _still_unavailable(node, cluster):
            continue  # back, or the cluster cannot be read now: the lifecycle pass records which
        if gated and not approval_gate(pool=pool, node=node, decision=decision, latest=approvals.get(node.pk), last_fault_at=last_fault, now=now):
            wait_cordon(pool=pool, node=node, cluster=cluster, waiting_for="a platform admin's approval", now=now)
            continue
        try:
            _start(pool, spec, node, decision, cluster, now)
        except Exception:
            if gated:  # the approval stays usable: the next pass retries the start
                approval_unclaim(node=node, now=now)
            raise
        started += 1
        health = [h if h.name != node.name else NodeHealth(h.name, False, h.unhealthy_since, h.fatal, True) for h in health]
    return started


def _rejected(pool: GpuNodePool, node: Node, health: NodeHealth, cluster, now: datetime) -> None:
    """A platform admin rejected the node's repair: no gate is waited for and nothing is asked
    again until a new fault. The cordon its request put on the node is lifted, so that it takes
    pods again, unless its GPU cannot be reached (a fatal Xid: no new pod could use it, as
    while a pause holds, `cordon_while_paused`)."""
    if node.phase == Node.Phase.CORDONED and not cordon_while_paused(health):
        repair_uncordon(pool=pool, node=node, cluster=cluster, now=now, why="a platform admin rejected its repair, so it takes pods again")


def _still_unavailable(node: Node, cluster) -> bool:
    """Whether the cluster still runs no pod on `node`, read now, before it is replaced for it.
    Its row says what the last lifecycle pass read; a pass that could not read the cluster
    since left a fault standing that may be over (a kubelet restarted meanwhile), and a
    replacement costs its tenants their pods: EKS and Karpenter act on the Node's condition as
    it is. A read that fails replaces nothing this pass."""
    try:
        observed = cluster.nodes_state(names=[node.name])
    except Exception:  # an API server out of reach decides nothing
        logger.warning("reading Node %s before replacing it failed; the next pass asks again", node.name, exc_info=True)
        return False
    return bool(cluster_fault(observed.get(node.name), name=node.name, gpu_count=node.gpu_count))


def _paused(pool: GpuNodePool, spec, node: Node, decision, gate, health: NodeHealth, cluster, now: datetime, latest: PoolEvent | None) -> None:
    """The pool is paused (more than its limit unhealthy): start nothing on `node`, and say so once.

    A fatal fault is cordoned all the same (`cordon_while_paused`: its GPU is gone whatever the
    cause), when the pool repairs itself at all (`autoRepair`; without it nothing is cordoned,
    as nothing is while a fault waits). The `RepairPaused` Warning is written once while nothing
    changes (`_pause_said`), as `ScaleDownBlocked` is: the issue's ×370 in 17 minutes said
    nothing the first one had not; the pages read the pause live (pools/selectors/repair_health.py)."""
    if spec.auto_repair and cordon_while_paused(health):
        wait_cordon(pool=pool, node=node, cluster=cluster, now=now,
                    waiting_for="auto repair is paused, and its GPU cannot be reached, so no new pod could use it")  # fmt: skip
    if node.cluster_fault:
        meanwhile = "the cluster places no pod on it meanwhile"
    elif node.phase == Node.Phase.CORDONED:
        meanwhile = "it stays cordoned meanwhile (no new pods; running pods stay)"
    elif not spec.auto_repair:
        meanwhile = "it still takes new pods: autoRepair is off, so nothing cordons or repairs it by itself"
    else:
        meanwhile = "it still takes new pods meanwhile: a fault this wide may not be its own hardware's"
    what = decision.message or decision.reason
    message = f"Repair of {node.name} ({decision.action}) not started: {gate.message}. The fault: {what}; {meanwhile}"
    if not _pause_said(latest, message):
        event_record(pool=pool, node=node, reason=PAUSED, message=message, type=WARNING, now=now)


def _pause_said(latest: PoolEvent | None, message: str) -> bool:
    """Whether the node's latest repair event (`latest`, from `_latest_repair_events`) is this
    very pause: a pause that goes on with the same unhealthy count and the same fault is not
    written again (one event while nothing changes). A repair, a wait or a new count in between
    makes the next pause news again."""
    return latest is not None and latest.reason == PAUSED and latest.message == message


def _latest_repair_events(node_ids: list[int]) -> dict[int, PoolEvent]:
    """Each node's latest event among `PAUSE_RESETS`, by node id, in one query (a window ranks
    each node's events): a paused pass read one per paused node, so a pool-wide pause of a big
    pool cost a query per faulty node every pass. Read before any of these nodes is visited, it
    stays true for each of them: a pass writes a node's repair events only while visiting it,
    and `_paused` writes none before it asks (its `NodeCordoned` is not one)."""
    rank = Window(RowNumber(), partition_by=F("node_id"), order_by=(F("last_timestamp").desc(), F("pk").desc()))
    rows = PoolEvent.objects.filter(node_id__in=node_ids, reason__in=PAUSE_RESETS).annotate(rank=rank).filter(rank=1)
    return {e.node_id: e for e in rows.only("node_id", "reason", "message")}


def _commands_expire(pool: GpuNodePool, nodes: list[Node], now: datetime) -> None:
    """Fail each reset or reboot still Pending `EBCLOUD_REPAIR_COMMAND_TIMEOUT_SECONDS` after it
    was queued: the agent is gone (its machine hung, a reboot never came back) or never took it.
    Each is one conditional UPDATE, so an acknowledgement that won the race stands, and one that
    comes later finds nothing Pending (`commands_ack`) and changes nothing; a Failed command is
    no longer delivered. The node's `_finish` then writes `RepairFailed` with the reason, and the
    ladder, reading the attempt as failed, climbs. A node that is not Repairing (its row was
    moved meanwhile) gets `AgentCommandFailed`, as a failure its agent reported would."""
    timeout = timedelta(seconds=settings.EBCLOUD_REPAIR_COMMAND_TIMEOUT_SECONDS)
    by_pk = {n.pk: n for n in nodes}
    stale = AgentCommand.objects.filter(node__in=nodes, action__in=("reset_gpu", "reboot"), status=AgentCommand.Status.PENDING, created_at__lte=now - timeout)
    for command in stale.order_by("pk"):
        message = f"timed out: the node's agent did not acknowledge it within {rules.format_duration(timeout)}"
        if not command_finish(command_id=command.pk, node_id=command.node_id, status=AgentCommand.Status.FAILED, message=message, now=now):
            continue
        node = by_pk[command.node_id]
        if node.phase != Node.Phase.REPAIRING:
            event_record(pool=pool, node=node, reason="AgentCommandFailed", type=WARNING, now=now, message=f"{command.get_action_display()} on {node.name} failed: {message}")


def _start(pool: GpuNodePool, spec, node: Node, decision, cluster, now: datetime) -> None:
    what = f"{decision.action} of {node.name}" + (f" GPU {decision.gpu_index}" if decision.gpu_index is not None else "")
    before, detail = node_state(node), {"repair": decision.action, "gpu": decision.gpu_index, "reason": decision.reason}  # audit: actor None = the system
    if decision.action == REPLACE:
        p = ReconcilePass(pool=pool, spec=spec, now=now, cloud=get_cloud_provider(), cluster=cluster)
        after = "released and replaced" if node.billing != Node.Billing.ON_DEMAND else "released (an on-demand node holds no lease to refill: the autoscaler adds a node if its pods need one)"
        drain_start(p, node, reason=REPAIR_RELEASE, event_reason="RepairStarted", type=WARNING,
                    message=f"Repair started: {what} — {decision.message or decision.reason}; the node is drained, {after}")  # fmt: skip
        audit_node_change(actor=None, action="repair.started", node=node, before=before, **detail)
        return
    # One transaction: a worker killed between these writes must not leave a node Repairing
    # with no command for its agent (no pass would ever finish or retry it) or without its event.
    was_cordoned = node.phase == Node.Phase.CORDONED  # cordoned in the cluster while it waited
    if not was_cordoned:
        node.cordon_theirs = cordoned_by_someone(cluster, node)
    with transaction.atomic():
        Node.objects.filter(pk=node.pk).update(phase=Node.Phase.REPAIRING, unschedulable=True, cordon_theirs=node.cordon_theirs)
        agent_command_enqueue(node=node, action=decision.action, gpu_index=decision.gpu_index, reason=decision.reason, now=now)
        note = "" if was_cordoned else cluster_cordon(node=node, cluster=cluster, on=True)
        event_record(pool=pool, node=node, reason="RepairStarted", type=WARNING, now=now,
                     message=f"Repair started: {what} — {decision.message or decision.reason}; the node is cordoned and its pods move{note}")  # fmt: skip
        audit_node_change(actor=None, action="repair.started", node=node, before=before, **detail)


def _finish(pool: GpuNodePool, node: Node, command: AgentCommand | None, cluster, now: datetime) -> None:
    """End a reset or reboot the agent answered. A success lifts the cluster's cordon first,
    then moves the row Repairing -> Ready with its `RepairSucceeded` event in one transaction:
    a pass killed after the (idempotent) uncordon finds the row still Repairing and does it
    again, so the event is written once, and a row is never Ready while our cordon holds in the
    cluster (the drift check re-cordons a Repairing row meanwhile: pools/controllers/node_sync.py).
    A failure keeps the cordon: Repairing -> Cordoned with its `RepairFailed` event, one
    transaction too. Both UPDATEs are conditional, so a pass that finds the row moved writes
    nothing."""
    if command is None or command.status == AgentCommand.Status.PENDING:
        return
    before = node_state(node)
    if command.status == AgentCommand.Status.SUCCEEDED:
        note = cluster_cordon(node=node, cluster=cluster, on=False)
        with transaction.atomic():
            if not Node.objects.filter(pk=node.pk, phase=Node.Phase.REPAIRING).update(phase=Node.Phase.READY, unschedulable=False, cordon_theirs=False):
                return
            node.phase, node.unschedulable = Node.Phase.READY, False
            event_record(pool=pool, node=node, reason="RepairSucceeded", now=now, message=f"{command.get_action_display()} of {node.name} succeeded: the node takes pods again{note}")
            audit_node_change(actor=None, action="repair.succeeded", node=node, before=before, repair=command.action, gpu=command.gpu_index)
        return
    with transaction.atomic():
        if not Node.objects.filter(pk=node.pk, phase=Node.Phase.REPAIRING).update(phase=Node.Phase.CORDONED):
            return
        node.phase = Node.Phase.CORDONED
        event_record(pool=pool, node=node, reason="RepairFailed", type=WARNING, now=now,
                     message=f"{command.get_action_display()} of {node.name} failed ({command.message or 'no detail'}): the next pass climbs the repair ladder")  # fmt: skip
        audit_node_change(actor=None, action="repair.failed", node=node, before=before, repair=command.action, gpu=command.gpu_index, message=command.message)
