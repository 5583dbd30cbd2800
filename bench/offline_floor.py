"""The offline floor of the trace experiment: the least unallocated GPU % any placement could
reach if every arrived pod were known in advance (issue 4 §6b).

An LP relaxation, aggregated per node type (nodes with the same CPU, memory, GPU count and
model): x[s, t] = how many pods of shape s go to nodes of type t, fractional. Each node type's
total CPU, memory and GPU milli bound what it takes; a pod never goes to a type with fewer GPUs
than it asks for, or of a model its gpuSpec excludes; at most the arrived count of each shape is
placed. Maximising the GPU placed gives an upper bound on any real (integral, per-node)
placement, so 100 − that is a floor no scheduler can beat. It is loose — per-node packing and
per-GPU shares are relaxed — which is why it sits near 0% (see ../shared/data/README.md).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from pools.core.scheduling.nodes import NodeState, Pod

try:  # scipy is a test/bench extra: the product never needs an LP solver
    from scipy.optimize import linprog
except ImportError:  # pragma: no cover - reported by the caller
    linprog = None


def _shape(pod: Pod) -> tuple:
    return (pod.cpu_milli, pod.memory_mib, pod.gpu_count, pod.gpu_request_milli, tuple(sorted(pod.gpu_models)))


def offline_floor(nodes: Sequence[NodeState], pods: Sequence[Pod]) -> float:
    """Unallocated GPU % (of the nodes' capacity) that the best offline placement cannot go below."""
    if linprog is None:
        raise RuntimeError("the offline floor needs scipy (pip install scipy)")
    types = Counter((n.cpu_milli, n.memory_mib, n.gpu_count, n.gpu_model) for n in nodes)
    shapes = Counter(_shape(p) for p in pods)
    type_list, shape_list = list(types), list(shapes)
    variables = [
        (s, t)
        for s, (cpu, mem, gpus, request, models) in enumerate(shape_list)
        for t, (tcpu, tmem, tgpus, model) in enumerate(type_list)
        if gpus <= tgpus and cpu <= tcpu and mem <= tmem and (not models or model in models)
    ]
    if not variables:  # no pod fits any node type
        return 100.0
    objective = [-shape_list[s][3] for s, _ in variables]  # maximise placed GPU milli
    rows, bounds = [], []
    for t, (tcpu, tmem, tgpus, _) in enumerate(type_list):
        count = types[type_list[t]]
        for index, capacity in ((0, tcpu), (1, tmem), (3, tgpus * 1000)):
            rows.append([shape_list[s][index] if tt == t else 0 for s, tt in variables])
            bounds.append(count * capacity)
    for s in range(len(shape_list)):
        rows.append([1 if ss == s else 0 for ss, _ in variables])
        bounds.append(shapes[shape_list[s]])
    result = linprog(objective, A_ub=rows, b_ub=bounds, bounds=(0, None), method="highs")
    if not result.success:
        raise RuntimeError(f"LP failed: {result.message}")
    capacity = sum(n.gpu_count for n in nodes) * 1000
    return max(0.0, 100.0 - 100.0 * (-result.fun) / capacity)
