"""A pool's phase, pendingReason and conditions from its node and order counts (T1: explain
every stall with numbers): the status rules, apart from the lifecycle's rules for nodes and
leases (`pools.core.lifecycle`, which counts a pool's rows into `PoolCounts`). No Django here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

# The phases in which a node the cluster runs no pod on counts as unavailable: Ready, or cordoned
# while its repair waits or runs (`Unknown` is counted as such).
FAULT_COUNTED_PHASES = ("Ready", "Cordoned", "Repairing")


@dataclass(frozen=True)
class PoolCounts:
    desired: int
    ready: int
    provisioning: int = 0
    unknown: int = 0
    unavailable: int = 0  # nodes the cluster runs no pod on (`cluster_fault`), cordoned for it or not: not counted in `ready`
    repairing: int = 0  # nodes cordoned for a repair or under one (a GPU fault, a lost heartbeat), not counted in `ready`
    draining: int = 0
    awaiting_orders: tuple[int, ...] = ()  # ids of Pending orders
    unpaid_orders: tuple[int, ...] = ()  # ids of Approved orders not paid yet (or being paid)
    min_nodes: int = 0  # the spec's nodeCount.min
    ordered: int = 0  # monthly nodes ordered (Pending, Approved, Paying or Paid) and not retired
    last_refusal: str = ""  # "order #3 Rejected: budget freeze"


def pool_status(*, counts: PoolCounts, stalls: Sequence[str], deleting: bool) -> tuple[str, str]:
    """The pool's (phase, pendingReason) from its node counts and this pass's stalls. Ready means
    the baseline (nodeCount.min) is Ready and nothing is on its way: no order awaiting approval
    or payment, no node provisioning or draining."""
    reasons = list(dict.fromkeys(s for s in stalls if s))
    if deleting:
        left = counts.ready + counts.unavailable + counts.repairing + counts.provisioning + counts.unknown + counts.draining
        return "Deleting", "; ".join([f"Draining: {left} node(s) left to drain and release", *reasons])
    if waiting := counts.awaiting_orders:  # each named: the one an update just filed is among them
        named = f"order #{waiting[0]} awaits" if len(waiting) == 1 else "orders " + ", ".join(f"#{o}" for o in waiting) + " await"
        reasons.append(f"OrderPending: {named} approval by a platform admin")
    if counts.unpaid_orders and not any(r.startswith(("InsufficientBalance", "PaymentDeclined", "QuotaExceeded")) for r in reasons):
        reasons.append(f"OrderApproved: order #{counts.unpaid_orders[0]} awaits payment")
    if counts.min_nodes > counts.ordered:
        refusal = f"; {counts.last_refusal}" if counts.last_refusal else ""
        reasons.append(f"BaselineNotOrdered: nodeCount.min is {counts.min_nodes} but {counts.ordered} monthly node(s) are ordered{refusal}")
    if counts.unavailable:
        reasons.append(f"NodeUnavailable: {counts.unavailable} node(s) the cluster runs no pod on (each node's NodeUnavailable event says why)")
    if counts.repairing:
        reasons.append(f"NodeRepairing: {counts.repairing} node(s) cordoned for repair or being repaired (each node's history says why)")
    if counts.ready < counts.desired and not reasons:
        reasons.append(f"WaitingForNodes: {counts.ready}/{counts.desired} Ready, {counts.provisioning} provisioning")
    if counts.unknown:
        reasons.append(f"NodeStatusUnknown: {counts.unknown} node(s) without heartbeat")
    if counts.unknown or counts.unavailable or counts.repairing:
        return "Degraded", "; ".join(reasons)
    if counts.desired == 0 and counts.ready == 0 and (counts.awaiting_orders or counts.min_nodes > counts.ordered) and not counts.unpaid_orders:
        return "Pending", "; ".join(reasons)
    growing = counts.ready < counts.desired or counts.draining or counts.unpaid_orders or counts.awaiting_orders
    if growing:
        return ("Provisioning" if counts.ready == 0 else "Scaling"), "; ".join(reasons)
    if counts.ready < counts.min_nodes:  # below the baseline and nothing on its way: the reason says why
        return "Degraded", "; ".join(reasons)
    return "Ready", "; ".join(reasons)


BILLING_KINDS = ("monthly", "on_demand", "preemptible")


def counts_by_billing(*, nodes: Sequence[tuple[str, str]], desired: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """Desired, current and Ready nodes per billing kind (`kubectl describe` shows these), from
    the live, non-draining nodes as (billing, phase) pairs."""
    counts = {}
    for kind in BILLING_KINDS:
        current = [phase for billing, phase in nodes if billing == kind]
        counts[kind] = {"desired": desired.get(kind, 0), "current": len(current), "ready": current.count("Ready")}
    return counts


def pool_conditions(*, counts: PoolCounts, phase: str, pending_reason: str, previous: Sequence[Mapping], now: datetime) -> list[dict]:
    """Kubernetes-style conditions; `lastTransitionTime` moves only when a status flips. `Ready`
    is True exactly when the phase is Ready: a Pending pool (its baseline not bought yet) is not
    Ready although 0 of its 0 nodes are, nor a pool whose growth awaits approval; the condition
    then gives the pendingReason's reason (`OrderPending`, `BaselineNotOrdered`, ...)."""
    ready = f"{counts.ready}/{counts.desired} node(s) Ready"
    unhealthy = [f"{n} {what}" for n, what in ((counts.unknown, "node(s) without heartbeat"), (counts.unavailable, "node(s) the cluster runs no pod on"),
                                               (counts.repairing, "node(s) under repair")) if n]  # fmt: skip
    if phase == "Ready":
        ready_check = (True, "AllNodesReady", "", ready)
    else:  # the condition says what the phase says, with the pendingReason's reason
        ready_check = (False, "AllNodesReady", pending_reason.split(":")[0] or "NodesNotReady", f"{ready}; {pending_reason}" if pending_reason else ready)
    wanted = (
        ("Ready", *ready_check),
        ("OrdersPaid", not counts.unpaid_orders, "Paid", "AwaitingPayment", f"{len(counts.unpaid_orders)} approved order(s) unpaid"),
        ("NodesHealthy", not unhealthy, "HeartbeatsReceived",
         "NodeStatusUnknown" if counts.unknown else "NodeUnavailable" if counts.unavailable else "NodeRepairing",
         ", ".join(unhealthy) or "0 node(s) without heartbeat"),
        ("Progressing", bool(counts.provisioning or counts.draining), "NodesChanging", "Stable", f"{counts.provisioning} provisioning, {counts.draining} draining"),
    )
    before = {c.get("type"): c for c in previous if isinstance(c, Mapping)}
    result = []
    for kind, ok, true_reason, false_reason, message in wanted:
        status = "True" if ok else "False"
        old = before.get(kind)
        since = old.get("lastTransitionTime") if old and old.get("status") == status else now.isoformat()
        result.append({"type": kind, "status": status, "reason": true_reason if ok else false_reason, "message": message, "lastTransitionTime": since})
    return result
