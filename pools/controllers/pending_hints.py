"""Why a Pending pod waits, in the words a team can act on: the hints beside the scheduler's
verdict (which label or toleration is missing, on which of the team's own pools; which pool is
full or could grow). The simulated scheduler pass (pools/controllers/scheduler.py) writes them
with its own verdict; on a real cluster kube-scheduler gives the verdict (the pod's
`PodScheduled` condition, mirrored into `Pod.explanation`) and `pending_hints_write` adds ours.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from datetime import datetime

from django.db import transaction

from pools.core.scheduling.explain import explain
from pools.core.scheduling.nodes import REASON_CPU, REASON_GPU, REASON_MEMORY, NodeState
from pools.core.scheduling.nodes import Pod as CorePod
from pools.models import GpuNodePool
from pools.models.pods import Pod
from pools.selectors.cluster import cluster_state, core_pod_of, live_nodes


def pending_hints_write(*, now: datetime) -> list[str]:
    """On a real cluster: the hints of every Pending pod kube-scheduler found no node for,
    against the nodes of our pools as the pod's team may see them; written where they changed.
    Returns those pods' keys. Nothing is bound here: kube-scheduler binds."""
    with transaction.atomic():
        nodes = live_nodes()
        pools = {n.pool.name: n.pool for n in nodes}
        pods = list(Pod.objects.filter(phase__in=(Pod.Phase.PENDING, Pod.Phase.RUNNING)).exclude(team__isnull=True).order_by("-priority", "submitted_at", "id"))
        states = cluster_state(nodes, [p for p in pods if p.phase == Pod.Phase.RUNNING])
        ordered = [states[n.name] for n in nodes]
        views: dict[int, list[NodeState]] = {}
        waiting, changed = [], []
        for pod in pods:
            if pod.phase != Pod.Phase.PENDING or pod.reason != "Unschedulable":
                continue
            cpod = core_pod_of(pod)
            seen = team_view(ordered, pools, pod.team_id, views)
            explanation = explain(cpod, seen)
            hints = list(explanation.hints) + capacity_hints(cpod, explanation.node_reasons, {s.name: s for s in seen}, pools)
            waiting.append(pod.key)
            if pod.hints != hints:
                pod.hints = hints
                changed.append(pod)
        Pod.objects.bulk_update(changed, ["hints"], batch_size=500)
    return waiting


INSUFFICIENT = (REASON_CPU, REASON_MEMORY, REASON_GPU)
OTHER_TEAMS = "(another team's pool)"


def team_view(states: list[NodeState], pools: dict[str, GpuNodePool], team_id: int, cache: dict[int, list[NodeState]]) -> list[NodeState]:
    """The nodes as one team may see them in explanations: counts stay cluster-wide, like
    kube-scheduler's, but other teams' pool names are hidden (a lead never learns of another
    team's pools, not even from a hint)."""
    if team_id not in cache:
        cache[team_id] = [
            state if (pool := pools.get(state.pool)) is None or pool.team_id == team_id else dataclasses.replace(state, pool=OTHER_TEAMS)
            for state in states
        ]
    return cache[team_id]


def capacity_hints(pod: CorePod, node_reasons: dict[str, str], states: dict[str, NodeState], pools: dict[str, GpuNodePool]) -> list[str]:
    """Pool-level hints the pure core cannot give: a pool whose nodes would take the pod if they
    were free is either at its `nodeCount.max` (raise it) or can still grow (scale it)."""
    hints = []
    full: dict[str, int] = defaultdict(int)
    for name, reason in node_reasons.items():
        if reason in INSUFFICIENT:
            full[states[name].pool] += 1
    for pool_name in sorted(full):
        pool = pools.get(pool_name)
        members = [s for s in states.values() if s.pool == pool_name]
        if pool is None or not members:
            continue
        empty = members[0]
        if pod.gpu_count > empty.gpu_count or pod.cpu_milli > empty.cpu_milli or pod.memory_mib > empty.memory_mib:
            continue  # even an empty node of this pool is too small: more nodes will not help
        if len(members) >= pool.max_nodes:
            hints.append(
                f"pool {pool_name} is at its nodeCount.max ({pool.max_nodes} nodes) and they are busy: raise it "
                f"(ebcloud node-pool scale {pool_name} --max N), repack it (ebcloud node-pool fragmentation "
                f"{pool_name} --plan) or give the pod a higher PriorityClass (spec.priorityClassName) to preempt checkpointable pods."
            )
        else:
            grow = f"raise nodeCount.min (ebcloud node-pool scale {pool_name} --min N)"
            has = f"pool {pool_name} has {len(members)} Ready node(s) of at most {pool.max_nodes}: a new node would fit the pod"
            if pool.bursts:
                hints.append(f"{has}; the autoscaler adds a burst node when the pool's scaling policy asks (ebcloud node-pool "
                             f"diagnose {pool_name} says when it will not), or {grow}.")  # fmt: skip
            else:
                hints.append(f"{has}, but the pool does not burst (spec.burst.enabled is off), so none is added until you {grow} "
                             f"or enable burst.")  # fmt: skip
    return hints


