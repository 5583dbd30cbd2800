"""Reads of the node page (issue 6: "repair history on the node page"): one node with what its
agent last reported, its credential, its pods, and its repair history — a bounded number of
queries whatever the history's length (each list is capped, then merged in Python).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.http import Http404
from django.utils import timezone

from monitoring.models import (
    AgentCommand,
    AgentCredential,
    GpuErrorEvent,
    NodeAgentState,
    NodeReport,
    credential_grace_until,
)
from pools.core import repair
from pools.models import Node, PoolEvent
from pools.models.pods import Pod
from pools.models.repair import RepairApproval
from pools.selectors.repair_health import (
    WATCHED_PHASES,
    may_be_paused,
    pool_repair_state,
    watched_nodes,
    with_pool_fault_counts,
)

HISTORY_LIMIT = 100
REPAIR_REASONS = (
    "RepairStarted", "RepairSucceeded", "RepairFailed", "RepairNeeded", "RepairPaused", "RepairPendingApproval",
    "RepairApproved", "RepairRejected", "RepairApprovalCancelled", "GpuFaultInjected", "AgentCommandSucceeded",
    "AgentCommandFailed", "CudaDriverMismatch", "CudaDriverMismatchResolved", "WaitingForFaultToPersist", "NodeCordoned",
    "NodeUncordoned", "NodeReleased",
)  # fmt: skip
OUTCOME = {AgentCommand.Status.SUCCEEDED: True, AgentCommand.Status.FAILED: False, AgentCommand.Status.PENDING: None}


@dataclass(frozen=True)
class HistoryEntry:
    """One line of the repair history: an event, an agent command issued or acknowledged, or an Xid."""

    at: datetime
    source: str  # "event" | "command" | "xid"
    type: str  # Normal | Warning
    reason: str
    message: str


def node_get(*, user, pool_name: str, node_name: str) -> Node:
    """The node of that live pool, if the user may see the pool; otherwise 404 (another team's
    node does not exist for a lead)."""
    nodes = Node.objects.for_user(user).select_related("pool", "pool__team", "pool__gpu_model", "pool__node_type", "zone")
    node = with_pool_fault_counts(nodes, timezone.now()).filter(pool__name=pool_name, pool__deleted_at__isnull=True, name=node_name).first()
    if node is None:
        raise Http404(f"node {node_name!r} of pool {pool_name!r} not found")
    return node


def _credentials(node: Node, now: datetime) -> list[AgentCredential]:
    """The node's latest credentials, each with `grace_until`: when one rotated out stops
    working, unless the new one is used first (None once it does not work)."""
    credentials = AgentCredential.objects.filter(node=node).annotate(grace_until=credential_grace_until(now))
    return list(credentials.order_by("-created_at", "-id")[:5])


def _ready_condition(node: Node) -> dict:
    if node.cluster_fault:  # whatever its phase, the cluster places nothing there (the NodeUnavailable event)
        since = node.cluster_fault_since.isoformat() if node.cluster_fault_since else ""
        return {"type": "Ready", "status": "False", "reason": "NodeUnavailable", "message": f"the cluster runs no pod on it: {node.cluster_fault}", "lastTransitionTime": since}
    # A cordon or drain leaves the kubelet Ready (kubectl's "Ready,SchedulingDisabled"); a repair's
    # reset or reboot takes it down.
    status = {"Ready": "True", "Cordoned": "True", "Draining": "True", "Unknown": "Unknown"}.get(node.phase, "False")
    messages = {
        "Ready": "the node takes pods",
        "Unknown": "the node agent's heartbeat is overdue; its pods keep running",
        "Repairing": "the node is being repaired: no new pods",
        "Cordoned": "Ready, SchedulingDisabled: cordoned, no new pods",
        "Draining": f"Ready, SchedulingDisabled: draining before release ({node.release_reason or 'released'})",
    }
    return {"type": "Ready", "status": status, "reason": f"Node{node.phase}", "message": messages.get(node.phase, f"phase {node.phase}"),
            "lastTransitionTime": (node.ready_at.isoformat() if node.ready_at and node.phase == "Ready" else "")}  # fmt: skip


def _hardware_condition(xids: list[GpuErrorEvent], commands: list[AgentCommand], now: datetime, node: Node) -> dict:
    """EKS's `AcceleratedHardwareReady`, from the same ladder the repair service runs. When a
    repair is due, the pool gate's answer for the node is read too (`_gate`): a repair the
    pool's pause holds back is said to be paused, and why, instead of promising the ladder's
    action (the issue's "…replacing the node" on a node that stayed Ready for 17 minutes)."""
    window = repair.RepairPolicy().window
    history = [repair.XidEvent(xid=x.xid, at=x.at, gpu_index=x.gpu_index) for x in xids if x.at > now - window]
    history += [
        repair.RepairAttempt(action=c.action, at=c.created_at, succeeded=OUTCOME[c.status], gpu_index=c.gpu_index)
        for c in commands if c.action in repair.LADDER and c.created_at > now - window
    ]  # fmt: skip
    decision = repair.next_action(history, now)
    healthy = decision.action == repair.NONE and decision.reason != "RepairInProgress"
    message = decision.message or ("repair needed: " + decision.action)
    gate = _gate(node, now) if decision.action != repair.NONE else None  # a healthy node's page reads no more
    if gate is not None and gate.reason == "RepairPaused":
        message += f" — {decision.action} not started: {gate.message}"
    return {"type": "AcceleratedHardwareReady", "status": "True" if healthy else "False", "reason": decision.reason,
            "message": message, "lastTransitionTime": ""}  # fmt: skip


def _gate(node: Node, now: datetime) -> repair.RepairGate | None:
    """The repair gate's answer for the node, as the repair pass would give it, when its pool
    may be paused (`may_be_paused`, from the counts `node_get` read with the node; four queries
    then); None for a node the pass does not watch, or whose pool cannot be paused now."""
    if node.phase not in WATCHED_PHASES or node.release_reason:
        return None
    if not hasattr(node, "pool_faulty"):  # a node not read by `node_get`
        node = with_pool_fault_counts(Node.objects.filter(pk=node.pk).select_related("pool"), now).get()
    if not may_be_paused(node):
        return None
    state = pool_repair_state(pool_id=node.pool_id, nodes=watched_nodes([node.pool_id]), now=now)
    return next((state.gate(n, now) for n in state.nodes if n.pk == node.pk), None)


# An Xid's class and the repair's first step, as the history says them (pools/core/repair.py).
XID_MEANING = {
    ("application", "none"): "an application's error; the GPU is fine, nothing to repair",
    ("reset", "reset_gpu"): "the GPU needs a reset; the repair starts with one",
    ("fatal", "replace"): "a fatal fault; the node is replaced",
    ("unknown", "none"): "not in NVIDIA's catalog; nothing is repaired for it, a person should look",
}


def _history(events, commands, xids) -> list[HistoryEntry]:
    entries = [HistoryEntry(e.last_timestamp, "event", e.type, e.reason, e.message + (f" (×{e.count})" if e.count > 1 else "")) for e in events]
    for c in commands:
        gpu = f" GPU {c.gpu_index}" if c.gpu_index is not None else ""
        delivered = f"; delivered to the agent {c.delivered_at:%Y-%m-%d %H:%M:%S}" if c.delivered_at else "; not yet delivered"
        entries.append(HistoryEntry(c.created_at, "command", "Normal", "CommandIssued", f"{c.get_action_display()}{gpu}: {c.reason}{delivered}"))
        if c.finished_at:
            ok = c.status == AgentCommand.Status.SUCCEEDED
            entries.append(HistoryEntry(c.finished_at, "command", "Normal" if ok else "Warning", f"Command{c.status}",
                                        f"{c.get_action_display()}{gpu} acknowledged by the agent: {c.message or c.status}"))  # fmt: skip
    for x in xids:
        gpu = "unknown GPU" if x.gpu_index is None else f"GPU {x.gpu_index}"
        entries.append(HistoryEntry(x.at, "xid", "Normal" if x.kind == "application" else "Warning", f"Xid{x.xid}",
                                    f"Xid {x.xid}{f' ({x.mnemonic})' if x.mnemonic else ''} on {gpu}: {XID_MEANING.get((x.kind, x.action), f'{x.kind}, then {x.action}')}"))  # fmt: skip
    return sorted(entries, key=lambda e: e.at, reverse=True)[:HISTORY_LIMIT]


def node_page(*, user, node: Node, now: datetime | None = None) -> dict:
    """Everything the node page shows, in a fixed number of queries."""
    now = now or timezone.now()
    state = NodeAgentState.objects.filter(node=node).first()
    report = NodeReport.objects.filter(node=node).order_by("-seq").only("seq", "at", "received_at", "gpus", "driver_version", "cuda_version").first()
    commands = list(AgentCommand.objects.filter(node=node).order_by("-created_at", "-id")[:HISTORY_LIMIT])
    xids = list(GpuErrorEvent.objects.filter(node=node).order_by("-at", "-id")[:HISTORY_LIMIT])
    events = list(PoolEvent.objects.filter(node=node, reason__in=REPAIR_REASONS).select_related("actor").order_by("-last_timestamp", "-id")[:HISTORY_LIMIT])
    approvals = list(RepairApproval.objects.filter(node=node).select_related("decided_by").order_by("-requested_at", "-id")[:10])
    recent = now - timedelta(hours=24)
    per_gpu: dict[int | None, int] = {}
    for x in xids:
        if x.at > recent:
            per_gpu[x.gpu_index] = per_gpu.get(x.gpu_index, 0) + 1
    gpus = [{**g, "xids_24h": per_gpu.get(g.get("index"), 0)} for g in (report.gpus if report else []) if isinstance(g, dict)]
    conditions = [_ready_condition(node), _hardware_condition(xids, commands, now, node), *((state.conditions or []) if state else [])]
    return {
        "state": state,
        "report": report,
        "gpus": gpus,
        "conditions": conditions,
        "credentials": _credentials(node, now),
        "pods": list(Pod.objects.for_user(user).filter(node=node, phase=Pod.Phase.RUNNING).order_by("namespace", "name")[:200]),
        "approvals": approvals,
        "open_approval": next((a for a in approvals if a.status in RepairApproval.OPEN), None),
        "history": _history(events, commands, xids),
    }
