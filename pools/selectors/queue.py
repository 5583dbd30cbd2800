"""The queue a pool sees: the Pending pods of its team that would fit one of its nodes (the
autoscaler's `queued_pods` metric; expendable pods left out, `scale_up_queue`), and the empty
template node that decides it. The
autoscaler, the water-level samples, /metrics and the self-checks read the queue here."""

from __future__ import annotations

from django.conf import settings

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
from pools.selectors.cluster import core_pod_of
from pools.selectors.pools import catalog_current


def queued_pods(pending: list[Pod], template: NodeState) -> list[CorePod]:
    """The `queued_pods` metric: Pending pods of the pool's team that would fit one of its nodes."""
    return fitting_pods([core_pod_of(p) for p in pending], template)


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
    "waiting for lower priority pods preemption": they need no new node)."""
    return Pod.objects.filter(phase=Pod.Phase.PENDING, priority__gte=settings.EBCLOUD_EXPENDABLE_PODS_PRIORITY_CUTOFF, nominated_node_name="")


def pool_queue_length(pool: GpuNodePool) -> int:
    """`queued_pods` for one pool, for the water-level samples and /metrics."""
    spec = parse_document(pool.document, catalog_current())
    return len(queued_pods(list(scale_up_queue().filter(team=pool.team)), template_node(pool, spec)))


def template_node(pool: GpuNodePool, spec: PoolSpec, *, billing: str = Node.Billing.ON_DEMAND, daemon_sets: bool = False) -> NodeState:
    """An empty node of the pool as it would register (a burst node unless `billing` says
    otherwise): its labels, taints and resources; with `daemon_sets`, running the DaemonSet
    pods a new node of the pool would run (`daemon_set_pods_bind`)."""
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
    if daemon_sets:
        daemon_set_pods_bind(template, pool)
    return template


def daemon_set_pods_bind(template: NodeState, pool: GpuNodePool) -> None:
    """Bind to `template` the DaemonSet pods a new node of the pool would run, as Cluster
    Autoscaler builds a node group's template from one of its nodes with that node's DaemonSet
    pods (`TemplateNodeInfo`): a Pending pod that fits only an empty node fits no new node, and
    one bought for it would leave it Pending. The DaemonSets themselves are not read here (the
    pod mirror keeps pods), so they are those Running on the pool's Ready node that runs the most
    of them; a pool with no Ready node has none to go by. One query."""
    rows = Pod.objects.live().filter(node__pool=pool, node__phase=Node.Phase.READY, phase=Pod.Phase.RUNNING).order_by("node_id", "pk")
    by_node: dict[int, list[Pod]] = {}
    for pod in rows:
        if pod.controller_kind == "DaemonSet":
            by_node.setdefault(pod.node_id, []).append(pod)
    for pod in max(by_node.values(), key=len, default=()):
        core = core_pod_of(pod)
        gpus = best_fit_gpus(core, template.gpu_free)
        if gpus is not None and resource_filter_reason(core, template) is None:
            template.bind(core, gpus)
