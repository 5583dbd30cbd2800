"""Helpers of the auto-repair tests: Xid error events and agent command acknowledgements."""

from __future__ import annotations

from monitoring.models import AgentCommand, GpuErrorEvent
from pools.core.repair import classify
from tests.pools.pod_helpers import T0


def xid(node, number, *, at, gpu=0, seq=1):
    kind = classify(number)
    return GpuErrorEvent.objects.create(node=node, report_seq=seq, position=0, gpu_index=gpu, xid=number, at=at, kind=kind.kind, action=kind.action)


def ack(command, ok=True):
    AgentCommand.objects.filter(pk=command.pk).update(status="Succeeded" if ok else "Failed", finished_at=T0)
