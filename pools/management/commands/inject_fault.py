"""`manage.py inject_fault NODE --gpu 0 --xid 79`: the simulated cloud makes one GPU of a node's
machine raise an Xid; the node's agent reports it and auto-repair takes it from there (issue 6).
An operator's tool for demos and drills: it needs the simulated cloud.

When the fault will take the node's pool above the number of unhealthy nodes it tolerates, the
command says so: auto repair then pauses (`RepairPaused`) instead of repairing, and a drill that
expected a replacement should not leave its operator guessing why none came."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from pools.core.errors import ConflictError, ValidationError
from pools.core.repair import NONE, classify
from pools.models import Node
from pools.providers.faults import gpu_fault_inject
from pools.selectors.repair_health import WATCHED_PHASES, pool_repair_state, watched_nodes


class Command(BaseCommand):
    help = "Make a GPU of a node's simulated machine raise an NVIDIA Xid error (e.g. 48: ECC DBE, 79: fell off the bus)."

    def add_arguments(self, parser):
        parser.add_argument("node", help="Node name, e.g. train-pool-a-m-0")
        parser.add_argument("--gpu", type=int, default=0, help="GPU index on the node (default 0)")
        parser.add_argument("--xid", type=int, required=True, help="Xid number, e.g. 48 or 79")

    def handle(self, *args, node: str, gpu: int, xid: int, **options):
        target = Node.objects.select_related("pool").filter(name=node).first()
        if target is None:
            raise CommandError(f"no node named {node!r}")
        try:
            fault = gpu_fault_inject(user=None, node=target, gpu=gpu, xid=xid)
        except (ConflictError, ValidationError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"Xid {xid} ({classify(xid).description}) raised on GPU {gpu} of {node} (fault #{fault.pk}); "
                          "the node agent reports it with its next report")
        if (note := _pause_note(target, xid)) is not None:
            self.stderr.write(self.style.WARNING(note))


def _pause_note(node: Node, xid: int) -> str | None:
    """What to expect when this fault pauses the pool's auto repair, or None when it will not."""
    if classify(xid).action == NONE or node.phase not in WATCHED_PHASES or node.release_reason:
        return None
    state = pool_repair_state(pool_id=node.pool_id, nodes=watched_nodes([node.pool_id]), now=timezone.now())
    sick = sorted({h.name for h in state.health if not h.healthy} | {node.name})
    total = len(state.health)
    limit = state.limit  # the pool's autoRepairPolicy.maxUnhealthy (20% by default)
    if len(sick) <= limit:
        return None
    return (f"note: with this fault {len(sick)} of {total} nodes of pool {node.pool.name} are unhealthy ({', '.join(sick)}), "
            f"more than the {limit} it tolerates: auto repair pauses (RepairPaused) instead of repairing until fewer are. "
            "A node whose GPU fell off the bus (Xid 79) is cordoned meanwhile; see /repairs/.")
