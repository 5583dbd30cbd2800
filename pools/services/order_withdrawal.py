"""Withdrawing an order its own pool takes back before payment: the pool is deleted, or its
`nodeCount.min` lowered below what is ordered.

Whoever withdraws it (the lead's delete or edit, the controller's pass over a Deleting pool),
it is one conditional UPDATE, so an order claimed for payment meanwhile (Approved -> Paying) is
left to the payment, one `OrderWithdrawn` event and one audit entry: an admin reading the audit
log sees every order that left the queue, not only those an edit trimmed.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from pools.models import GpuNodePool, PoolOrder
from pools.services.audit import audit_record
from pools.services.events import event_record


def order_withdraw(*, pool: GpuNodePool, order: PoolOrder, why: str, message: str, actor, now: datetime) -> bool:
    """Withdraw `order` (in the status it was read in) because of `why`; False when it is no
    longer in that status (paid, decided or withdrawn meanwhile), and nothing is written."""
    status = order.status
    with transaction.atomic():  # the withdrawal, its event and its audit entry, or none of them
        if not PoolOrder.objects.filter(pk=order.pk, status=status).update(
            status=PoolOrder.Status.WITHDRAWN, reason=why, decided_at=order.decided_at or now
        ):
            return False
        event_record(pool=pool, reason="OrderWithdrawn", message=message, actor=actor, now=now)
        audit_record(
            actor=actor, action="order.withdraw", obj=order,
            before={"status": status, "nodes": order.node_count, "amount": str(order.amount)},
            after={"status": PoolOrder.Status.WITHDRAWN, "reason": why},
        )  # fmt: skip
    return True
