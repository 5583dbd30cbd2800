"""GPU fragmentation: per-node measure, cluster report, repack plan (seed C3, P3).

Fragmentation here is the measure of Weng et al., "Beware of Fragmentation: Scheduling
GPU-Sharing Workloads with Fragmentation Gradient Descent" (USENIX ATC 2023), which the FGD
score policy minimises. For an expected workload M (the most frequent pod shapes covering 95%
of the observed pods, with probabilities p_m), node n's fragmentation is

    F_n(m) = idle GPU milli on GPUs whose free share is below m's gpu_milli   if m fits on n
           = all idle GPU milli on n                                          otherwise
    F_n    = sum_m p_m * F_n(m)

where "fits" means enough CPU and enough GPUs with at least m's share, on an allowed model; a
CPU-only shape never uses GPUs, so all idle GPU milli counts for it. Cluster fragmentation is
sum_n F_n. The repack and make-room planners live in :mod:`pools.core.scheduling.repack`.

Everything is pure and Django-free. To stay fast enough to replay a 10k-pod trace on 1.2k
nodes, F is computed in integer units (shape counts instead of probabilities, so ties are
exact) and memoised on what it depends on: the GPU model, the sorted free milli per GPU, and
which CPU thresholds of the workload the node's free CPU clears.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pools.core.scheduling.nodes import MAX_NODE_SCORE, MILLI, NodeState, Pod

DEFAULT_COVERAGE = 0.95
UNDERUSED_PCT = 50.0
FRAGMENT_BUCKETS = ((0, 0), (1, 249), (250, 499), (500, 749), (750, 999), (1000, 1000))


@dataclass(frozen=True, order=True)
class PodShape:
    """What a pod asks for, as far as fragmentation is concerned (memory is not)."""

    cpu_milli: int
    gpu_count: int = 0
    gpu_milli: int = 0
    gpu_models: tuple[str, ...] = ()

    @classmethod
    def of(cls, pod: Pod | PodShape) -> PodShape:
        if isinstance(pod, PodShape):
            return pod
        milli = pod.gpu_milli if pod.gpu_count else 0
        return cls(pod.cpu_milli, pod.gpu_count, milli, tuple(pod.gpu_models))


@dataclass(frozen=True)
class Workload:
    """The expected workload: shapes with their observed counts, most frequent first.

    Counts (not probabilities) are kept so that fragmentation sums stay exact integers;
    ``p_m = count / weight``.
    """

    shapes: tuple[tuple[PodShape, int], ...]
    observed: int = 0

    @property
    def weight(self) -> int:
        return sum(count for _, count in self.shapes)

    def probabilities(self) -> list[tuple[PodShape, float]]:
        weight = self.weight
        return [(shape, count / weight) for shape, count in self.shapes]


def workload_from_pods(
    pods: Iterable[Pod | PodShape], coverage: float = DEFAULT_COVERAGE
) -> Workload:
    """The most frequent pod shapes that together cover ``coverage`` of the pods.

    Ordering and cut-off follow the FGD artifact: by count descending (ties: larger shape
    first), adding shapes one at a time until the cumulative count reaches the coverage.
    """
    counts = Counter(PodShape.of(p) for p in pods)
    total = sum(counts.values())
    ordered = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    kept, cumulative = [], 0
    for shape, count in ordered:
        if cumulative >= coverage * total:
            break
        kept.append((shape, count))
        cumulative += count
    return Workload(tuple(kept), observed=total)


class FragmentationModel:
    """F_n for one workload, memoised; also the FGD node score used by the scheduler.

    ``gpu_choice="fgd"`` lets a share take the GPU with the best FGD score (as the FGD
    artifact does; lowest index on ties); ``"bestfit"`` always takes the best-fitting GPU.
    """

    def __init__(self, workload: Workload, gpu_choice: str = "fgd") -> None:
        if gpu_choice not in ("fgd", "bestfit"):
            raise ValueError("gpu_choice is 'fgd' or 'bestfit'")
        self.workload, self.gpu_choice = workload, gpu_choice
        self.weight = workload.weight
        gpu_shapes = [(s, c) for s, c in workload.shapes if s.gpu_count]
        self._cpu_only = sum(c for s, c in workload.shapes if not s.gpu_count)
        self._thresholds = sorted({s.cpu_milli for s, _ in gpu_shapes})
        groups: dict[tuple, list[tuple[int, int]]] = {}
        for shape, count in gpu_shapes:
            key = (shape.gpu_count, shape.gpu_milli, frozenset(shape.gpu_models))
            groups.setdefault(key, []).append(
                (bisect_left(self._thresholds, shape.cpu_milli), count)
            )
        # Per (gpu count, share, models): CPU-threshold indices sorted, with prefix weights,
        # so "how much of this group clears the node's CPU" is one bisect.
        self._groups = []
        for (gpu_count, milli, models), members in groups.items():
            members.sort()
            prefix = [0]
            for _, count in members:
                prefix.append(prefix[-1] + count)
            self._groups.append((gpu_count, milli, models, [i for i, _ in members], prefix))
        self._units_memo: dict[tuple, int] = {}
        self._cost_memo: dict[tuple, tuple] = {}

    def units(self, model: str, cpu_bucket: int, gpus: tuple[int, ...]) -> int:
        """sum_m count_m * F_n(m) for a node state (GPU model, CPU bucket, sorted free GPUs)."""
        key = (model, cpu_bucket, gpus)
        hit = self._units_memo.get(key)
        if hit is not None:
            return hit
        total = sum(gpus)
        units = self._cpu_only * total
        if total:
            for gpu_count, milli, models, cpu_idx, prefix in self._groups:
                weight = prefix[-1]
                if models and model not in models:
                    units += weight * total
                    continue
                fit = below = 0
                for free in gpus:
                    if free >= milli:
                        fit += 1
                    else:
                        below += free
                if fit >= gpu_count:
                    cleared = prefix[bisect_left(cpu_idx, cpu_bucket)]
                    units += cleared * below + (weight - cleared) * total
                else:
                    units += weight * total
        self._units_memo[key] = units
        return units

    def cpu_bucket(self, cpu_free: int) -> int:
        """How many of the workload's CPU thresholds ``cpu_free`` clears."""
        return bisect_right(self._thresholds, cpu_free)

    def node_units(self, node: NodeState) -> int:
        return self.units(node.gpu_model, self.cpu_bucket(node.cpu_free), node.gpu_key)

    def node_fragmentation(self, node: NodeState) -> float:
        """F_n in GPU milli (expected idle GPU milli the workload cannot use on ``node``)."""
        return self.node_units(node) / self.weight if self.weight else 0.0

    def placement_delta(self, pod: Pod, node: NodeState) -> float:
        """Exact increase of F_n (GPU milli) if a feasible ``pod`` goes to ``node`` on the GPUs
        FGD would choose."""
        after = list(node.gpu_free)
        for i in self.placement_score(pod, node)[1]:
            after[i] -= pod.gpu_milli
        bucket = self.cpu_bucket(node.cpu_free - pod.cpu_milli)
        grown = self.units(node.gpu_model, bucket, tuple(sorted(after))) - self.node_units(node)
        return grown / (self.weight or 1)

    def placement_score(self, pod: Pod, node: NodeState) -> tuple[int, tuple[int, ...]]:
        """FGD's kube-style node score for a feasible ``pod``, and the GPU indices it takes.

        score = int(sigmoid(-dF / 1000) * 100), dF the growth of F_n in GPU milli: 50 when
        fragmentation does not change, higher when it shrinks. The integer rounding is the
        artifact's and it matters: near-equal placements tie and go to the smallest name. A
        share goes to the GPU with the best score (lowest index on ties); whole GPUs take the
        lowest-numbered idle ones.
        """
        score, choices = self._choice(pod, node)
        if pod.gpu_count == 0:
            return score, ()
        if pod.gpu_milli < MILLI:
            return score, (min(i for i, f in enumerate(node.gpu_free) if f in choices),)
        idle = [i for i, free in enumerate(node.gpu_free) if free == MILLI]
        return score, tuple(idle[: pod.gpu_count])

    def _choice(self, pod: Pod, node: NodeState):
        gpus, cpu_free, th = node.gpu_key, node.cpu_free, self._thresholds
        b0, b1 = bisect_right(th, cpu_free), bisect_right(th, cpu_free - pod.cpu_milli)
        key = (node.gpu_model, b0, b1, gpus, pod.gpu_count, pod.gpu_milli)
        hit = self._cost_memo.get(key)
        if hit is None:
            hit = self._cost_memo[key] = self._score(node.gpu_model, b0, b1, gpus, pod)
        return hit

    def _sigmoid_score(self, before: int, after: int) -> int:
        if not self.weight:
            return MAX_NODE_SCORE // 2
        x = (after - before) / (self.weight * 1000.0)  # dF / 1000 in GPU milli
        return int(MAX_NODE_SCORE / (1.0 + math.exp(min(x, 700.0))))

    def _score(self, model: str, b0: int, b1: int, gpus: tuple[int, ...], pod: Pod):
        """(score, the free milli values of the GPUs that reach it) for one node state."""
        before = self.units(model, b0, gpus)
        if pod.gpu_count == 0:
            return self._sigmoid_score(before, self.units(model, b1, gpus)), ()
        if pod.gpu_milli == MILLI:
            n = pod.gpu_count  # sorted ascending: the idle GPUs are the last n
            after = (0,) * n + gpus[: len(gpus) - n]
            return self._sigmoid_score(before, self.units(model, b1, after)), (MILLI,)
        best = None
        for free in sorted({g for g in gpus if g >= pod.gpu_milli}):  # best fit first
            after = list(gpus)
            after.remove(free)
            insort(after, free - pod.gpu_milli)
            score = self._sigmoid_score(before, self.units(model, b1, tuple(after)))
            if best is None or score > best[0]:
                best = (score, [free])
            elif score == best[0]:
                best[1].append(free)
            if self.gpu_choice == "bestfit":
                break
        if best is None:
            raise ValueError(f"pod {pod.name} does not fit on this node's GPUs")
        return best[0], tuple(best[1])


