"""The cluster as the scheduler extender sees it: the read model's live nodes with the mirrored
Running pods bound to them (kept up to date by pools/selectors/extender_state.py), each pool's
policy, and the pod kube-scheduler asks about as the core's `Pod` (seed D1, O3).

The extender answers from the read model, not from kube-scheduler's node list: the nodes' pools,
labels and taints are the product's, and what runs on them is what the pod mirror recorded, so
the scores are those the simulated cluster's scheduler pass would give on the same state.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from django.db.models import TextField
from django.db.models.functions import Cast
from django.utils import timezone

from pools.core.scheduling.extender import FilterResult, filter_nodes, node_scores
from pools.core.scheduling.fragmentation import PodShape, Workload, workload_from_pods
from pools.core.scheduling.nodes import Pod as CorePod
from pools.core.scheduling.policies import policy_for
from pools.models.pods import Pod
from pools.providers.kubernetes_pods import pod_fields
from pools.selectors.cluster import core_pod_of
from pools.selectors.extender_state import STATE
from pools.selectors.namespaces import namespace_owner


def extender_filter(pod: CorePod, names: list[str]) -> FilterResult:
    """The filter's verdict on the named nodes, from the current read model."""
    with STATE.lock:
        states = STATE.refresh()
        result = filter_nodes(pod, states, names)
        STATE.passed = (pod.name, pod.shape_key, STATE.generation, frozenset(result.passed))
        return result


def extender_scores(pod: CorePod, names: list[str]) -> dict[str, int] | list[int]:
    """Each named node's score in 0..10, or the positions of the names that are no live node.

    fgd learns the expected workload from the pods bound and the pods waiting (with `pod`), as
    the scheduler pass does; each pool's nodes are scored with its policy (one policy object
    per policy name, so fgd's memo of node shapes serves every pool)."""
    with STATE.lock:
        states = STATE.refresh()
        unknown = [i for i, name in enumerate(names) if name not in states]
        if unknown:
            return unknown
        workload = _workload(_waiting(pod), pod)
        chosen = {name: pool.scheduling_policy for name, pool in STATE.pools.items()}
        by_name = {policy: policy_for(policy, nodes=list(states.values()), workload=workload) for policy in set(chosen.values())}
        name, shape, generation, passed = STATE.passed or ("", None, -1, frozenset())
        fitting = passed if (name, shape, generation) == (pod.name, pod.shape_key, STATE.generation) else frozenset()
        policies = {pool: by_name[policy] for pool, policy in chosen.items()}
        return node_scores(pod, (states[name] for name in names), policies, fitting=fitting)


def _workload(waiting: list[PodShape], pod: CorePod) -> Workload:
    """The workload of the bound pods, the waiting ones and `pod`, counted again only when one
    of them changed (counting 8,000 bound pods is most of a prioritize call otherwise)."""
    key = (STATE.version, tuple(waiting), PodShape.of(pod))
    if key not in STATE.workloads:
        STATE.workloads.clear()
        STATE.workloads[key] = workload_from_pods([*STATE.shapes.elements(), *waiting, pod])
    return STATE.workloads[key]


def _waiting(pod: CorePod) -> list[PodShape]:
    """The shapes of the Pending pods but `pod` (read again only when the mirror moved, in
    Kubernetes mode)."""
    cursor, shapes = STATE.waiting or (None, None)
    if cursor is None or cursor != STATE.cursor:
        shapes = _pending_shapes()
        STATE.waiting = (STATE.cursor, shapes)
    return [shape for key, shape in shapes if key != pod.name]


def _pending_shapes() -> list[tuple[str, PodShape]]:
    rows = Pod.objects.live().filter(phase=Pod.Phase.PENDING).annotate(models=Cast("gpu_models", TextField()))
    return [
        (f"{namespace}/{name}", PodShape(cpu, gpus, milli if gpus else 0, tuple(json.loads(models)) if models and models != "[]" else ()))
        for namespace, name, cpu, gpus, milli, models in rows.values_list("namespace", "name", "cpu_milli", "gpu_count", "gpu_milli", "models")
    ]


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
    """The pod's team: the mirrored pod's (the mirror read its namespace's label), else its
    namespace's as the product maps it. A pod the mirror has not recorded yet, in a namespace
    mapped only by its label, has none for a moment: the filter refuses it and kube-scheduler
    tries it again."""
    team = Pod.objects.live().exclude(team=None).filter(uid=uid).values_list("team_id", flat=True).first() if uid else None
    if team is None:
        owner = namespace_owner(namespace)
        team = owner.pk if owner is not None else None
    return team
