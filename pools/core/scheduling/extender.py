"""What kube-scheduler's extender protocol asks of us, over the core's nodes and policies (seed D1, O3).

kube-scheduler calls an extender in two steps for each pod that asks for a managed resource:
``filter`` with the nodes its own filters passed, then ``prioritize`` with the nodes ours passed.
Both answers come from the same functions as the simulated cluster's scheduler pass:
:func:`pools.core.scheduling.nodes.filter_node` decides, each node's own pool policy scores.

Scores. A policy scores 0..``MAX_NODE_SCORE`` (100); the protocol wants 0..``MAX_EXTENDER_PRIORITY``
(10), and kube-scheduler multiplies by the weight and by 10 again. Dividing by ten would merge
nodes that our policy tells apart (an fgd score of 57 and one of 52 would both be 5) and
kube-scheduler would then break the tie at random. So the nodes that the simulated scheduler
would choose from (the least PreferNoSchedule penalty, then the best score) get exactly 10,
every other node its score scaled into 0..9, and a node that a tolerated node beats on the
PreferNoSchedule penalty 0: kube-scheduler's choice is ours whenever only our scores rank
(deploy/kube-scheduler-config.yaml turns its own score plugins off).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from pools.core.scheduling.nodes import (
    MAX_NODE_SCORE,
    NodeState,
    Pod,
    Policy,
    filter_node,
    soft_penalty,
)

MAX_EXTENDER_PRIORITY = 10  # k8s.io/kube-scheduler/extender/v1 MaxExtenderPriority
REASON_UNMANAGED = "node(s) belong to no GPU node pool"


@dataclass(frozen=True)
class FilterResult:
    passed: list[str]
    failed: dict[str, str]  # node name -> kube-scheduler style reason


def filter_nodes(pod: Pod, states: Mapping[str, NodeState], names: Iterable[str]) -> FilterResult:
    """The named nodes where ``pod`` fits, in the order given, and why each other one fails.
    A node that no pool holds fails: the product does not lend what no team pays for."""
    passed: list[str] = []
    failed: dict[str, str] = {}
    for name in names:
        node = states.get(name)
        reason = REASON_UNMANAGED if node is None else filter_node(pod, node)
        if reason is None:
            passed.append(name)
        else:
            failed[name] = reason
    return FilterResult(passed, failed)


def node_scores(
    pod: Pod, nodes: Iterable[NodeState], policies: Mapping[str, Policy], *, fitting: Collection[str] = frozenset()
) -> dict[str, int]:
    """Each node's score in 0..MAX_EXTENDER_PRIORITY (see the module docstring). Nodes where the
    pod does not fit score 0 (kube-scheduler only asks about nodes that passed the filters);
    `fitting` names nodes already known to pass them on these very states."""
    ranked: dict[str, tuple[int, float]] = {}  # name -> (penalty, policy score)
    for node in nodes:
        if node.name in fitting or filter_node(pod, node) is None:
            score, _ = policies[node.pool].score(pod, node)
            ranked[node.name] = (soft_penalty(pod, node), score)
        else:
            ranked[node.name] = (-1, 0)
    fitting = [rank for rank in ranked.values() if rank[0] >= 0]
    if not fitting:
        return dict.fromkeys(ranked, 0)
    least_penalty = min(penalty for penalty, _ in fitting)
    best = max(score for penalty, score in fitting if penalty == least_penalty)
    return {name: _scaled(rank, least_penalty, best) for name, rank in ranked.items()}


def _scaled(rank: tuple[int, float], least_penalty: int, best: float) -> int:
    penalty, score = rank
    if penalty != least_penalty:
        return 0
    if score == best:
        return MAX_EXTENDER_PRIORITY
    clamped = min(max(score, 0), MAX_NODE_SCORE)  # fgd-cpu's scores are fractional; the protocol's integers
    return int(min(clamped * (MAX_EXTENDER_PRIORITY - 1) // MAX_NODE_SCORE, MAX_EXTENDER_PRIORITY - 1))