# --- reporting -------------------------------------------------------------------------------


def node_allocation_pct(node: NodeState) -> float:
    """Share of the node's GPU milli that is allocated, in percent (0 for GPU-less nodes)."""
    if not node.gpu_count:
        return 0.0
    return 100.0 * node.gpu_used_milli / (node.gpu_count * MILLI)


@dataclass(frozen=True)
class NodeFragmentation:
    name: str
    pool: str
    gpu_count: int
    allocated_pct: float
    free_milli: int
    fragmentation_milli: float


@dataclass(frozen=True)
class FragmentationReport:
    """What the fragmentation page shows: per node, totals, and where the idle GPU is."""

    nodes: tuple[NodeFragmentation, ...]
    total_gpu_milli: int
    allocated_gpu_milli: int
    free_gpu_milli: int
    cluster_fragmentation_milli: float
    underused_nodes: tuple[str, ...]
    free_fragment_histogram: dict[str, int]

    @property
    def fragmented_share_of_free(self) -> float:
        """How much of the idle GPU the expected workload cannot use (0-1)."""
        return (
            self.cluster_fragmentation_milli / self.free_gpu_milli if self.free_gpu_milli else 0.0
        )

    @property
    def unallocated_pct(self) -> float:
        return 100.0 * self.free_gpu_milli / self.total_gpu_milli if self.total_gpu_milli else 0.0


