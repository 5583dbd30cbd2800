"""Reads of the repair pages (issue 21: "repair is hard to follow"): the repairs in progress
across the fleet (platform admins) or in one pool (its team), the requests waiting for an
admin, the latest repair outcomes, and, for one node, who replaced it or whom it replaces and
who pays for the slot. A bounded number of queries whatever the fleet's size.

A repair is in progress from the moment a faulty node is cordoned to wait until its reset or
reboot held, or, for a replacement, until the successor is Ready; a node the lifecycle does not
refill (a burst node, a pool at its `nodeCount.max` or being deleted: `refill_refused`) is done
once released, and its release is listed with the outcomes, saying why nothing replaces it.
A repair the pool's pause holds back is listed too, cordoned or not, with the pause's reason
read live from the same state the repair pass decides with (pools/selectors/repair_health.py):
before, a paused node that still took pods was missing from `/repairs/` while its condition said
"replacing". The pages poll while one is moving by itself; a request waiting for an admin, or a paused repair
(it waits for a person, or for the pool's faults to clear), does not move by itself, so it does
not poll.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from billing.models import LeasePeriod
from monitoring.models import AgentCommand, GpuErrorEvent
from pools.core.lifecycle import REPAIRED as REPAIR_RELEASE
from pools.core.repair import ACTIONABLE_XIDS, RepairGate, RepairPolicy
from pools.models import GpuNodePool, Node, PoolEvent
from pools.models.repair import RepairApproval
from pools.selectors.repair_health import (
    REPLACEMENT_WINDOW,
    WATCHED_PHASES,
    may_be_paused,
    pool_live_count,
    refill_refused,
    repair_states,
    watched_nodes,
    with_pool_fault_counts,
)

ROW_LIMIT = 200
OUTCOME_LIMIT = 100
OUTCOME_WINDOW = timedelta(days=7)
OUTCOME_REASONS = ("RepairStarted", "RepairSucceeded", "RepairFailed", "RepairPendingApproval", "RepairRejected", "RepairPaused", "NodeCordoned")
STAGE_REASONS = ("RepairStarted", "RepairFailed", "RepairPendingApproval", "RepairApproved", "NodeCordoned", "WaitingForFaultToPersist", "RepairPaused")


@dataclass(frozen=True)
class RepairRow:
    """One repair in progress, in plain words."""

    pool: str
    node: str
    phase: str
    stage: str
    since: datetime | None
    detail: str
    successor: Node | None
    moving: bool  # changes by itself (the page polls); False while it waits for a person


def _stage(node: Node, command: AgentCommand | None, approval: RepairApproval | None, paused: RepairGate | None, refused: str) -> tuple[str, bool]:
    if paused is not None:
        if node.phase == Node.Phase.CORDONED:
            return "repair paused (too many of the pool's nodes are unhealthy); cordoned: no new pods", False
        return "repair paused (too many of the pool's nodes are unhealthy); the node still takes new pods", False
    if node.phase == Node.Phase.REPAIRING:
        what = command.get_action_display() if command is not None else "repair"
        return f"{what} running on the node", True
    if node.phase == Node.Phase.CORDONED:
        if approval is not None and approval.status == RepairApproval.Status.PENDING:
            return f"cordoned, waiting for a platform admin to approve {approval.what}", False
        return "cordoned, waiting for its repair to start", True
    if node.phase != Node.Phase.TERMINATED:
        if refused:
            return f"being released: its pods move, then its machine is released; {refused}", True
        return "being replaced: its pods move, then its machine is released", True
    if node.successor is None:
        return "released; its replacement is being ordered", True
    return f"replaced by {node.successor.name}, which is {node.successor.phase}", True


def repairs_in_progress(*, user, pool: GpuNodePool | None = None, now: datetime | None = None) -> list[RepairRow]:
    """The repairs in progress the user may see (every team's for an admin), newest first: with
    them, the faulty nodes whose repair the pool's pause holds back (`_paused`)."""
    now = now or timezone.now()
    nodes = Node.objects.for_user(user).filter(pool__deleted_at__isnull=True)
    if pool is not None:
        nodes = nodes.filter(pool=pool)
    replacing = Q(release_reason=REPAIR_RELEASE) & (Q(terminated_at__isnull=True) | Q(terminated_at__gt=now - REPLACEMENT_WINDOW))
    since = now - RepairPolicy().window
    faulty = Q(phase__in=(Node.Phase.READY, Node.Phase.UNKNOWN), release_reason="") & Exists(
        GpuErrorEvent.objects.filter(node_id=OuterRef("pk"), at__gt=since, at__lte=now, xid__in=ACTIONABLE_XIDS)
    )  # a node that still takes pods is listed only when the pool's pause holds its repair back
    nodes = list(
        with_pool_fault_counts(nodes.filter(
            Q(phase__in=(Node.Phase.REPAIRING, Node.Phase.CORDONED), release_reason="")
            | (replacing & (Q(successor__isnull=True) | Q(successor__ready_at__isnull=True))) | faulty
        ), now).annotate(pool_live=pool_live_count()).select_related("pool", "successor").order_by("pool__name", "name")[:ROW_LIMIT]
    )  # fmt: skip
    refused = {n.pk: refill_refused(n, pool=n.pool, live=n.pool_live) for n in nodes if n.release_reason == REPAIR_RELEASE and n.successor_id is None}
    nodes = [n for n in nodes if not (refused.get(n.pk) and n.phase == Node.Phase.TERMINATED)]  # released, nothing to wait for: done
    pausable = {n.pool_id for n in nodes if n.phase in WATCHED_PHASES and not n.release_reason and may_be_paused(n)}
    paused = _paused(pausable, now) if pausable else {}
    nodes = [n for n in nodes if n.pk in paused or n.phase not in (Node.Phase.READY, Node.Phase.UNKNOWN) or n.release_reason]
    ids = [n.pk for n in nodes]
    commands: dict[int, AgentCommand] = {}
    for c in AgentCommand.objects.filter(node_id__in=ids, status=AgentCommand.Status.PENDING).order_by("created_at", "pk"):
        commands[c.node_id] = c
    approvals = {a.node_id: a for a in RepairApproval.objects.filter(node_id__in=ids, status__in=RepairApproval.OPEN)}
    latest: dict[int, PoolEvent] = {}
    for e in PoolEvent.objects.filter(node_id__in=ids, reason__in=STAGE_REASONS).order_by("last_timestamp", "pk"):
        latest[e.node_id] = e
    rows = []
    for n in nodes:
        gate = paused[n.pk][1] if n.pk in paused else None
        stage, moving = _stage(n, commands.get(n.pk), approvals.get(n.pk), gate, refused.get(n.pk, ""))
        event = latest.get(n.pk)
        since = event.first_timestamp if event is not None else None
        detail = "" if event is None else event.message + (f" (×{event.count})" if event.count > 1 else "")
        if gate is not None:  # the reason as the gate says it now, not an older event's
            since = event.first_timestamp if event is not None and event.reason == "RepairPaused" else None
            detail = gate.message
        rows.append(RepairRow(n.pool.name, n.name, n.phase, stage, since, detail, n.successor, moving))
    return sorted(rows, key=lambda r: r.since or now, reverse=True)


def _paused(pool_ids: set[int], now: datetime) -> dict[int, tuple[Node, RepairGate]]:
    """The nodes of these pools whose repair the pool's pause holds back now, with the gate's
    answer: four queries, run only for pools that may be paused (`may_be_paused`)."""
    out: dict[int, tuple[Node, RepairGate]] = {}
    for state in repair_states(nodes=watched_nodes(pool_ids), now=now).values():
        for node in state.nodes:
            gate = state.gate(node, now)
            if gate is not None and gate.reason == "RepairPaused":
                out[node.pk] = (node, gate)
    return out


def repair_approvals_open(*, user, pool: GpuNodePool | None = None) -> list[RepairApproval]:
    rows = RepairApproval.objects.for_user(user).filter(status__in=RepairApproval.OPEN, pool__deleted_at__isnull=True)
    if pool is not None:
        rows = rows.filter(pool=pool)
    return list(rows.select_related("pool", "node").order_by("-requested_at", "-id")[:ROW_LIMIT])


def repair_outcomes(*, user, pool: GpuNodePool | None = None, now: datetime | None = None) -> list[PoolEvent]:
    """The last week's repair events, newest first. A repair that released a node nothing
    replaces ends with the release (no successor, so no `RepairSucceeded`): its `NodeReleased`
    is listed, with `refill_note` saying why no replacement comes (`refill_refused`)."""
    now = now or timezone.now()
    released = Q(reason="NodeReleased", node__release_reason=REPAIR_RELEASE, node__successor__isnull=True)
    # A drain cordons its node too (a scale-down, a lease end): only a repair's cordon is listed.
    drained = Q(reason="NodeCordoned") & ~Q(node__release_reason__in=("", REPAIR_RELEASE))
    events = PoolEvent.objects.for_user(user).exclude(drained).filter(
        Q(reason__in=OUTCOME_REASONS) | released, last_timestamp__gt=now - OUTCOME_WINDOW, node__isnull=False, pool__deleted_at__isnull=True
    )
    if pool is not None:
        events = events.filter(pool=pool)
    rows = list(events.annotate(pool_live=pool_live_count()).select_related("pool", "node").order_by("-last_timestamp", "-id")[:OUTCOME_LIMIT])
    out = []
    for event in rows:
        event.refill_note = ""
        if event.reason == "NodeReleased":
            event.refill_note = refill_refused(event.node, pool=event.pool, live=event.pool_live)
            if not event.refill_note:  # its replacement is due: the repair is still in progress
                continue
        out.append(event)
    return out


def _when(moment: datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M} UTC"


def node_lineage(*, node: Node) -> dict:
    """Who replaced the node, whom it replaces, and who pays for the slot, in plain words.

    A replacement takes its predecessor's slot of the same paid order: from the hour it starts
    (`LeasePeriod.held_to` of the old node) it holds that share of the lease, so the team pays
    once per slot, never for both nodes (billing/lease_ledger.py)."""
    successor = Node.objects.filter(pk=node.successor_id).first() if node.successor_id else None
    predecessors = list(node.predecessors.order_by("name"))
    handed = dict(
        LeasePeriod.objects.filter(node__in=[node, *predecessors], held_to__isnull=False).order_by("held_to").values_list("node_id", "held_to")
    )
    lines = []
    if successor is not None:
        if node.billing == Node.Billing.ON_DEMAND:
            lines.append(f"Billed by the hour while it ran; that stopped when it was released. {successor.name} is billed from its own start.")
        else:
            paid = f" (paid until {_when(node.lease_end)})" if node.lease_end else ""
            at = handed.get(node.pk)
            since = f"from {_when(at)} " if at else ""
            lines.append(
                f"This node's share of the {node.get_billing_display().lower()} lease{paid} was paid once, with its order. "
                f"{successor.name} holds it {since}on: the team pays for one node in this slot, not for both."
            )
            if at:
                lines.append(f"The hours before {_when(at)} stay on {node.name}, including any it could not run.")
    elif node.release_reason == REPAIR_RELEASE and node.billing != Node.Billing.ON_DEMAND:
        lines.append("Its replacement will take over this node's share of the lease: the team does not pay twice for the slot.")
    for old in predecessors:
        at = handed.get(old.pk)
        since = f" from {_when(at)}" if at else ""
        if node.billing == Node.Billing.ON_DEMAND:
            lines.append(f"Replaces {old.name}; billed by the hour from its own start.")
        else:
            lines.append(f"Replaces {old.name} and holds its share of the lease{since}: no new order and no second charge.")
    return {"successor": successor, "predecessors": predecessors, "who_pays": lines}


def pool_nodes_linked(*, pool: GpuNodePool, limit: int = 500) -> list[Node]:
    """The pool's nodes, newest first, with their successor and predecessors (three queries)."""
    return list(pool.nodes.select_related("zone", "successor").prefetch_related("predecessors").order_by("-created_at", "-id")[:limit])
