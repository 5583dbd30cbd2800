"""The offline floor of the trace experiment: the least unallocated GPU % any placement could
reach if every arrived pod were known in advance (issue 4 §6b, issue 22 item 3).

An LP relaxation, aggregated per node type (nodes with the same CPU, memory, GPU count and
model): x[s, t] = how many pods of shape s go to nodes of type t, fractional. Each node type's
total CPU, memory and GPU milli bound what it takes; a pod never goes to a type with fewer GPUs
than it asks for, or of a model its gpuSpec excludes; at most the arrived count of each shape is
placed. Maximising the GPU placed gives an upper bound on any real (integral, per-node)
placement, so 100 − that is a floor no scheduler can beat.

The plain aggregate (``gpu_cuts=False``) lets two 800-milli shares fill one GPU, which is why
it sits at 0%. With ``gpu_cuts`` (the default) each node type also gets one row per
dual-feasible function of bin packing (Fekete and Schepers' u_ε): a share of more than
(1 − ε)·1000 milli counts as a whole GPU, one of less than ε·1000 as nothing, the rest by its
size, and a whole GPU as one. Whatever sits on one GPU sums to at most one under each such
function, so every row holds for any real per-GPU placement: the bound stays valid and no
longer packs large shares together. ε runs over the cut points that the arrived share sizes
make distinct. ``required`` pods (the running ones, for the floor of a repack) must all be
placed; the others may be left out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from pools.core.scheduling.nodes import MILLI, NodeState, Pod

try:  # scipy is a dependency (the repack plan solves with HiGHS); report its absence clearly
    from scipy.optimize import linprog
except ImportError:  # pragma: no cover - reported by the caller
    linprog = None


def _shape(pod: Pod) -> tuple:
    return (pod.cpu_milli, pod.memory_mib, pod.gpu_count, pod.gpu_request_milli, tuple(sorted(pod.gpu_models)))


def _epsilons(shares: set[int]) -> list[float]:
    """The ε (in milli) at which u_ε treats some arrived share differently: just above
    1000 − s (s counts as a whole GPU) and just above s (s counts as nothing), up to 500."""
    cuts = {MILLI - s + 1 for s in shares if s > MILLI // 2} | {s + 1 for s in shares if s < MILLI // 2}
    return sorted(e for e in cuts if 0 < e <= MILLI // 2)


def _gpu_weight(gpus: int, request: int, epsilon: int) -> float:
    """u_ε of a pod's GPU use, in GPUs: whole GPUs count one each."""
    if gpus != 1 or request >= MILLI:
        return float(gpus)
    if request > MILLI - epsilon:
        return 1.0
    return 0.0 if request < epsilon else request / MILLI


def offline_floor(
    nodes: Sequence[NodeState], pods: Sequence[Pod], *, required: Sequence[Pod] = (), gpu_cuts: bool = True
) -> float:
    """Unallocated GPU % (of the nodes' capacity) that the best offline placement cannot go
    below, placing any of ``pods`` and all of ``required``."""
    if linprog is None:
        raise RuntimeError("the offline floor needs scipy (pip install scipy)")
    types = Counter((n.cpu_milli, n.memory_mib, n.gpu_count, n.gpu_model) for n in nodes)
    shapes = Counter(_shape(p) for p in [*pods, *required])
    must = Counter(_shape(p) for p in required)
    type_list, shape_list = list(types), list(shapes)
    variables = [
        (s, t)
        for s, (cpu, mem, gpus, request, models) in enumerate(shape_list)
        for t, (tcpu, tmem, tgpus, model) in enumerate(type_list)
        if gpus <= tgpus and cpu <= tcpu and mem <= tmem and (not models or model in models)
    ]
    if not variables:  # no pod fits any node type
        return 100.0 if not must else _infeasible()
    objective = [-shape_list[s][3] for s, _ in variables]  # maximise placed GPU milli
    rows, bounds = [], []
    epsilons = _epsilons({shape[3] for shape in shape_list if shape[2] == 1 and shape[3] < MILLI}) if gpu_cuts else []
    for t, (tcpu, tmem, tgpus, _) in enumerate(type_list):
        count = types[type_list[t]]
        for index, capacity in ((0, tcpu), (1, tmem), (3, tgpus * MILLI)):
            rows.append([shape_list[s][index] if tt == t else 0 for s, tt in variables])
            bounds.append(count * capacity)
        for epsilon in epsilons:
            rows.append([_gpu_weight(shape_list[s][2], shape_list[s][3], epsilon) if tt == t else 0 for s, tt in variables])
            bounds.append(count * tgpus)
    for s in range(len(shape_list)):
        rows.append([1 if ss == s else 0 for ss, _ in variables])
        bounds.append(shapes[shape_list[s]])
        if must[shape_list[s]]:
            rows.append([-1 if ss == s else 0 for ss, _ in variables])
            bounds.append(-must[shape_list[s]])
    result = linprog(objective, A_ub=rows, b_ub=bounds, bounds=(0, None), method="highs")
    if result.status == 2:
        return _infeasible()
    if not result.success:
        raise RuntimeError(f"LP failed: {result.message}")
    capacity = sum(n.gpu_count for n in nodes) * MILLI
    return max(0.0, 100.0 - 100.0 * (-result.fun) / capacity)


def _infeasible() -> float:
    raise ValueError("the required pods cannot all be placed, even fractionally")
