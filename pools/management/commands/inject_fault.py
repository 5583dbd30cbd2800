"""`manage.py inject_fault NODE --gpu 0 --xid 79`: the simulated cloud makes one GPU of a node's
machine raise an Xid; the node's agent reports it and auto-repair takes it from there (issue 6).
An operator's tool for demos and drills: it needs the simulated cloud."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from pools.core.errors import ConflictError, ValidationError
from pools.core.repair import classify
from pools.models import Node
from pools.providers.faults import gpu_fault_inject


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
