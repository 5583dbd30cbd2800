"""How a replacement ends (issue 21: "nothing links a replaced node to its successor, no 'repair
completed' event"; seed P4).

A node replaced by auto-repair is drained and released; the lifecycle controller orders its
successor into the same lease slot (`billing.lease_ledger.vacated_holder`). Two facts make that
followable: the old node names its successor (`Node.successor`, set in the same transaction as
the lease hand-over, so the link and the billing agree), and when the successor is Ready the old
node's timeline says the repair is done (`RepairSucceeded`), as a reset or a reboot does.
"""

from __future__ import annotations

from pools.controllers.context import ReconcilePass
from pools.core.lifecycle import REPAIRED as REPAIR_RELEASE
from pools.models import Node


def successor_link(*, vacated: Node | None, successor: Node) -> None:
    """`successor` takes `vacated`'s place: the node it replaces points at it (the first link
    holds: a node is replaced once)."""
    if vacated is not None:
        Node.objects.filter(pk=vacated.pk, successor__isnull=True).update(successor=successor)


def replacement_ready(p: ReconcilePass, node: Node) -> None:
    """`node` just became Ready: each node it replaces after a repair gets `RepairSucceeded`."""
    for old in Node.objects.filter(successor=node, release_reason=REPAIR_RELEASE).only("pk", "name"):
        p.event("RepairSucceeded", f"Replacement of {old.name} succeeded: {node.name} is Ready in its place and holds its share of the lease from now on", node=old)
