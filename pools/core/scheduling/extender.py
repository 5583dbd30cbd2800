"""What kube-scheduler's extender protocol asks of us, over the core's nodes and policies (seed D1, O3).

kube-scheduler calls the extender for every pod: ``filter`` with the nodes its own filters
passed, then ``prioritize`` with the nodes ours passed, and ``preempt`` with the nodes where it
would evict pods to make room. The answers come from the same functions as the simulated
cluster's scheduler pass: :func:`pools.core.scheduling.nodes.filter_node`'s filters decide, each
node's own pool policy scores.

Whose pods. A pod's ``team`` is its namespace's team; :data:`NO_TEAM` says that its namespace
belongs to no team (kube-system, the cluster's DaemonSets such as the GPU device plugin):
those are not a team's pods, so the team rule does not apply to them (the cluster's own GPU
workloads, such as the GPU operator's validator pods, which ask for a GPU on every node, are
administrators' business: only they create pods outside the teams' namespaces), and a pod of no
team that asks for no GPU is never refused by us (the product has nothing to add to
kube-scheduler's own filters). :data:`TEAM_UNKNOWN` is a pod whose team could not be learnt: no pool takes it.
Nodes that no pool holds refuse only a team's pods that ask for GPUs (the product does not lend
GPUs that no team pays for); everything else there is not the product's to refuse.

Refusals that preemption cannot mend (the team rule, a node outside the pools, taints,
affinity, cordon, the GPU model, more than the node has at all) are told apart from those it
can (resources taken by other pods): kube-scheduler's preemption only tries nodes of the
latter, and ``preempt`` drops the nodes of the former from its candidates. Without that,
kube-scheduler evicted a team's pods to make room for a pod of another team that our filter
then refused on the freed node.

Scores. A policy scores 0..``MAX_NODE_SCORE`` (100); the protocol wants 0..``MAX_EXTENDER_PRIORITY``
(10), and kube-scheduler multiplies by the weight and by 10 again. Dividing by ten would merge
nodes that our policy tells apart (an fgd score of 57 and one of 52 would both be 5) and
kube-scheduler would then break the tie at random. So the nodes that the simulated scheduler
would choose from (the least PreferNoSchedule penalty, then the best score) get exactly 10,
every other node its score scaled into 0..9, and a node that a tolerated node beats on the
PreferNoSchedule penalty 0: kube-scheduler's choice is ours whenever only our scores rank
(deploy/kube-scheduler-config.yaml turns its own score plugins off). A node outside the pools
that a pod may use takes nothing from a pool: it scores 10 and the pools' nodes, ranked as
above, are moved into 0..9 (a pod asking no GPU goes to a plain node rather than use the CPU
a pool's GPUs need).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from pools.core.scheduling.nodes import (
    MAX_NODE_SCORE,
    REASON_TEAM,
    NodeState,
    Pod,
    Policy,
    insufficient_resources,
    may_preempt,
    node_filter_reason,
    resource_filter_reason,
    soft_penalty,
)

MAX_EXTENDER_PRIORITY = 10  # k8s.io/kube-scheduler/extender/v1 MaxExtenderPriority
REASON_UNMANAGED = "node(s) belong to no GPU node pool"
NO_TEAM = ""  # the team of a pod whose namespace belongs to no team (selectors.cluster.team_identity(None))
TEAM_UNKNOWN = "unknown"  # a pod whose team could not be learnt (never a team's identity, which is its id)


@dataclass(frozen=True)
class Refusal:
    reason: str  # kube-scheduler style
    unresolvable: bool  # preemption cannot change it: FailedAndUnresolvableNodes


@dataclass(frozen=True)
class FilterResult:
    passed: list[str]
    failed: dict[str, str]  # node name -> reason, for nodes where evicting pods could make room
    unresolvable: dict[str, str]  # node name -> reason, for nodes where nothing preemption does helps


def refusal(pod: Pod, node: NodeState | None) -> Refusal | None:
    """Why the extender refuses ``pod`` on ``node`` (None: a node that no pool holds), or None
    where it may run (see the module docstring for whose pods are refused where)."""
    teamless = pod.team == NO_TEAM
    if teamless and not pod.gpu_count:
        return None
    if node is None:
        return Refusal(REASON_UNMANAGED, True) if pod.gpu_count and not teamless else None
    if not teamless and node.teams is not None and pod.team not in node.teams:
        return Refusal(REASON_TEAM, True)
    reason = node_filter_reason(pod, node)
    if reason is not None:
        return Refusal(reason, True)
    reason = resource_filter_reason(pod, node)
    if reason is None:
        return None
    return Refusal(reason, any(beyond for _, beyond in insufficient_resources(pod, node)))


def filter_nodes(pod: Pod, states: Mapping[str, NodeState], names: Iterable[str]) -> FilterResult:
    """The named nodes where ``pod`` fits, in the order given, and why each other one fails."""
    passed: list[str] = []
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    for name in names:
        refused = refusal(pod, states.get(name))
        if refused is None:
            passed.append(name)
        else:
            (unresolvable if refused.unresolvable else failed)[name] = refused.reason
    return FilterResult(passed, failed, unresolvable)


class Victim(NamedTuple):
    """A pod kube-scheduler's preemption would evict: its "namespace/name" and its team as the
    read model knows them (None, both, for a pod not mirrored yet)."""

    key: str | None
    team: str | None


UNKNOWN_VICTIM = Victim(None, None)


def preemption_nodes(pod: Pod, states: Mapping[str, NodeState], victims: Mapping[str, Collection[Victim]]) -> list[str]:
    """Of kube-scheduler's preemption candidates (node name -> the victims it chose there), the
    nodes where evicting those pods lets ``pod`` run and may: our filter passes it, or refuses
    it for resources other pods hold and passes it once those pods are gone, and no victim is a
    pod it may not preempt (a guest of a lent pool never evicts the owner's pods: `may_preempt`;
    a victim of unknown team counts as the owner's). kube-scheduler counts a node's GPUs as one
    number, so the victims it chose may free a GPU where the pod needs two, or shares spread
    over several GPUs: the pod would still not fit there. Every other candidate is dropped, so
    that no pod is evicted for nothing, or for a pod that may not take its place."""
    kept = []
    for name, chosen in victims.items():
        node = states.get(name)
        refused = refusal(pod, node)
        if refused is not None and refused.unresolvable:
            continue
        if node is not None:
            if not all(may_preempt(pod, (node.owner or "") if v.team is None else v.team, node) for v in chosen):
                continue
            if refused is not None and not _room_once_evicted(pod, node, chosen):
                continue
        kept.append(name)
    return kept


def _room_once_evicted(pod: Pod, node: NodeState, victims: Collection[Victim]) -> bool:
    """Whether our filter passes ``pod`` on ``node`` without these victims. A victim the read
    model does not know yet holds nothing there in its view either: nothing is freed for it."""
    rest = node.clone()
    for victim in victims:
        if victim.key in rest.bound:
            rest.unbind(victim.key)
    return refusal(pod, rest) is None


def node_scores(
    pod: Pod, nodes: Iterable[NodeState], policies: Mapping[str, Policy], *, fitting: Collection[str] = frozenset()
) -> dict[str, int]:
    """Each node's score in 0..MAX_EXTENDER_PRIORITY (see the module docstring). Nodes where the
    pod does not fit score 0 (kube-scheduler only asks about nodes that passed the filters);
    `fitting` names nodes already known to pass them on these very states."""
    ranked: dict[str, tuple[int, float]] = {}  # name -> (penalty, policy score)
    for node in nodes:
        if node.name in fitting or refusal(pod, node) is None:
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


def with_outside(scores: Mapping[str, int], outside: Iterable[str]) -> dict[str, int]:
    """`node_scores` of the pools' nodes with nodes that no pool holds added: those score
    MAX_EXTENDER_PRIORITY and the pools' nodes move into 0..9 in the same order (see the module
    docstring). Without such nodes, the scores unchanged."""
    outside = list(outside)
    if not outside:
        return dict(scores)
    moved = {name: score * (MAX_EXTENDER_PRIORITY - 1) // MAX_EXTENDER_PRIORITY for name, score in scores.items()}
    return {**moved, **dict.fromkeys(outside, MAX_EXTENDER_PRIORITY)}


def _scaled(rank: tuple[int, float], least_penalty: int, best: float) -> int:
    penalty, score = rank
    if penalty != least_penalty:
        return 0
    if score == best:
        return MAX_EXTENDER_PRIORITY
    clamped = min(max(score, 0), MAX_NODE_SCORE)  # fgd-cpu's scores are fractional; the protocol's integers
    return int(min(clamped * (MAX_EXTENDER_PRIORITY - 1) // MAX_NODE_SCORE, MAX_EXTENDER_PRIORITY - 1))
