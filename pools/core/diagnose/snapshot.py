"""What the self-checks (`pools.core.diagnose.checks`, seed T5) read about one pool: plain, frozen data.

`pools.selectors.diagnose` fills a `PoolSnapshot` from the database in a fixed number of queries;
tests build one by hand. `pending_pod_facts` runs the scheduler's own filters (pure) on an empty
node of the pool to say what stops a Pending pod there. No Django.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from pools.core.autoscaling import ScalingSpec, burst_ceiling
from pools.core.diagnose.blockers import (
    AFFINITY,
    FITS,
    GPU_MODEL,
    TAINT,
    TOO_LARGE,
    Blocker,
    pool_blockers,
)
from pools.core.scheduling.nodes import (
    REASON_AFFINITY,
    REASON_GPU_MODEL,
    REASON_TAINT,
    NodeState,
    Pod,
    filter_node,
    first_untolerated_taint,
    matches_affinity,
    may_use,
    resource_filter_reason,
)
from pools.core.scheduling.waiting import fits_empty


@dataclass(frozen=True)
class EventInfo:
    """A pool event of the window (Kubernetes-style reason, aggregated count)."""

    reason: str
    message: str
    last_seen: datetime
    count: int = 1
    node: str = ""


@dataclass(frozen=True)
class OrderInfo:
    """An order awaiting approval, one refused (Rejected/Failed) within the window, or a capacity
    order after such a refusal (Approved, Paying, Paid: it may have made the refusal good)."""

    id: int
    status: str
    reason: str = ""


@dataclass(frozen=True)
class NodeInfo:
    """A live node with what runs on it and what its agent last said."""

    name: str
    phase: str
    billing: str
    gpu_count: int
    created_at: datetime
    ready_at: datetime | None = None
    last_error: str = ""
    draining: bool = False  # being released (scale-in, lease end, deletion)
    allocated_gpus: float = 0.0  # requested by its Running pods
    largest_pod_gpus: float = 0.0  # the biggest Running pod's request
    last_pod_finished_at: datetime | None = None
    reported: bool = False  # its node agent has sent a report
    conditions: tuple[Mapping[str, str], ...] = ()
    cluster_fault: str = ""  # why the cluster runs no pod on it now ("" when it does)

    def idle_since(self) -> datetime | None:
        """When it last had work (Ready, or its last pod's end); None while a pod runs."""
        if self.allocated_gpus > 0:
            return None
        moments = [m for m in (self.ready_at or self.created_at, self.last_pod_finished_at) if m]
        return max(moments)


@dataclass(frozen=True)
class PendingPod:
    key: str
    pending_since: datetime
    gpus: float
    blocker: str  # FITS or what stops it on an empty node of the pool
    reason: str = ""  # the failing filter on that empty node (kube-scheduler words)
    explanation: str = ""  # the scheduler's last message
    hints: tuple[str, ...] = ()
    gpu_models: tuple[str, ...] = ()  # the models its ebcloud.io/gpu-models annotation allows (empty: any)
    blockers: tuple[Blocker, ...] = ()  # every check it fails on an empty node of the pool, with its fix (kube-scheduler's order)


@dataclass(frozen=True)
class RunningPod:
    """A pod running on the pool, as far as preemption is concerned."""

    key: str
    priority: int
    checkpointable: bool


@dataclass(frozen=True)
class GpuErrorInfo:
    """Xid errors of one code on one node in the window."""

    node: str
    xid: int
    kind: str  # application | reset | fatal | unknown (pools/core/repair.py)
    count: int
    last_seen: datetime


@dataclass(frozen=True)
class UtilisationInfo:
    """The pool's per-minute samples of the window, summarised."""

    samples: int
    first_minute: datetime | None = None
    mean_util_pct: float | None = None
    max_util_pct: float | None = None
    allocated_pct: float | None = None  # allocated GPUs / capacity over the window


@dataclass(frozen=True)
class CostInfo:
    """The pool's bill: the last 24 h against the daily average of the days before."""

    currency: str
    recent: Mapping[str, Decimal]  # component (gpu, storage, network, registry) -> amount
    previous_daily: Mapping[str, Decimal]
    previous_days: int
    recent_idle: Decimal = Decimal(0)  # GPU cost no pod used (charged to the owner as idle)
    cross_zone_gb: Decimal | None = None  # traffic of the last 24 h

    @property
    def recent_total(self) -> Decimal:
        return sum(self.recent.values(), Decimal(0))


@dataclass(frozen=True)
class FragmentationInfo:
    underused_nodes: int
    freeable_nodes: int


@dataclass(frozen=True)
class PoolSnapshot:
    name: str
    zone: str
    region: str
    gpu_model: str
    node_type: str
    gpus_per_node: int
    min_nodes: int
    max_nodes: int
    phase: str = "Ready"
    pending_reason: str = ""
    auto_repair: bool = True
    system_image: str = ""
    taints: tuple[str, ...] = ()  # "key=value:Effect"
    scaling: ScalingSpec | None = None
    burst_enabled: bool = False
    burst_max_nodes: int = 0
    events: tuple[EventInfo, ...] = ()
    orders: tuple[OrderInfo, ...] = ()
    nodes: tuple[NodeInfo, ...] = ()
    pending_pods: tuple[PendingPod, ...] = ()
    gpu_errors: tuple[GpuErrorInfo, ...] = ()
    utilisation: UtilisationInfo | None = None
    costs: CostInfo | None = None
    fragmentation: FragmentationInfo | None = None
    preemptible: bool = False  # the pool's nodes may be reclaimed
    running_pods: tuple[RunningPod, ...] = ()
    preempting_classes: tuple[tuple[str, int], ...] = ()  # (name, value) of the PriorityClasses that may preempt

    def live_nodes(self) -> list[NodeInfo]:
        return [n for n in self.nodes if n.phase != "Terminated" and not n.draining]

    def baseline(self) -> int:
        """Its monthly nodes (those not on demand), else nodeCount.min while none is live."""
        return sum(1 for n in self.live_nodes() if n.billing != "on_demand") or self.min_nodes

    def burst_room(self) -> int:
        """Nodes the autoscaler may add above the monthly baseline (pools/controllers/autoscaler.py)."""
        baseline = self.baseline()
        return burst_ceiling(baseline=baseline, max_nodes=self.max_nodes, burst_max_nodes=self.burst_max_nodes) - baseline

    def at_burst_limit(self) -> bool:
        """Whether the pool bursts and has every node spec.burst.maxNodes lets it have, below its
        nodeCount.max: the autoscaler adds none until that limit or nodeCount.min is raised."""
        live = len(self.live_nodes())
        return self.scaling is not None and self.burst_enabled and live < self.max_nodes and live >= self.baseline() + self.burst_room()


def pending_pod_facts(pod: Pod, template: NodeState, *, pending_since: datetime, others: Sequence[NodeState] = (),
                      explanation: str = "", hints: Sequence[str] = ()) -> PendingPod | None:  # fmt: skip
    """What stops `pod` on an empty node of the pool (`template`), or None if the pod is not
    aimed at this pool: the pool is one the pod could run on but for what the pool's spec or
    the pod's tolerations can change, so the pool's lead has something to do about it.

    Aimed means: the pod's team may use the pool; no other pool of the team (`others`, empty
    nodes of them with their teams) takes the pod as it is unless this one does too (it then
    waits for room wherever it fits); and either its nodeSelector/affinity selects the pool's
    labels (it names this pool, so a GPU model or size the pool cannot offer is reported), or
    the pool's GPU model and node size hold it and it has no selector at all or tolerates one
    of the pool's taints by name (a label missing on the pool's nodes, T2). A pod without a
    selector is not aimed at every pool: an H100-only pod is nothing an A100 pool can fix.

    The blocker is the first of: the GPU model and the size (what the pod cannot change about
    the pool, so no taint or label advice is given for them), then an untolerated taint, then
    a label the selector asks for and the nodes lack. `blockers` lists every one of them, in
    kube-scheduler's order, each with its fix (`blockers.pool_blockers`)."""
    if not may_use(pod, template):
        return None
    fits_here = filter_node(pod, template) is None
    if not fits_here and any(o.pool != template.pool and may_use(pod, o) and filter_node(pod, o) is None for o in others):
        return None  # another pool of the team takes it: that pool's concern
    selects = bool(pod.node_selector or pod.affinity_terms)
    matches = all(template.labels.get(k) == v for k, v in pod.node_selector.items()) and matches_affinity(pod.affinity_terms, template.labels)
    holds = fits_empty(pod, template)
    tolerates_one = any(t.key and any(t.tolerates(taint) for taint in template.taints) for t in pod.tolerations)
    if not (fits_here or (selects and matches) or (holds and (not selects or tolerates_one))):
        return None
    if pod.gpu_count and pod.gpu_models and template.gpu_model not in pod.gpu_models:
        blocker, reason = GPU_MODEL, REASON_GPU_MODEL
    elif short := resource_filter_reason(pod, template):
        blocker, reason = TOO_LARGE, short  # an empty node cannot hold it: the request exceeds allocatable
    elif first_untolerated_taint(template.taints, pod.tolerations) is not None:
        blocker, reason = TAINT, REASON_TAINT
    elif not matches:
        blocker, reason = AFFINITY, REASON_AFFINITY
    else:
        blocker, reason = FITS, ""
    return PendingPod(key=pod.name, pending_since=pending_since, gpus=pod.gpu_request_milli / 1000, blocker=blocker, reason=reason,
                      explanation=explanation, hints=tuple(hints), gpu_models=pod.gpu_models,
                      blockers=pool_blockers(pod, template) if blocker != FITS else ())  # fmt: skip
