"""Helpers of the live autoscaler tests: the scaling block of the article's pool, GPU memory reports,
and a pod put on a node as a scheduler bind would."""

from __future__ import annotations

from monitoring.models import NodeAgentState
from pools.models import Node, Pod
from tests.pools.pod_helpers import T0

SCALING = {
    "default": {
        "metrics": [
            {"type": "Resource", "resource": "gpu-memory", "targetAverageUtilization": 85},
            {"type": "Pods", "pods": "queued_pods", "target": 10},
        ],
        "combine": "Any",
    },
    "scaleDown": {"stabilizationWindow": "30m", "policies": [{"type": "Pods", "value": 1, "periodSeconds": 120}]},
}


def memory_used(pool, percent: int) -> None:
    """What the node agents report: GPU memory used on every Ready node of the pool."""
    for node in pool.nodes.filter(phase="Ready"):
        NodeAgentState.objects.update_or_create(node=node, defaults={"fb_used_mib": percent * 8, "fb_total_mib": 800, "last_report_at": T0})


def run_on(pod: Pod, node: Node, gpus: list[int]) -> None:
    """The pod Running on these GPUs of the node since T0, as a scheduler bind leaves it."""
    Pod.objects.filter(pk=pod.pk).update(phase=Pod.Phase.RUNNING, node=node, gpu_indices=gpus, started_at=T0)
