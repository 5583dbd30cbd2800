"""The queue a pool sees: the Pending pods of its team that would fit one of its nodes (the
autoscaler's `queued_pods` metric; expendable pods left out, `scale_up_queue`), and the
template node that decides it (a new node of the pool, with a real cluster's DaemonSet pods).
The autoscaler, the water-level samples, /metrics and the self-checks read the queue here."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence

from django.conf import settings
from django.db.models import Exists, OuterRef, Q
from django.db.models.fields.json import KT

from pools.core.podspec import core_pod
from pools.core.scheduling.nodes import (
    NodeState,
    Taint,
    best_fit_gpus,
    filter_node,
    resource_filter_reason,
)
from pools.core.scheduling.nodes import Pod as CorePod
from pools.core.spec import PoolSpec, effective_node_labels, parse_document
from pools.models import GpuNodePool, Node
from pools.models.pods import Pod
from pools.providers import real_cluster
from pools.selectors.cluster import readable_core_pod
from pools.selectors.pools import catalog_current


def queued_pods(pending: list[Pod], template: NodeState) -> list[CorePod]:
    """The `queued_pods` metric: Pending pods of the pool's team that would fit one of its nodes."""
    return fitting_pods([core for p in pending if (core := readable_core_pod(p)) is not None], template)


def fitting_pods(pods: list[CorePod], template: NodeState) -> list[CorePod]:
    """The pods that fit an empty node like `template`. Pods of one shape (`shape_key`: equal
    requests, tolerations, selectors and GPU models) filter alike, so each shape is tried
    once: a team's queue of thousands of pods costs one filter per shape per pool."""
    verdicts: dict[tuple, bool] = {}
    out = []
    for pod in pods:
        fits = verdicts.get(pod.shape_key)
        if fits is None:
            fits = verdicts[pod.shape_key] = filter_node(pod, template) is None
        if fits:
            out.append(pod)
    return out


def scale_up_queue():
    """The Pending pods that may make the autoscaler buy a node: all but the expendable ones
    (priority below `EBCLOUD_EXPENDABLE_PODS_PRIORITY_CUTOFF`, Cluster Autoscaler's
    --expendable-pods-priority-cutoff), which wait for spare room, and those kube-scheduler's
    preemption nominated a node for, which wait for their victims to go (Cluster Autoscaler's
    "waiting for lower priority pods preemption": they need no new node), while that node is
    still there: a pod nominated to a node gone since waits for nothing."""
    nominated_live = Node.objects.filter(name=OuterRef("nominated_node_name")).exclude(phase=Node.Phase.TERMINATED)
    return Pod.objects.filter(Q(nominated_node_name="") | ~Exists(nominated_live), phase=Pod.Phase.PENDING, priority__gte=settings.EBCLOUD_EXPENDABLE_PODS_PRIORITY_CUTOFF)


def pool_queue_length(pool: GpuNodePool) -> int:
    """`queued_pods` for one pool, for the water-level samples and /metrics."""
    spec = parse_document(pool.document, catalog_current())
    template = template_node(pool, spec, daemon_sets=daemon_set_pods([pool.pk]).get(pool.pk, ()))
    return len(queued_pods(list(scale_up_queue().filter(team=pool.team)), template))


def template_node(
    pool: GpuNodePool, spec: PoolSpec, *, billing: str = Node.Billing.ON_DEMAND, daemon_sets: Sequence[CorePod] = ()
) -> NodeState:
    """An empty node of the pool as it would register (a burst node unless `billing` says
    otherwise): its labels, taints and resources, running the pool's `daemon_sets` pods
    (`daemon_set_pods`) where they fit."""
    template = NodeState(
        name=f"{pool.name}-template",
        cpu_milli=pool.node_type.cpu_milli,
        memory_mib=pool.node_type.memory_mib,
        gpu_count=pool.node_type.gpu_count,
        gpu_model=pool.gpu_model.name,
        pool=pool.name,
        labels=effective_node_labels(spec, zone=pool.zone.name, billing=billing, team=pool.team.slug),
        taints=tuple(Taint(t.key, t.value, t.effect) for t in spec.node_taints),
    )
    for pod in daemon_sets:
        gpus = best_fit_gpus(pod, template.gpu_free)
        if gpus is not None and resource_filter_reason(pod, template) is None:
            template.bind(pod, gpus)
    return template


def daemon_set_pods(pool_ids: Collection[int]) -> dict[int, list[CorePod]]:
    """Per pool, the DaemonSet pods a new node of it would run on a real cluster (the simulated
    one has none), for its template: Cluster Autoscaler builds a node group's template from one
    of its nodes with that node's DaemonSet pods (`TemplateNodeInfo`), so that a Pending pod
    that fits only an empty node buys no node that would leave it Pending. The DaemonSets
    themselves are not read here (the pod mirror keeps pods): they are the DaemonSet pods Running
    on the pool's Ready node that runs the most of them; a pool with no Ready node has none to
    go by. One query for all the pools, which reads the pods' owners, not their documents."""
    if not pool_ids or not real_cluster():
        return {}
    rows = (
        Pod.objects.live().filter(node__pool__in=pool_ids, node__phase=Node.Phase.READY, phase=Pod.Phase.RUNNING)
        .annotate(owners=KT("document__metadata__ownerReferences")).filter(owners__contains='"DaemonSet"')
        .order_by("node_id", "pk").values_list("node__pool_id", "node_id", "namespace", "name", "cpu_milli", "memory_mib", "gpu_count", "gpu_milli", "owners")
    )  # fmt: skip
    by_node: dict[tuple[int, int], list[CorePod]] = {}
    for pool_id, node_id, namespace, name, cpu, memory, gpus, milli, owners in rows:
        references = json.loads(owners) if isinstance(owners, str) else owners
        if any(isinstance(r, dict) and r.get("controller") is True and r.get("kind") == "DaemonSet" for r in references or ()):
            pod = core_pod(key=f"{namespace}/{name}", cpu_milli=cpu, memory_mib=memory, gpu_count=gpus, gpu_milli=milli)
            by_node.setdefault((pool_id, node_id), []).append(pod)
    out: dict[int, list[CorePod]] = {}
    for (pool_id, _), pods in by_node.items():
        if len(pods) > len(out.get(pool_id, ())):
            out[pool_id] = pods
    return out