def _bucket_label(low: int, high: int) -> str:
    return str(low) if low == high else f"{low}-{high}"


def fragmentation_report(
    nodes: Sequence[NodeState], workload: Workload, *, underused_pct: float = UNDERUSED_PCT
) -> FragmentationReport:
    """Per-node allocation and F_n, cluster sum, nodes below ``underused_pct`` allocated, and
    a histogram of free milli per GPU (1000 = idle GPU, 1-999 = fragments, 0 = full)."""
    model = FragmentationModel(workload)
    rows, histogram = [], dict.fromkeys((_bucket_label(lo, hi) for lo, hi in FRAGMENT_BUCKETS), 0)
    for node in sorted(nodes, key=lambda n: n.name):
        rows.append(
            NodeFragmentation(
                node.name,
                node.pool,
                node.gpu_count,
                node_allocation_pct(node),
                node.gpu_free_milli,
                model.node_fragmentation(node),
            )
        )
        for free in node.gpu_free:
            for low, high in FRAGMENT_BUCKETS:
                if low <= free <= high:
                    histogram[_bucket_label(low, high)] += 1
    total = sum(n.gpu_count for n in nodes) * MILLI
    free = sum(n.gpu_free_milli for n in nodes)
    return FragmentationReport(
        nodes=tuple(rows),
        total_gpu_milli=total,
        allocated_gpu_milli=total - free,
        free_gpu_milli=free,
        cluster_fragmentation_milli=sum(r.fragmentation_milli for r in rows),
        underused_nodes=tuple(
            r.name for r in rows if r.gpu_count and r.allocated_pct < underused_pct
        ),
        free_fragment_histogram=histogram,
    )

