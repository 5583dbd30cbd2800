"""How a replacement ends (issue 21: "nothing links a replaced node to its successor, no 'repair
completed' event"; seed P4).

A node replaced by auto-repair is drained and released; the lifecycle controller orders its
successor into the same lease slot (`billing.lease_ledger.vacated_holder`). Two facts make that
followable: the old node names its successor (`Node.successor`, set in the same transaction as
the lease hand-over, so the link and the billing agree), and when the successor is Ready the old
node's timeline says the repair is done (`RepairSucceeded`), as a reset or a reboot does; when
the successor cannot be provisioned it says so (`RepairFailed`) and the next one is linked.
"""

from __future__ import annotations

from pools.controllers.context import ReconcilePass
from pools.core.lifecycle import REPAIRED as REPAIR_RELEASE
from pools.models import Node
from pools.services.events import WARNING


def successor_link(*, vacated: Node | None, successor: Node) -> None:
    """`successor` takes `vacated`'s place: the node it replaces points at it. A vacated node
    that never became Ready (its provisioning failed) never served, so the nodes it was to
    replace now point at the new one: a replaced node names the node that took its place."""
    if vacated is None:
        return
    Node.objects.filter(pk=vacated.pk, successor__isnull=True).update(successor=successor)
    if vacated.ready_at is None:
        Node.objects.filter(successor=vacated).exclude(pk=vacated.pk).update(successor=successor)


def replacement_failed(p: ReconcilePass, node: Node, summary: str) -> None:
    """`node` was given up on while provisioning: each node it was to replace after a repair
    gets `RepairFailed`; the lifecycle orders another node into the slot."""
    for old in Node.objects.filter(successor=node, release_reason=REPAIR_RELEASE).only("pk", "name"):
        p.event("RepairFailed", f"Replacement {node.name} of {old.name} could not be provisioned ({summary}); another node is ordered in its place", node=old, type=WARNING)


def replacement_ready(p: ReconcilePass, node: Node) -> None:
    """`node` just became Ready: each node it replaces after a repair gets `RepairSucceeded`."""
    for old in Node.objects.filter(successor=node, release_reason=REPAIR_RELEASE).only("pk", "name"):
        p.event("RepairSucceeded", f"Replacement of {old.name} succeeded: {node.name} is Ready in its place and holds its share of the lease from the next full hour", node=old)
