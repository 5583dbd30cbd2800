"""One placement: filter every node, score the feasible ones with a policy, pick the best
(kube-scheduler's cycle, without binding). The incremental equivalent for simulations is
:class:`pools.core.scheduling.cluster.ClusterScheduler`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pools.core.scheduling.explain import Explanation, explain
from pools.core.scheduling.fragmentation import Workload
from pools.core.scheduling.nodes import (
    NodeState,
    Pod,
    Policy,
    filter_node,
    soft_penalty,
)
from pools.core.scheduling.policies import RandomPolicy, policy_for


@dataclass(frozen=True)
class Decision:
    """Where a pod goes (node + GPU indices), or why it cannot go anywhere."""

    pod: str
    node: str | None
    gpu_indices: tuple[int, ...] = ()
    explanation: Explanation | None = None

    @property
    def scheduled(self) -> bool:
        return self.node is not None


def schedule(
    pod: Pod,
    nodes: Sequence[NodeState],
    policy: str | Policy = "bestfit",
    *,
    workload: Workload | None = None,
    seed: int | None = 0,
) -> Decision:
    """Filter every node, score the feasible ones, return the best (does not bind).

    Every policy gives a kube-style integer node score (0-100, higher wins); equal scores go
    to the smallest node name; soft constraints rank first (`soft_penalty`: untolerated
    PreferNoSchedule taints, then unmatched preferred node-affinity terms).
    A stateless O(nodes) call for the live controller; :class:`ClusterScheduler` gives the
    same answers incrementally for simulations. ``fgd`` without a ``workload`` takes the
    expected workload from the pods already bound plus this one.
    """
    chosen = policy_for(policy, nodes=nodes, pod=pod, workload=workload, seed=seed)
    best, feasible = None, []
    for node in nodes:
        if filter_node(pod, node) is not None:
            continue
        feasible.append(node)
        score, gpus = chosen.score(pod, node)
        entry = (soft_penalty(pod, node), -score, node.name, gpus)
        if best is None or entry[:3] < best[:3]:
            best = entry
    if best is None:
        return Decision(pod.name, None, (), explain(pod, nodes))
    if isinstance(chosen, RandomPolicy):
        least = [n for n in feasible if soft_penalty(pod, n) == best[0]]
        node = chosen.rng.choice(sorted(least, key=lambda n: n.name))
        return Decision(pod.name, node.name, chosen.gpus(pod, node))
    return Decision(pod.name, best[2], best[3])
