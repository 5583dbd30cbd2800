"""The optional admin approval gate of auto-repair (issue 6 §5; seed P4).

Some teams accept that a broken node heals itself; others want a person to agree before a
node's pods are moved or its machine is swapped. A pool opts in with
`autoRepairPolicy: {requireApproval: true}` (pools/core/spec.py). Then the repair service does not
act: it raises a request (`RepairPendingApproval`, Warning) that names the repair the ladder
chose; a platform admin approves or rejects it on the node page; the next repair pass starts an
approved request. Every transition is a conditional UPDATE on `status`, and the database keeps
one open request per node, so several workers, overlapping passes and double clicks still end
in exactly one repair. A rejection holds until the node raises a new Xid; a request the ladder
no longer wants (the fault cleared, the ladder climbed, the node left) is cancelled.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.utils import timezone

from pools import roles
from pools.core.errors import ConflictError, ValidationError, free_text
from pools.core.repair import RepairDecision
from pools.models import GpuNodePool, Node
from pools.models.repair import RepairApproval
from pools.services.audit import audit_record
from pools.services.events import WARNING, event_record

NOTE_MAX = RepairApproval._meta.get_field("note").max_length  # 300

Status = RepairApproval.Status


def approvals_latest(*, nodes: Iterable[Node], since: datetime) -> dict[int, RepairApproval]:
    """Each node's latest request raised after `since` (one query)."""
    latest: dict[int, RepairApproval] = {}
    for row in RepairApproval.objects.filter(node__in=list(nodes), requested_at__gt=since).order_by("requested_at", "pk"):
        latest[row.node_id] = row
    return latest


def _matches(row: RepairApproval, decision: RepairDecision) -> bool:
    return row.action == decision.action and (row.action != "reset_gpu" or row.gpu_index == decision.gpu_index)


def approval_gate(*, pool: GpuNodePool, node: Node, decision: RepairDecision, latest: RepairApproval | None,
                  last_fault_at: datetime | None, now: datetime) -> bool:  # fmt: skip
    """May the repair service start `decision` on `node` now? True once, when an approved request
    for this very repair is claimed (Approved -> Started). Otherwise it makes sure a request is
    waiting: it keeps a pending one, replaces one for another repair, respects a rejection
    until a newer fault, and raises a new one when none is open."""
    if latest is not None and latest.status in RepairApproval.OPEN:
        if _matches(latest, decision):
            if latest.status == Status.APPROVED:
                return RepairApproval.objects.filter(pk=latest.pk, status=Status.APPROVED).update(status=Status.STARTED, started_at=now) == 1
            return False
        _close(latest, note=f"superseded: the repair ladder now chooses {decision.action}", now=now)
    elif approval_rejected(latest=latest, decision=decision, last_fault_at=last_fault_at):
        return False
    _request(pool, node, decision, now)
    return False


def approval_rejected(*, latest: RepairApproval | None, decision: RepairDecision, last_fault_at: datetime | None) -> bool:
    """Whether a platform admin rejected this very repair since the node's last fault: it is not
    asked for again, and the node is left as it was before the request (uncordoned)."""
    return (
        latest is not None and latest.status == Status.REJECTED and _matches(latest, decision)
        and (last_fault_at is None or last_fault_at <= latest.decided_at)
    )  # fmt: skip


def approval_unclaim(*, node: Node, now: datetime) -> int:
    """Give back the approval claimed at `now` when starting its repair failed (a provider
    error): the next pass tries again without asking the admin twice."""
    return RepairApproval.objects.filter(node=node, status=Status.STARTED, started_at=now).update(status=Status.APPROVED, started_at=None)


def _request(pool: GpuNodePool, node: Node, decision: RepairDecision, now: datetime) -> None:
    try:
        with transaction.atomic():
            row = RepairApproval.objects.create(
                pool=pool, node=node, action=decision.action, gpu_index=decision.gpu_index, xid=decision.xid,
                reason=decision.reason[:60], message=decision.message, requested_at=now,
            )  # fmt: skip
    except IntegrityError:  # an overlapping pass raised it first: one open request per node
        return
    event_record(pool=pool, node=node, reason="RepairPendingApproval", type=WARNING, now=now,
                 message=f"Repair of {node.name} awaits a platform admin's approval: {row.what} — "
                         f"{decision.message or decision.reason} (autoRepairPolicy.requireApproval)")  # fmt: skip


def _close(row: RepairApproval, *, note: str, now: datetime) -> bool:
    done = RepairApproval.objects.filter(pk=row.pk, status__in=RepairApproval.OPEN).update(status=Status.CANCELLED, note=note[:300], decided_at=now)
    if done:
        event_record(pool=row.pool, node=row.node, reason="RepairApprovalCancelled", now=now,
                     message=f"Repair request for {row.what} of {row.node.name} cancelled: {note}")  # fmt: skip
    return bool(done)


def approvals_close(*, pool: GpuNodePool, keep: set[int], now: datetime, note: str = "no longer needed: no open fault on the node") -> int:
    """Cancel the pool's open requests except those of the nodes in `keep` (node ids still
    needing an approved repair). One query when nothing is open."""
    rows = RepairApproval.objects.filter(pool=pool, status__in=RepairApproval.OPEN).exclude(node_id__in=keep).select_related("pool", "node")
    return sum(_close(row, note=note, now=now) for row in rows)


def _decide(*, user, approval: RepairApproval, to: str, note: str, now: datetime | None) -> RepairApproval:
    if not roles.is_admin(user):
        raise PermissionDenied("only platform admins approve or reject repairs")
    now = now or timezone.now()
    done = RepairApproval.objects.filter(pk=approval.pk, status=Status.PENDING).update(status=to, decided_by=user, decided_at=now, note=note[:300])
    if not done:
        current = RepairApproval.objects.filter(pk=approval.pk).values_list("status", flat=True).first()
        raise ConflictError(f"this repair request is {current or 'gone'}, no longer pending")
    approval.refresh_from_db()
    audit_record(actor=user, action=f"repair.{to.lower()}", obj=approval, before={"status": Status.PENDING}, after={"status": to, "note": note})
    node = approval.node
    if to == Status.APPROVED:
        event_record(pool=approval.pool, node=node, reason="RepairApproved", actor=user, now=now,
                     message=f"{user.get_username()} approved {approval.what} of {node.name}; the next repair pass starts it")  # fmt: skip
    else:
        event_record(pool=approval.pool, node=node, reason="RepairRejected", type=WARNING, actor=user, now=now,
                     message=f"{user.get_username()} rejected {approval.what} of {node.name}" + (f": {note}" if note else "")
                             + "; nothing is done until the node raises a new fault, and the next pass lifts its cordon")  # fmt: skip
    return approval


def repair_approve(*, user, approval: RepairApproval, now: datetime | None = None) -> RepairApproval:
    """A platform admin lets a pending repair go ahead (the next pass starts it)."""
    return _decide(user=user, approval=approval, to=Status.APPROVED, note="", now=now)


def repair_reject(*, user, approval: RepairApproval, note: str = "", now: datetime | None = None) -> RepairApproval:
    """A platform admin refuses a pending repair; the node is left as it is until a new fault.
    The reason is required, as an order's rejection's is: the team's leads read it on the node's
    page, and a node left faulty needs one."""
    note = free_text(note, field="note", max_length=NOTE_MAX)
    if not note.strip():
        raise ValidationError("a reason is required: the team's leads read it on the node's page", field="note")
    return _decide(user=user, approval=approval, to=Status.REJECTED, note=note, now=now)

