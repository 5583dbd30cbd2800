"""The cluster as the scheduler extender sees it: the read model's live nodes with the mirrored
Running pods bound to them (`cluster_state`), each pool's policy, and the pod kube-scheduler asks
about as the core's `Pod` (seed D1, O3).

The extender answers from the read model, not from kube-scheduler's node list: the nodes' pools,
labels and taints are the product's, and what runs on them is what the pod mirror recorded, so
the scores are those the simulated cluster's scheduler pass would give on the same state.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from pools.core.scheduling.fragmentation import workload_from_pods
from pools.core.scheduling.nodes import NodeState, Policy
from pools.core.scheduling.nodes import Pod as CorePod
from pools.core.scheduling.policies import policy_for
from pools.models import GpuNodePool
from pools.models.pods import Pod
from pools.providers.kubernetes_pods import pod_fields
from pools.selectors.cluster import cluster_state, core_pod_of, core_pods_of, live_nodes

# The extender's default for a GPU pool that names no `schedulingPolicy`: fgd, the policy that
# left the least GPU unallocated on Alibaba's trace (docs/benchmarks.md). The simulated
# scheduler's default stays binpack (pools/controllers/scheduler.py) so that the embedded
# cluster places pods as it always has; a pool that names a policy gets it in both.
GPU_POOL_DEFAULT_POLICY = "fgd"
CPU_POOL_DEFAULT_POLICY = "binpack"


def extender_policy(pool: GpuNodePool) -> str:
    spec = (pool.document or {}).get("spec") or {}
    if spec.get("schedulingPolicy"):
        return spec["schedulingPolicy"]
    return GPU_POOL_DEFAULT_POLICY if pool.node_type.gpu_count else CPU_POOL_DEFAULT_POLICY


@dataclass
class ExtenderView:
    states: dict[str, NodeState]  # every live node by name, with its Running pods bound
    policies: dict[str, Policy]  # pool name -> its policy


def _live() -> tuple[list, dict[str, NodeState]]:
    nodes = live_nodes()
    running = Pod.objects.live().filter(phase=Pod.Phase.RUNNING, node__in=[n.pk for n in nodes])
    return nodes, cluster_state(nodes, list(running))


def extender_states() -> dict[str, NodeState]:
    """Every live node by name, with its Running pods bound: what the filter needs."""
    return _live()[1]


def extender_view(pod: CorePod) -> ExtenderView:
    """The live nodes with their Running pods, and each pool's policy. fgd learns the expected
    workload from the pods bound and the pods waiting (with `pod`), as the scheduler pass does."""
    nodes, states = _live()
    observed = [binding.pod for state in states.values() for binding in state.bound.values()]
    waiting = Pod.objects.live().filter(phase=Pod.Phase.PENDING)
    observed += [core for _, key, core in core_pods_of(waiting) if isinstance(core, CorePod) and key != pod.name]
    workload = workload_from_pods([*observed, pod])
    members: dict[str, list[NodeState]] = defaultdict(list)
    names: dict[str, str] = {}
    for node in nodes:
        members[node.pool.name].append(states[node.name])
        names[node.pool.name] = extender_policy(node.pool)
    policies = {pool: policy_for(names[pool], nodes=states_of, workload=workload) for pool, states_of in members.items()}
    return ExtenderView(states, policies)


def extender_pod(document: Mapping[str, Any]) -> CorePod:
    """The core's pod of kube-scheduler's Pod JSON, read as the pod mirror reads it
    (`pod_fields`: requests counted as kube-scheduler counts them), with its team from the read
    model (the mirrored pod, else its namespace's). Raises KeyError, TypeError or ValueError
    for a document that is not a readable Pod."""
    fields = pod_fields(document, now=timezone.now())
    fields.pop("node_name")
    pod = Pod(**fields)
    pod.team_id = _team_of(pod.uid, pod.namespace)
    return core_pod_of(pod)


def _team_of(uid: str, namespace: str) -> int | None:
    live = Pod.objects.live().exclude(team=None)
    team = live.filter(uid=uid).values_list("team_id", flat=True).first() if uid else None
    return team or live.filter(namespace=namespace).values_list("team_id", flat=True).first()
