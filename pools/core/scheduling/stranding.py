"""CPU-stranded GPU: idle GPU that a node's free CPU cannot feed (seed C3, P3; issue 22).

FGD's fragmentation (:mod:`pools.core.scheduling.fragmentation`) asks, shape by shape, whether
one more pod fits on a node. It does not see that a node with 6 idle GPUs and 4 free cores
will run one GPU pod and then strand 5 GPUs, and on Alibaba's trace that is where FGD's idle
GPU ends up: in shares on nodes whose CPU is used up. This module measures it with the
workload's own CPU-to-GPU ratio r (CPU milli its GPU pods ask per GPU milli):

    S_n = max(0, free GPU milli - free CPU milli / r)

the GPU milli the free CPU could not keep busy at the workload's mix. A placement that lowers
S_n (a CPU-light pod on a CPU-short node, a CPU-heavy pod where CPU is plentiful) keeps GPUs
usable. Pure and Django-free.
"""

from __future__ import annotations

from pools.core.scheduling.fragmentation import Workload
from pools.core.scheduling.nodes import NodeState, Pod


def cpu_per_gpu_milli(workload: Workload) -> float | None:
    """CPU milli the workload's GPU pods ask per GPU milli (count-weighted); None when the
    workload has no GPU pods, so that nothing can be stranded."""
    cpu = gpu = 0
    for shape, count in workload.shapes:
        if shape.gpu_count:
            cpu += shape.cpu_milli * count
            gpu += shape.gpu_count * shape.gpu_milli * count
    return cpu / gpu if gpu else None


class StrandingModel:
    """S_n for one workload, and how much a placement changes it."""

    def __init__(self, workload: Workload) -> None:
        self.ratio = cpu_per_gpu_milli(workload)

    def stranded(self, gpu_free_milli: int, cpu_free_milli: int) -> float:
        """GPU milli that ``cpu_free_milli`` cannot feed at the workload's ratio."""
        if not self.ratio:
            return 0.0
        return max(0.0, gpu_free_milli - cpu_free_milli / self.ratio)

    def node_stranded(self, node: NodeState) -> float:
        return self.stranded(node.gpu_free_milli, node.cpu_free)

    def placement_delta(self, pod: Pod, node: NodeState) -> float:
        """Change of S_n (GPU milli) if ``pod`` goes to ``node``: negative when it helps."""
        gpu, cpu = node.gpu_free_milli, node.cpu_free
        after = self.stranded(gpu - pod.gpu_request_milli, cpu - pod.cpu_milli)
        return after - self.stranded(gpu, cpu)
