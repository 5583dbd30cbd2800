"""The cluster as the scheduling core sees it: Node rows -> `NodeState`, Pod rows -> the core's
`Pod` (one by one, or many read as values with equal workloads built once), and the live nodes
with their Running pods bound. The scheduler pass, the autoscaler, repack and the self-checks
read the cluster through these."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator

from django.db.models import QuerySet, TextField
from django.db.models.functions import Cast

from pools.core.podspec import core_pod
from pools.core.scheduling.nodes import NodeState, OversubscribedError, Taint, best_fit_gpus
from pools.core.scheduling.nodes import Pod as CorePod
from pools.models import Node, Team
from pools.models.pods import Pod

logger = logging.getLogger("ebcloud.scheduler")

# How the scheduling core refuses a stored pod's fields (a node affinity of an earlier release
# with a key of null, a term that is not a mapping): a fault of that row, which its readers skip.
UNREADABLE = (TypeError, ValueError, LookupError, AttributeError, ArithmeticError, RecursionError)

# Nodes the scheduler sees: Ready ones take pods; cordoned/draining ones keep theirs.
SCHEDULER_PHASES = (Node.Phase.READY, Node.Phase.CORDONED, Node.Phase.DRAINING, Node.Phase.UNKNOWN)
UNSCHEDULABLE_PHASES = (Node.Phase.CORDONED, Node.Phase.DRAINING)

def team_identity(team_id: int | None) -> str:
    """The core's opaque team of a pod or pool: its team's id as text ("" for no team)."""
    return "" if team_id is None else str(team_id)


def team_id_of(identity: str) -> int | None:
    """The team id behind a core team (`team_identity`'s inverse; None for no team)."""
    return int(identity) if identity else None


def core_pod_of(pod: Pod, *, placed: bool = False) -> CorePod:
    """The scheduling core's pod. `placed`: for what a pod on a node holds, which its node affinity
    does not change: one stored before a check of that affinity existed (a key of null, which the
    core refuses) is read without it, rather than failing every reader of the cluster's state."""
    try:
        return _core_pod_of(pod)
    except UNREADABLE:
        if not placed:
            raise
        return _core_pod_of(pod, affinity=None)


def _core_pod_of(pod: Pod, **instead) -> CorePod:
    """The core's pod from the row, with any of its fields read as `instead` gives them (None:
    left out; `core_pod_or_fault` leaves each out in turn to find the one the core refuses)."""
    return core_pod(**dict(
        key=pod.key,
        team=team_identity(pod.team_id),
        cpu_milli=pod.cpu_milli,
        memory_mib=pod.memory_mib,
        gpu_count=pod.gpu_count,
        gpu_milli=pod.gpu_milli,
        gpu_shares=pod.gpu_shares,
        gpu_models=pod.gpu_models,
        priority=pod.priority,
        preemption_policy=pod.preemption_policy,
        checkpointable=pod.checkpointable,
        labels=pod.labels,
        tolerations=pod.tolerations,
        node_selector=pod.node_selector,
        affinity=pod.affinity,
        started_at=pod.started_at,
    ) | instead)


def readable_core_pod(pod: Pod) -> CorePod | None:
    """`core_pod_of`, or None (logged) for a pod stored before a check of its spec existed (a
    node-affinity key of null) that the scheduling core refuses: it fits nowhere, and it must not
    fail the pass, the page or the metric that reads it beside every other team's pods."""
    read = core_pod_or_fault(pod)
    if isinstance(read, Exception):
        log_unreadable(pod.key, read)
        return None
    return read


class UnreadablePod(ValueError):
    """Why the scheduling core refuses a stored pod, with the field (of the pod's manifest) to fix."""


# The stored fields the core reads as structures, each by its path in the pod's manifest.
_STRUCTURED = (("affinity", "spec.affinity"), ("node_selector", "spec.nodeSelector"), ("tolerations", "spec.tolerations"),
               ("labels", "metadata.labels"), ("gpu_models", "the ebcloud.io/gpu-models annotation"))  # fmt: skip


def core_pod_or_fault(pod: Pod) -> CorePod | UnreadablePod:
    """`core_pod_of`, or the fault by which the scheduling core refuses the stored pod, naming
    the first field without which it would read (what the pod's owner must fix)."""
    try:
        return core_pod_of(pod)
    except UNREADABLE as exc:
        path, _ = _read_leaving_out_fault(pod)
        return UnreadablePod(f"{path}: {exc}" if path else str(exc))


def core_pod_leaving_out_fault(pod: Pod) -> CorePod | None:
    """The core's pod of a stored pod it refuses, read with the field it refuses left out (which
    pools the pod is aimed at, but for that field); None where no one field explains it."""
    return _read_leaving_out_fault(pod)[1]


def _read_leaving_out_fault(pod: Pod) -> tuple[str, CorePod | None]:
    for field, path in _STRUCTURED:
        try:
            return path, _core_pod_of(pod, **{field: None})
        except UNREADABLE:
            continue
    return "", None


_TOLD: dict[tuple[str, str], None] = {}  # what log_unreadable said, oldest first
_TOLD_MOST = 1000
_TOLD_LOCK = threading.Lock()  # the extender's threads read pods too


def log_unreadable(key: str, exc: BaseException, log: logging.Logger = logger) -> None:
    """The one line said of a stored pod the scheduling core refuses (the reader skips it): once
    per pod and fault in a process, not once per reader and pass (every few seconds, while the
    pod waits for its owner to delete it)."""
    told = (key, str(exc))
    with _TOLD_LOCK:
        if told in _TOLD:
            return
        if len(_TOLD) >= _TOLD_MOST:
            del _TOLD[next(iter(_TOLD))]
        _TOLD[told] = None
    log.error("pending pod %s is not a valid pod for the scheduling core: %s", key, exc)


_POD_COLUMNS = ("team_id", "namespace", "name", "cpu_milli", "memory_mib", "gpu_count", "gpu_milli", "gpu_shares", "priority", "preemption_policy", "checkpointable")
_POD_JSON = ("labels", "gpu_models", "tolerations", "node_selector", "affinity")


def core_pods_of(pods: QuerySet[Pod]) -> Iterator[tuple[int, str, CorePod | Exception]]:
    """`core_pod_of` for many pods, read as values: (team id, namespace/name, its core pod or
    the error that makes it invalid). Pods whose fields are equal but for their names (a
    workload's replicas) are built and checked once and share that pod's fields: a queue of
    10,000 Pending pods holds a few workloads (issue 9). The pods carry no start time (a
    Pending pod has none; `core_pod_of` reads it for the running pods preemption weighs)."""
    texts = {f"{name}_text": Cast(name, TextField()) for name in _POD_JSON}
    built: dict[tuple, CorePod | Exception] = {}  # the pods' fields but their names -> the first such pod

    for row in pods.annotate(**texts).values_list(*_POD_COLUMNS, *texts).iterator(chunk_size=5000):
        team_id, namespace, name = row[:3]
        key, fields = f"{namespace}/{name}", (team_id, *row[3:])
        same = built.get(fields)
        if same is None:
            same = built[fields] = _core_pod_of_row(key, fields)
        yield team_id, key, same if isinstance(same, Exception) or same.name == key else same.renamed(key)


def _core_pod_of_row(key: str, row: tuple) -> CorePod | Exception:
    """The core's pod from a `core_pods_of` row past its namespace and name, or why it is invalid."""
    team_id, cpu_milli, memory_mib, gpu_count, gpu_milli, gpu_shares, priority, preemption_policy, checkpointable, *texts = row
    try:
        labels, gpu_models, tolerations, node_selector, affinity = (None if text is None else json.loads(text) for text in texts)
        return core_pod(
            key=key, team=team_identity(team_id), cpu_milli=cpu_milli, memory_mib=memory_mib, gpu_count=gpu_count, gpu_milli=gpu_milli,
            gpu_shares=gpu_shares, gpu_models=gpu_models, priority=priority, preemption_policy=preemption_policy, checkpointable=checkpointable, labels=labels,
            tolerations=tolerations, node_selector=node_selector, affinity=affinity,
        )  # fmt: skip
    except UNREADABLE as exc:  # a stored pod the core refuses is the caller's to report
        return exc


def pool_teams(pools) -> dict[int, frozenset[str]]:
    """The teams whose pods may use each pool (by pool id): its own and those its
    `spec.sharedWith` names (slugs, resolved in one query; a slug no team has lends nothing)."""
    lent = {pool.pk: pool.shared_with for pool in pools}
    ids = dict(Team.objects.filter(slug__in={s for slugs in lent.values() for s in slugs}).values_list("slug", "pk")) if any(lent.values()) else {}
    return {
        pool.pk: frozenset({team_identity(pool.team_id), *(team_identity(ids[s]) for s in lent[pool.pk] if s in ids)})
        for pool in pools
    }


def node_state_of(node: Node, teams: frozenset[str]) -> NodeState:
    """A Node row (with pool, node type and GPU model selected) as the core's NodeState;
    `teams` from `pool_teams`."""
    return node_state_from(
        name=node.name, pool=node.pool, phase=node.phase, gpu_count=node.gpu_count, labels=node.labels,
        taints=node.taints, unschedulable=node.unschedulable, teams=teams, cluster_fault=node.cluster_fault,
    )  # fmt: skip


def node_state_from(
    *, name: str, pool, phase: str, gpu_count: int, labels, taints, unschedulable: bool, teams: frozenset[str], cluster_fault: str = ""
) -> NodeState:
    """`node_state_of` from a node's fields (read as values, its pool with node type and GPU
    model selected once for all its nodes). A node is Ready to the core while its agent reports
    (not Unknown) and the cluster runs pods on it (no `cluster_fault`: its Node is there, Ready,
    with its GPUs allocatable)."""
    return NodeState(
        name=name,
        cpu_milli=pool.node_type.cpu_milli,
        memory_mib=pool.node_type.memory_mib,
        gpu_count=gpu_count,
        gpu_model=pool.gpu_model.name,
        pool=pool.name,
        labels=dict(labels or {}),
        taints=tuple(Taint(t["key"], t.get("value", ""), t["effect"]) for t in taints or ()),
        ready=phase != Node.Phase.UNKNOWN and not cluster_fault,
        unschedulable=unschedulable or phase in UNSCHEDULABLE_PHASES,
        teams=teams,
        owner=team_identity(pool.team_id),
    )


def live_nodes(*, pools=None) -> list[Node]:
    nodes = Node.objects.filter(phase__in=SCHEDULER_PHASES).select_related("pool", "pool__node_type", "pool__gpu_model")
    if pools is not None:
        nodes = nodes.filter(pool__in=pools)
    return list(nodes.order_by("name"))


def cluster_state(nodes: list[Node], pods: list[Pod]) -> dict[str, NodeState]:
    """NodeStates with the Running pods of `pods` bound on them (pods elsewhere are skipped).
    A pod of a real cluster has no GPU indices recorded (the node's device plugin chose them,
    the API does not say which): it is counted on the GPUs it fits best."""
    by_id = {n.pk: n for n in nodes}
    teams = pool_teams({n.pool_id: n.pool for n in nodes}.values())
    states = {n.name: node_state_of(n, teams[n.pool_id]) for n in nodes}
    for pod in pods:
        node = by_id.get(pod.node_id)
        if pod.phase == Pod.Phase.RUNNING and node is not None:
            state, core = states[node.name], core_pod_of(pod, placed=True)
            gpus = pod.gpu_indices or (best_fit_gpus(core, state.gpu_free) if core.gpu_count else ()) or ()
            try:
                state.bind(core, gpus)
            except (OversubscribedError, ValueError):
                continue  # recorded state disagrees with the node; the core refuses to oversubscribe
    return states
