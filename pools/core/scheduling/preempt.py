"""Preemption: which lower-priority pods a Pending pod may evict, on which node (seed O3).

Rules, stricter than kube-scheduler's defaults because our victims are expensive GPU jobs:

* a pod whose PriorityClass says `preemptionPolicy: Never` preempts nobody: it waits for room
  (and may itself be preempted), as kube-scheduler's DefaultPreemption does;
* only pods of STRICTLY lower priority are ever victims (never equal or higher);
* all victims are on ONE node, and only nodes whose non-resource filters pass (taints,
  affinity, cordon, GPU model) are considered: evicting pods cannot fix those;
* the victim set is minimal: every lower-priority pod is removed in simulation, then pods are
  given back ("reprieved") while the preemptor still fits, the ones we least want to evict
  first: those whose PodDisruptionBudget allows no more disruptions (as kube-scheduler's
  selectVictimsOnNode reprieves them first), then not checkpointable, then highest priority;
  so checkpointable, low-priority pods without a budget are the ones that go;
* among nodes, the one whose victims hurt least wins: fewest victims past their disruption
  budget (kube-scheduler's pickOneNodeForPreemption asks this first: preemption may violate a
  budget, but only where no node avoids it), then fewest non-checkpointable victims, then the
  lowest highest-victim priority, then the lowest priority sum, then fewest victims, then the
  smallest node name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pools.core.disruption import DisruptionBudget, refused
from pools.core.scheduling.nodes import (
    NodeState,
    Pod,
    best_fit_gpus,
    filter_node,
    may_preempt,
    resource_filter_reason,
    static_filter_reason,
)


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


def victims_on(pod: Pod, node: NodeState, budgets: Sequence[DisruptionBudget] = ()) -> tuple[list[Pod], tuple[int, ...]] | None:
    if static_filter_reason(pod, node) is not None:
        return None
    candidates = [b for b in node.bound.values() if b.pod.priority < pod.priority and may_preempt(pod, b.pod.team, node)]
    if not candidates:
        return None
    sim = node.clone()
    for binding in candidates:
        sim.unbind(binding.pod.name)
    if resource_filter_reason(pod, sim) is not None:
        return None
    victims = []
    past_budget = set(refused([b.pod.name for b in candidates], budgets))
    # Give pods back, least-wanted-to-evict first; each stays if the preemptor still fits.
    for binding in sorted(
        candidates, key=lambda b: (b.pod.name not in past_budget, b.pod.checkpointable, -b.pod.priority, b.pod.name)
    ):
        sim.bind(binding.pod, binding.gpu_indices)
        if resource_filter_reason(pod, sim) is not None:
            sim.unbind(binding.pod.name)
            victims.append(binding.pod)
    return victims, best_fit_gpus(pod, sim.gpu_free) or ()


def preempt(pod: Pod, nodes: Sequence[NodeState], budgets: Sequence[DisruptionBudget] = ()) -> PreemptionPlan | None:
    """The least harmful preemption that lets ``pod`` run, or None when the pod already fits
    somewhere (nothing to evict), it may not preempt (`preemptionPolicy: Never`) or no eviction
    of lower-priority pods can make it fit."""
    if not pod.may_preempt:
        return None
    if any(filter_node(pod, node) is None for node in nodes):
        return None
    best = None
    for node in nodes:
        found = victims_on(pod, node, budgets)
        if found is None:
            continue
        victims, gpus = found
        rank = (
            len(refused([v.name for v in victims], budgets)),
            sum(1 for v in victims if not v.checkpointable),
            max(v.priority for v in victims),
            sum(v.priority for v in victims),
            len(victims),
            node.name,
        )
        if best is None or rank < best[0]:
            best = (rank, node.name, victims, gpus)
    if best is None:
        return None
    _, node_name, victims, gpus = best
    ordered = sorted(victims, key=lambda v: (not v.checkpointable, v.priority, v.name))
    return PreemptionPlan(pod.name, node_name, tuple(ordered), gpus)
