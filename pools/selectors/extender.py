"""The cluster as the scheduler extender sees it: the read model's live nodes with the mirrored
Running pods bound to them (kept up to date by pools/selectors/extender_state.py), each pool's
policy, and the pod kube-scheduler asks about as the core's `Pod` (seed D1, O3).

The extender answers from the read model, not from kube-scheduler's node list: the nodes' pools,
labels and taints are the product's, and what runs on them is what the pod mirror recorded, so
the scores are those the simulated cluster's scheduler pass would give on the same state.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from django.db.models import TextField
from django.db.models.functions import Cast
from django.utils import timezone

from pools.core.scheduling.extender import (
    TEAM_UNKNOWN,
    UNKNOWN_VICTIM,
    FilterResult,
    Victim,
    filter_nodes,
    node_scores,
    preemption_nodes,
    refusal,
    with_outside,
)
from pools.core.scheduling.fragmentation import PodShape, Workload, workload_from_pods
from pools.core.scheduling.nodes import Pod as CorePod
from pools.core.scheduling.policies import policy_for
from pools.models import Team
from pools.models.pods import Pod
from pools.providers import real_cluster
from pools.providers.kubernetes_pods import ClusterPods, pod_fields
from pools.selectors.cluster import core_pod_of, team_identity
from pools.selectors.extender_state import STATE
from pools.selectors.namespaces import namespace_owner

logger = logging.getLogger("ebcloud.extender")
# How long a namespace's label read from the cluster is trusted: the pod mirror reads the labels
# again before every watch (a minute at most); this is shorter.
NAMESPACE_LABEL_SECONDS = 30.0
NAMESPACE_RETRY_SECONDS = 5.0  # after a failed read
NAMESPACE_READ_TIMEOUT = 1.0  # kube-scheduler waits httpTimeout (5 s) for the whole call


def extender_filter(pod: CorePod, names: list[str]) -> FilterResult:
    """The filter's verdict on the named nodes, from the current read model."""
    with STATE.lock:
        states = STATE.refresh()
        result = filter_nodes(pod, states, names)
        STATE.passed = (pod.name, pod.shape_key, STATE.generation, frozenset(result.passed))
        return result


def extender_preemption(pod: CorePod, victims: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The preemption candidates (node name -> kube-scheduler's MetaVictims there) where
    evicting those pods lets `pod` run and may (`preemption_nodes`); the victims are the
    mirrored pods (one query), unknown for a pod not mirrored yet (or whose UID is no string:
    the API refuses those, and a list as a UID was a 500 here, unhashable)."""
    uids = {name: [_uid(v) for v in entry["Pods"]] for name, entry in victims.items()}
    wanted = {uid for node_uids in uids.values() for uid in node_uids} - {None}
    rows = Pod.objects.live().filter(uid__in=wanted).values_list("uid", "namespace", "name", "team_id") if wanted else ()
    known = {uid: Victim(f"{namespace}/{name}", team_identity(team)) for uid, namespace, name, team in rows}
    chosen = {name: [known.get(uid, UNKNOWN_VICTIM) for uid in node_uids] for name, node_uids in uids.items()}
    with STATE.lock:
        return preemption_nodes(pod, STATE.refresh(), chosen)


def _uid(victim: Any) -> str | None:
    uid = victim.get("UID") if isinstance(victim, Mapping) else None
    return uid if isinstance(uid, str) else None


def extender_scores(pod: CorePod, names: list[str]) -> dict[str, int] | list[int]:
    """Each named node's score in 0..10, or the positions of the names that are no live node
    where `pod` may not run either (a team's pod asking for GPUs: the filter refused them).

    fgd learns the expected workload from the pods bound and the pods waiting (with `pod`), as
    the scheduler pass does; each pool's nodes are scored with its policy (one policy object
    per policy name, so fgd's memo of node shapes serves every pool)."""
    with STATE.lock:
        states = STATE.refresh()
        outside = [name for name in names if name not in states]
        if outside and refusal(pod, None) is not None:
            return [i for i, name in enumerate(names) if name not in states]
        known = [name for name in names if name in states]
        if not known:
            return with_outside({}, outside)
        workload = _workload(_waiting(pod), pod)
        chosen = {name: pool.scheduling_policy for name, pool in STATE.pools.items()}
        by_name = {policy: policy_for(policy, nodes=list(states.values()), workload=workload) for policy in set(chosen.values())}
        name, shape, generation, passed = STATE.passed or ("", None, -1, frozenset())
        fitting = passed if (name, shape, generation) == (pod.name, pod.shape_key, STATE.generation) else frozenset()
        policies = {pool: by_name[policy] for pool, policy in chosen.items()}
        return with_outside(node_scores(pod, (states[name] for name in known), policies, fitting=fitting), outside)


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
    (`pod_fields`: requests counted as kube-scheduler counts them), with its team (see
    `_team_of`). Raises KeyError, TypeError or ValueError for a document that is not a
    readable Pod."""
    fields = pod_fields(document, now=timezone.now())
    fields.pop("node_name")
    pod = Pod(**fields)
    pod.team_id, known = _team_of(pod.uid, pod.namespace)
    core = core_pod_of(pod)
    return core if known else replace(core, team=TEAM_UNKNOWN)


def _team_of(uid: str, namespace: str) -> tuple[int | None, bool]:
    """The pod's team and whether it is known: the mirrored pod's (the mirror read its
    namespace's label), else its namespace's as the product maps it, else (on a real cluster)
    the team its namespace's `ebcloud.io/team` label names, which kube-scheduler does not send:
    a pod the mirror has not recorded yet is placed by its namespace's team from its first
    call. (None, True): a namespace without the label is no team's (kube-system, the cluster's
    DaemonSets). (None, False): a label naming no team of the product, or a namespace that
    could not be read: no pool takes the pod until it is known."""
    team = Pod.objects.live().exclude(team=None).filter(uid=uid).values_list("team_id", flat=True).first() if uid else None
    if team is not None:
        return team, True
    owner = namespace_owner(namespace)
    if owner is not None:
        return owner.pk, True
    if not real_cluster():
        return None, True  # the simulated cluster's namespaces are all the product's mapping
    label = _namespace_label(namespace)
    if label is None:
        return None, False
    if not label:
        return None, True
    team = Team.objects.filter(slug=label).values_list("pk", flat=True).first()
    return team, team is not None


def _namespace_label(namespace: str) -> str | None:
    """The namespace's `ebcloud.io/team` label ("" without one), as read from the cluster at
    most every NAMESPACE_LABEL_SECONDS; None when it cannot be read (fail closed)."""
    now = time.monotonic()
    cached = STATE.namespace_labels.get(namespace)
    if cached is not None and cached[0] > now:
        return cached[1]
    try:
        label = ClusterPods().namespace_team(namespace, timeout=NAMESPACE_READ_TIMEOUT)
    except Exception:  # noqa: BLE001 (the API server unreachable or refusing, a missing kubeconfig: fail closed)
        logger.warning("scheduler extender: cannot read namespace %s's team label", namespace, exc_info=True)
        label = None  # asked again after NAMESPACE_RETRY_SECONDS, not on every call meanwhile
    STATE.namespace_labels[namespace] = (now + (NAMESPACE_LABEL_SECONDS if label is not None else NAMESPACE_RETRY_SECONDS), label)
    return label
