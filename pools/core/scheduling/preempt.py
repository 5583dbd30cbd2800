"""Preemption: which lower-priority pods a Pending pod may evict, on which node (seed O3).

kube-scheduler 1.37's DefaultPreemption (plugins/defaultpreemption, framework/preemption), so that
the simulated cluster preempts what a real one would, with two rules of ours (marked +) because
our victims are expensive GPU jobs:

* a pod whose PriorityClass says `preemptionPolicy: Never` preempts nobody: it waits for room
  (and may itself be preempted);
* only pods of STRICTLY lower priority are ever victims (never equal or higher), and (+) only
  those the pod may evict (`may_preempt`: a guest of a lent pool never evicts the owner's);
* all victims are on ONE node, and only nodes whose non-resource filters pass (taints,
  affinity, cordon, GPU model) are tried: evicting pods cannot fix those;
* on each node (`victims_on`, kube-scheduler's SelectVictimsOnNode) every such pod is removed
  in simulation; a node without any is no candidate ("No preemption victims found for incoming
  pod"), nor one where the pod still does not fit (for the filters' own reasons, "Insufficient
  nvidia.com/gpu"). Then the pods are given back ("reprieved") while the preemptor still fits,
  those that would be past their PodDisruptionBudget first, then the others, each group most
  important first (`_importance`): (+) not checkpointable first, then kube-scheduler's
  MoreImportantPod, the highest priority, then the earliest start (`Pod.started_at`, the pod's
  status.startTime; a pod without one counts as started now, as GetPodStartTime counts it, so
  after every recorded start), then the name; so checkpointable, low-priority, recently started
  pods without a budget go;
* which pods would be past their budget is counted as kube-scheduler counts it
  (`past_budget`): preemption deletes its victims, it does not ask the Eviction API (which
  refuses a pod that two budgets select), so each pod, most important first, spends one
  disruption of every budget that counts it (pools/core/disruption.py `PreemptionBudget`) and is
  past its budget once one of them has none left; the victims past it are the node's violations;
* a real kube-scheduler's own search (`victims_on(ours=False)`, what the Pending message and
  its hints tell) counts a node's resources as sums (`KubeCount`: whole GPUs and GPU shares two
  resources apart, never GPU by GPU), so it may find no victim where only the scheduler
  extender refuses the pod (an error it reports), or victims whose eviction would not free the
  GPUs the pod needs, which the extender's `preempt` then drops;
* among nodes (kube-scheduler's pickOneNodeForPreemption) the one whose victims hurt least
  wins: fewest violations (preemption may violate a budget, but only where no node avoids it),
  (+) then fewest non-checkpointable victims, then the lowest highest-victim priority, the
  lowest sum of priorities (each raised by 2^31 as kube-scheduler raises them, so that pods of
  negative priority do not make more victims cheaper), fewest victims, then the node whose
  highest-priority victims started latest (GetEarliestPodStartTime: the earliest start among
  the victims of the highest priority, a pod without one counting as now: the least work lost),
  then the smallest node name (kube-scheduler: the first node it tried, an order of its own).

The plan lists its victims least important first: the reverse of that order, but for names.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from pools.core.disruption import DisruptionBudget, PreemptionBudget, preemption_budgets
from pools.core.scheduling.nodes import (
    MILLI,
    REASON_CPU,
    REASON_GPU,
    REASON_GPU_SHARE,
    REASON_MEMORY,
    REASON_PODS,
    Binding,
    NodeState,
    Pod,
    best_fit_gpus,
    builtin_filter_reason,
    filter_node,
    insufficient_resources,
    may_preempt,
    resource_filter_reason,
    static_filter_reason,
)

NO_VICTIMS = "No preemption victims found for incoming pod"
_PRIORITY_RAISE = 2**31  # kube-scheduler adds math.MaxInt32 + 1 to every victim's priority before summing


@dataclass(frozen=True)
class PreemptionPlan:
    """Evict ``victims`` from ``node``, then bind ``pod`` there on ``gpu_indices``."""

    pod: str
    node: str
    victims: tuple[Pod, ...]
    gpu_indices: tuple[int, ...]

    @property
    def victim_names(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.victims)


@dataclass(frozen=True)
class NodeVictims:
    """What preemption finds on one node: the fewest victims whose eviction lets the pod fit (most
    important first, as kube-scheduler lists them), how many of them are past their disruption
    budget, and the GPUs the pod then takes; or no victims and kube-scheduler's reasons why the
    node is no candidate (its FitError counts them)."""

    victims: tuple[Pod, ...] = ()
    violations: int = 0
    gpu_indices: tuple[int, ...] = ()
    reasons: tuple[str, ...] = ()
    # kube-scheduler's Error for a node with lower-priority pods none of which is a victim: by its
    # own count the pod fits with all of them there (only the extender refused it).
    error: str = ""


def past_budget(pods: Iterable[Pod], budgets: Sequence[PreemptionBudget]) -> set[str]:
    """The pods that would be past their disruption budget if all of them went, in this order:
    kube-scheduler's FilterVictimsWithPDBViolation. Each pod spends one of every budget that
    counts it, until one goes below zero (that pod is past it; the budgets after are not spent)."""
    left = [budget.allowed for budget in budgets]
    past = set()
    for pod in pods:
        for i, budget in enumerate(budgets):
            if pod.name in budget.pods:
                left[i] -= 1
                if left[i] < 0:
                    past.add(pod.name)
                    break
    return past


def victims_on(pod: Pod, node: NodeState, budgets: Sequence[PreemptionBudget] = (), *, ours: bool = True) -> NodeVictims | None:
    """kube-scheduler's SelectVictimsOnNode for ``pod`` on ``node`` (see the module docstring);
    None where a filter that evicting pods cannot change refuses the pod (kube-scheduler does
    not try the node: "Preemption is not helpful for scheduling"). `ours=False`: as a real
    kube-scheduler finds them (`_kube_victims`)."""
    if (static_filter_reason if ours else builtin_filter_reason)(pod, node) is not None:
        return None
    candidates = [b for b in node.bound.values() if b.pod.priority < pod.priority and (not ours or may_preempt(pod, b.pod.team, node))]
    if not candidates:
        return NodeVictims(reasons=(NO_VICTIMS,))
    if not ours:
        return _kube_victims(pod, node, candidates, budgets)
    sim = node.clone()
    for binding in candidates:
        sim.unbind(binding.pod.name)
    if short := insufficient_resources(pod, sim):
        return NodeVictims(reasons=tuple(reason for reason, _ in short))
    order, past = _reprieve_order(candidates, budgets, _importance)
    victims = []
    for binding in order:  # each stays if the preemptor still fits
        sim.bind(binding.pod, binding.gpu_indices)
        if resource_filter_reason(pod, sim) is not None:
            sim.unbind(binding.pod.name)
            victims.append(binding.pod)
    victims.sort(key=_importance)  # kube-scheduler sorts them again: the two groups merged, most important first
    return NodeVictims(tuple(victims), sum(1 for v in victims if v.name in past), best_fit_gpus(pod, sim.gpu_free) or ())


def _kube_victims(pod: Pod, node: NodeState, candidates: list[Binding], budgets: Sequence[PreemptionBudget]) -> NodeVictims:
    """The victims a real kube-scheduler finds: without the rules it leaves to the scheduler
    extender (the team, the GPU model, `may_preempt`, GPUs one by one), whose `preempt` then
    judges the node by them, by its own count of the node's resources (`KubeCount`), giving pods
    back in its own order (MoreImportantPod: checkpointable pods are not ours to prefer). Where
    its count fits the pod with every pod there, none is a victim: an error, as it says."""
    kube = KubeCount.of(node)
    if not kube.short(pod):
        return NodeVictims(error=f'expected at least one victim pod on node "{node.name}"')
    for binding in candidates:
        kube.add(binding.pod, -1)
    if short := kube.short(pod):
        return NodeVictims(reasons=tuple(short))
    order, past = _reprieve_order(candidates, budgets, _kube_importance)
    victims = []
    for binding in order:
        kube.add(binding.pod)
        if kube.short(pod):
            kube.add(binding.pod, -1)
            victims.append(binding.pod)
    victims.sort(key=_kube_importance)
    return NodeVictims(tuple(victims), sum(1 for v in victims if v.name in past))


def _reprieve_order(candidates: Sequence[Binding], budgets: Sequence[PreemptionBudget], importance: Callable[[Pod], tuple]) -> tuple[list[Binding], set[str]]:
    """The order the candidates are given back in (those that would be past their disruption
    budget first, then the others, each group most important first), and the names of the
    former."""
    ranked = sorted(candidates, key=lambda b: importance(b.pod))
    past = past_budget((b.pod for b in ranked), budgets)
    return [b for b in ranked if b.pod.name in past] + [b for b in ranked if b.pod.name not in past], past


@dataclass(eq=False)
class KubeCount:
    """What kube-scheduler's own NodeResourcesFit counts on a node: sums of the pods' requests,
    whole GPUs (`nvidia.com/gpu`) and GPU shares (`ebcloud.io/gpu-milli`, 1000 a GPU) two
    resources apart, never GPU by GPU as our filter does (the extender's). So a whole GPU fits a
    node whose GPUs are all partly shared, and two GPUs fit where one is free and another shared.
    A pod counts what it asked of each (`asked`), not the GPUs it holds here."""

    node: NodeState
    pods: int = 0
    cpu: int = 0
    memory: int = 0
    gpus: int = 0
    shares: int = 0

    @classmethod
    def of(cls, node: NodeState) -> KubeCount:
        count = cls(node, len(node.bound), node.cpu_used, node.memory_used)
        for binding in node.bound.values():
            gpus, shares = asked(binding.pod)
            count.gpus += gpus
            count.shares += shares
        return count

    def add(self, pod: Pod, sign: int = 1) -> None:
        gpus, shares = asked(pod)
        self.pods += sign
        self.cpu += sign * pod.cpu_milli
        self.memory += sign * pod.memory_mib
        self.gpus += sign * gpus
        self.shares += sign * shares

    def short(self, pod: Pod) -> list[str]:
        """NodeResourcesFit's reasons for ``pod`` on this count, for the resources it asks."""
        node, (gpus, shares) = self.node, asked(pod)
        short = [REASON_PODS] if self.pods >= node.max_pods else []
        short += [REASON_CPU] if self.cpu + pod.cpu_milli > node.cpu_milli else []
        short += [REASON_MEMORY] if self.memory + pod.memory_mib > node.memory_mib else []
        short += [REASON_GPU] if gpus and self.gpus + gpus > node.gpu_count else []
        short += [REASON_GPU_SHARE] if shares and self.shares + shares > node.gpu_count * MILLI else []
        return short


def asked(pod: Pod) -> tuple[int, int]:
    """(`nvidia.com/gpu`, `ebcloud.io/gpu-milli`) as the pod asked them: the GPUs it holds here
    are the whole ones it asked plus those its shares need (`podspec.gpu_request`)."""
    return pod.gpu_count - math.ceil(pod.gpu_shares / MILLI), pod.gpu_shares


def preempt(pod: Pod, nodes: Sequence[NodeState], budgets: Sequence[DisruptionBudget] = ()) -> PreemptionPlan | None:
    """The least harmful preemption that lets ``pod`` run, or None when the pod already fits
    somewhere (nothing to evict), it may not preempt (`preemptionPolicy: Never`) or no eviction
    of lower-priority pods can make it fit. ``budgets``: the disruption budgets over the running
    pods as the cluster backend reads them; preemption counts the PodDisruptionBudgets behind
    them its own way (`past_budget`)."""
    if not pod.may_preempt:
        return None
    if any(filter_node(pod, node) is None for node in nodes):
        return None
    counted = preemption_budgets(budgets)
    best = None
    for node in nodes:
        found = victims_on(pod, node, counted)
        if found is None or not found.victims:
            continue
        victims = found.victims
        rank = (
            found.violations,
            sum(1 for v in victims if not v.checkpointable),
            max(v.priority for v in victims),
            sum(v.priority + _PRIORITY_RAISE for v in victims),
            len(victims),
            _latest_start_first(victims),
            node.name,
        )
        if best is None or rank < best[0]:
            best = (rank, node.name, victims, found.gpu_indices)
    if best is None:
        return None
    _, node_name, victims, gpus = best
    ordered = sorted(victims, key=lambda v: (not v.checkpointable, v.priority, _negated(_started(v)), v.name))
    return PreemptionPlan(pod.name, node_name, tuple(ordered), gpus)


def _started(pod: Pod) -> tuple[int, float]:
    """The pod's start as a sortable key, earliest first. kube-scheduler's GetPodStartTime
    counts a pod without status.startTime (bound, not started yet) as started at time.Now(),
    which is after every start recorded: so it sorts after all of them (two such pods tie)."""
    return (1, 0.0) if pod.started_at is None else (0, pod.started_at.timestamp())


def _negated(key: tuple[int, float]) -> tuple[int, float]:
    return (-key[0], -key[1])


def _importance(pod: Pod) -> tuple:
    """Most important first: (+) not checkpointable, then kube-scheduler's MoreImportantPod (the
    higher priority, then the earlier start), then the name, so that the order is total."""
    return (pod.checkpointable, -pod.priority, _started(pod), pod.name)


def _kube_importance(pod: Pod) -> tuple:
    """kube-scheduler's own MoreImportantPod, then the name."""
    return (-pod.priority, _started(pod), pod.name)


def _latest_start_first(victims: Sequence[Pod]) -> tuple[int, float]:
    """pickOneNodeForPreemption's fifth criterion as a key, smallest best: the node whose
    highest-priority victims' earliest start (GetEarliestPodStartTime) is the latest."""
    top = max(v.priority for v in victims)
    return _negated(min(_started(v) for v in victims if v.priority == top))
