"""Pure decisions of the lifecycle controller (design §1: functional core, `now` passed in).

Which provisioning steps a node walks (seed G1, D4), how long to back off after a failure, which
nodes leave first when a pool shrinks (design §3, issue 3 §6), what a lease needs now (D2), when
a silent node becomes `Unknown` (D1), and a pool's status from its rows (`status_of`; the rules
of its phase and pendingReason are `pools.core.pool_phase`'s). No Django here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from pools.core.leases import NONE, lease_action
from pools.core.node_labels import (
    CORDONED_PHASES,
    REGISTERED_PHASES,
    ClusterNodeState,
    drifted,
    fault_now,
)
from pools.core.pool_phase import (
    FAULT_COUNTED_PHASES,
    PoolCounts,
    counts_by_billing,
    pool_conditions,
    pool_status,
)

# Provisioning steps, in order (seed G1: initialise OS -> install driver -> join -> Ready).
BOOT = "boot"
IMAGE_PULL = "image_pull"
DRIVER_INSTALL = "driver_install"
KUBELET_INSTALL = "kubelet_install"
KUBELET_JOIN = "kubelet_join"
STEPS = (BOOT, IMAGE_PULL, DRIVER_INSTALL, KUBELET_INSTALL, KUBELET_JOIN)
# Steps that do not run on a machine: placing the machine order and paying a pool order.
ORDER = "order"
PAY = "pay"

# Node phase while a step runs.
STEP_PHASE = {
    BOOT: "Provisioning",
    IMAGE_PULL: "Initializing",
    DRIVER_INSTALL: "Initializing",
    KUBELET_INSTALL: "Initializing",
    KUBELET_JOIN: "Registering",
}
# Warning reason when a step fails (seed T1: stock, balance, image pull, init script).
FAILURE_REASON = {
    ORDER: "OutOfStock",
    PAY: "PaymentDeclined",
    BOOT: "ProvisionFailed",
    IMAGE_PULL: "ImagePullFailed",
    DRIVER_INSTALL: "DriverInstallFailed",
    KUBELET_INSTALL: "KubeletInstallFailed",
    KUBELET_JOIN: "KubeletJoinTimeout",
}

# Release reasons. A retiring release uses up the order's slot (the capacity is gone); any
# other release (reclaim, failed provisioning) is replaced by a new node on the same order.
LEASE_EXPIRED = "LeaseExpired"
SCALED_IN = "ScaledIn"
POOL_DELETED = "PoolDeleted"
RECLAIMED = "Reclaimed"
PROVISIONING_FAILED = "ProvisioningFailed"
PROVISION_TIMEOUT = "ProvisionTimeout"  # a burst node not Ready in EBCLOUD_MAX_NODE_PROVISION_SECONDS: given up, not replaced
REPAIRED = "Repair"  # replaced by auto-repair: the successor takes the slot
RETIRING_REASONS = (LEASE_EXPIRED, SCALED_IN, POOL_DELETED)
HEARTBEAT_HELD = ("Cordoned", "Repairing")  # under repair: a silence is reported, the phase kept (`heartbeat_phase`)

READY_PHASES = ("Ready",)
PROVISIONING_PHASES = ("Ordering", "Provisioning", "Initializing", "Registering")


def steps_for(*, prewarmed: bool) -> tuple[str, ...]:
    """A prewarmed image has the driver and CUDA baked in: no driver install step (D4)."""
    return tuple(s for s in STEPS if not (prewarmed and s == DRIVER_INSTALL))


def next_step(step: str, *, prewarmed: bool) -> str | None:
    """The step after `step`, None after the last; a step the image skips goes on from its place, never back to boot."""
    steps = steps_for(prewarmed=prewarmed)
    return next((s for s in STEPS[STEPS.index(step) + 1 :] if s in steps), None)


def backoff(attempt: int, *, base_seconds: int = 30, cap_seconds: int = 600) -> timedelta:
    """Exponential backoff after the `attempt`-th failure: 30 s, 60 s, 120 s, ... capped at 10 min."""
    attempt = max(1, attempt)
    return timedelta(seconds=min(cap_seconds, base_seconds * 2 ** min(attempt - 1, 30)))


def format_duration(delta: timedelta) -> str:
    """`4m5s`, `2h0m`, `45s` — the Go/Kubernetes style used in messages."""
    seconds = int(delta.total_seconds())
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes}m"
    return f"{hours // 24}d{hours % 24}h"


# ---------------------------------------------------------------------------------------------
# Shrinking (issue 3 §6: surplus burst and expired nodes leave first)


@dataclass(frozen=True)
class NodeView:
    name: str
    billing: str
    phase: str
    lease_end: datetime | None = None
    renewing: bool = False  # a renewal is ordered for its lease (approved, being paid, paid): the pool pays to keep it


_BILLING_RANK = {"on_demand": 0, "preemptible": 1, "monthly": 2}


def drain_order(nodes: Iterable[NodeView], *, now: datetime) -> list[NodeView]:
    """Nodes in the order they should leave, the cheapest to lose first (as Cluster Autoscaler
    and Karpenter shrink a node group): burst (on-demand) first, then preemptible, then monthly
    nodes whose lease has ended, then the rest; within each group nodes that are not Ready yet
    (nothing runs there) before Ready ones, then nodes with no renewal ordered before renewed
    ones (a renewal is money for a node the pool keeps), then by nearest lease end (a lease
    about to end unrenewed costs nothing to let go), then by name. A paid renewal shows as the
    later lease end it bought. `renewals_chosen` keeps the same order, so a pass never renews
    a node its surplus drain then removes."""

    def key(node: NodeView):
        expired = node.lease_end is not None and node.lease_end <= now
        lease = node.lease_end.timestamp() if node.lease_end else float("inf")
        return (
            _BILLING_RANK.get(node.billing, 3) if not expired else -1,
            0 if node.phase not in READY_PHASES else 1,
            node.renewing,
            lease,
            node.name,
        )

    return sorted(nodes, key=key)


def surplus(nodes: Sequence[NodeView], *, max_nodes: int, now: datetime) -> list[NodeView]:
    """Nodes above `nodeCount.max`, chosen by `drain_order`."""
    extra = len(nodes) - max_nodes
    return drain_order(nodes, now=now)[:extra] if extra > 0 else []


def renewals_chosen(nodes: Sequence[NodeView], *, expiring: Iterable[str], allowed: int, max_nodes: int, now: datetime) -> set[str]:
    """Which of the `expiring` nodes (told of their lease's end now) autoRenew renews: at most
    `allowed` (`leases.renewals_allowed`), never one of the `surplus` of `nodes` (the pool's
    live nodes not leaving yet), and the ones `drain_order` keeps longest first. The surplus
    drain that follows in the same pass then picks the same nodes as before: a renewal only
    moves a kept node further back in the order, so the node renewed is the node kept, and no
    renewal is paid for a node drained as surplus (the pool would end below what it asked)."""
    leaving = {n.name for n in surplus(nodes, max_nodes=max_nodes, now=now)}
    wanted = set(expiring) - leaving
    kept_longest = [n.name for n in reversed(drain_order(nodes, now=now)) if n.name in wanted]
    return set(kept_longest[: max(0, allowed)])


@dataclass(frozen=True)
class PodView:
    namespace: str
    name: str
    priority: int = 0


def eviction_order(pods: Iterable[PodView]) -> list[PodView]:
    """A drain evicts the lowest priority first (issue 3 §4)."""
    return sorted(pods, key=lambda p: (p.priority, p.namespace, p.name))


# ---------------------------------------------------------------------------------------------
# Heartbeats (D1: a silent node is Unknown only after a grace period; nothing is evicted)


def heartbeat_phase(*, phase: str, last_heartbeat: datetime | None, now: datetime, grace: timedelta) -> str:
    """`Unknown` for a Ready node silent longer than `grace`, Ready again once it reports; any other phase is kept:
    a node that never reported (silence is not evidence), one under repair (`HEARTBEAT_HELD`: exits.heartbeats_check)."""
    if last_heartbeat is None or phase not in ("Ready", "Unknown"):
        return phase
    return "Unknown" if now - last_heartbeat > grace else "Ready"


FULL_DISRUPTION_SHARE = 0.55  # kube-controller-manager's --unhealthy-zone-threshold
FULL_DISRUPTION_MIN_NODES = 3


def full_disruption(*, silent: int, reporting: int) -> bool:
    """Most of the fleet silent at once is the control plane's (or its network's) outage, not
    the nodes': like Kubernetes' node lifecycle controller in full disruption, no node is
    marked Unknown then. `silent` of `reporting` nodes (those that ever reported) are past the
    grace. After an outage the agents replay their buffers and the nodes stay Ready."""
    return reporting >= FULL_DISRUPTION_MIN_NODES and silent > FULL_DISRUPTION_SHARE * reporting


# ---------------------------------------------------------------------------------------------
# Capacity times (O4)


def slow_capacity_cause(*, last_error: str, prewarmed: bool, image: str) -> str:
    """O4: trigger -> Ready over 15 minutes points at image prewarming or stock (or quota)."""
    if last_error.startswith("OutOfStock"):
        return f"stock: {last_error} (add a fallback zone to spec.zones)"
    if last_error:
        return last_error
    if not prewarmed:
        return f"the system image {image} is not prewarmed: driver and CUDA are installed on every boot"
    return "stock, quota or payment delays before provisioning (see the pool's Warning events)"


@dataclass(frozen=True)
class CapacityTimes:
    """Time to capacity of a pool (issue 3 §8, O4): request -> node Ready -> first pod Running."""

    nodes: int
    last_ready: timedelta | None
    median_ready: timedelta | None
    max_ready: timedelta | None
    median_first_pod: timedelta | None
    slow: int  # nodes over 15 minutes to Ready (O4 says: look at prewarming or stock)


def capacity_summary(ready: Sequence[timedelta], first_pod: Sequence[timedelta], *, slow_after: timedelta = timedelta(minutes=15)) -> CapacityTimes:
    """`ready` in order of readiness (the last one is the most recent)."""

    def median(values: Sequence[timedelta]) -> timedelta | None:
        if not values:
            return None
        ordered = sorted(values)
        middle = len(ordered) // 2
        return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2

    return CapacityTimes(
        nodes=len(ready),
        last_ready=ready[-1] if ready else None,
        median_ready=median(ready),
        max_ready=max(ready) if ready else None,
        median_first_pod=median(first_pod),
        slow=sum(1 for r in ready if r > slow_after),
    )


# ---------------------------------------------------------------------------------------------
# A pool's state as plain rows, for the pass over every pool (issue 9: batched work). The loop
# loads all pools' rows in a fixed number of queries (pools/controllers/state.py); these decide,
# without the database, whether a pool needs the full per-pool pass and what its status is.


@dataclass(frozen=True)
class NodeRow:
    """A live (not Terminated) node, as much of it as the pass's decisions read."""

    pk: int
    name: str
    phase: str
    billing: str
    release_reason: str = ""
    last_error: str = ""
    provider_id: str = ""
    created_at: datetime | None = None
    step_due_at: datetime | None = None
    lease_end: datetime | None = None
    lease_notified: bool = False
    last_heartbeat: datetime | None = None
    labels: Mapping[str, str] | None = None  # what we applied to the node in the cluster
    taints: tuple[Mapping[str, str], ...] = ()
    gpu_count: int = 0
    cluster_fault: str = ""  # why the cluster ran no pod on it when last looked (`cluster_fault`)
    fault_started: bool = True  # its `cluster_fault_since` is known (a release without the column wrote none)


@dataclass(frozen=True)
class OrderRow:
    """An order with the nodes it accounts for: `holding` a slot (live and not leaving, or
    retired), `retired` (left for good: its capacity is gone)."""

    pk: int
    kind: str
    status: str
    node_count: int
    reason: str = ""
    holding: int = 0
    retired: int = 0


@dataclass(frozen=True)
class PoolSnapshot:
    pk: int
    phase: str
    min_nodes: int
    max_nodes: int
    preemptible: bool = False
    nodes: tuple[NodeRow, ...] = ()  # live nodes, by name
    orders: tuple[OrderRow, ...] = ()
    slow_reported: frozenset[int] = frozenset()  # nodes that already have a SlowCapacity event
    conditions: tuple = ()  # stored status, to write only what changed
    node_counts: Mapping | None = None
    pending_reason: str = ""
    observed_generation: int = 0
    generation: int = 0


@dataclass(frozen=True)
class PoolStatus:
    phase: str
    pending_reason: str
    conditions: list[dict]
    node_counts: dict[str, dict[str, int]]
    desired: int

    def same_as(self, snapshot: PoolSnapshot, generation: int) -> bool:
        """Nothing to write: the stored status already says this."""
        return (
            snapshot.phase == self.phase
            and snapshot.pending_reason == self.pending_reason
            and snapshot.observed_generation == generation
            and list(snapshot.conditions) == self.conditions
            and dict(snapshot.node_counts or {}) == self.node_counts
        )

    def columns(self) -> dict[str, object]:
        """The pool row's status columns, as every writer sets them (the observed generation is
        the writer's own: a pass that left a spec off some node has not observed it)."""
        return {"phase": self.phase, "pending_reason": self.pending_reason, "conditions": self.conditions, "node_counts": self.node_counts}

    def ready_news(self, pool_name: str, phase_before: str) -> str:
        """The `PoolReady` event's message when this status makes the pool Ready (from
        `phase_before`); "" when it does not."""
        if self.phase != "Ready" or phase_before == self.phase:
            return ""
        return f"All {self.desired} node(s) of {pool_name} are Ready"


CAPACITY_KINDS = ("create", "grow")  # orders that add monthly capacity (a renewal adds none)
UNPAID = ("Approved", "Paying")  # approved, not paid yet: awaiting payment, or being paid now
QUOTA_HOLDING = ("Pending", *UNPAID, "Paid")
WITHDRAWN = "Withdrawn: "  # an order's reason when its own pool took it back (min lowered, pool deleted)


def order_refused(status: str, reason: str) -> bool:
    """Whether an order was refused (by an admin, a quota, a payment), not withdrawn by its pool
    (status `Withdrawn`; an earlier release marked it by the reason's `WITHDRAWN` alone): a
    withdrawal the lead chose is neither the pool's last refusal nor a failed scale-up in Diagnose."""
    return status in ("Rejected", "Failed") and not reason.startswith(WITHDRAWN)


SLOW_CAPACITY = timedelta(minutes=15)  # O4: over 15 minutes points at prewarming or stock


def work_needed(
    s: PoolSnapshot, *, now: datetime, lease_notice: timedelta, heartbeat_grace: timedelta, reclaiming: frozenset[str] = frozenset(),
    observed: Mapping[str, ClusterNodeState] | None = None,
) -> str:  # fmt: skip
    """Why the pool needs the full reconcile pass now; "" when a pass would only restate its
    status. Mirrors the steps of `pools.controllers.lifecycle._reconcile` one by one: a pool this calls
    quiet is one where each of them would find nothing to do."""
    if s.phase == "Deleting":
        return "Deleting"
    needed = steps_needed(s, now=now, lease_notice=lease_notice, heartbeat_grace=heartbeat_grace, reclaiming=reclaiming, observed=observed)
    return needed[0] if needed else ""


# The steps of the per-pool pass (`pools.controllers.lifecycle._reconcile`), in the order it runs them, each
# named by the reason `steps_needed` gives when that step has something to do.
PASS_STEPS = ("NodeDrift", "Draining", "OrderApproved", "ReclaimNotice", "LeaseAction", "Surplus", "NodesMissing", "StepDue", "SlowCapacity", "Heartbeat")


def steps_needed(
    s: PoolSnapshot, *, now: datetime, lease_notice: timedelta, heartbeat_grace: timedelta, reclaiming: frozenset[str] = frozenset(),
    observed: Mapping[str, ClusterNodeState] | None = None,
) -> tuple[str, ...]:  # fmt: skip
    """The steps of a live pool's pass (`PASS_STEPS`, in order) that would find something to do in
    these rows; a step left out would read its rows, change nothing and write no event. The
    per-pool pass of `reconcile_all` runs only these, asking again after each step it ran (a
    payment or a released node can give the next steps work).

    `NodeDrift` (pools/controllers/node_sync.py) without parsing the spec: a spec not yet
    observed (`generation`) may change what the nodes should carry; otherwise the nodes should
    carry what we applied last (their rows), and `observed` (the cluster's nodes, read once
    per pass) says whether they still do."""
    active = [n for n in s.nodes if not n.release_reason]
    provisioning = [n for n in active if n.phase in PROVISIONING_PHASES]
    registered = [n for n in s.nodes if n.phase in REGISTERED_PHASES]
    checks = (
        bool(registered) and (s.generation != s.observed_generation or _drifted(registered, observed)),
        len(active) < len(s.nodes),
        any(o.status in UNPAID for o in s.orders),  # to pay (a payment a worker left unsettled too)
        any(n.provider_id and n.provider_id in reclaiming and (not n.release_reason or n.phase == "Draining") for n in s.nodes),
        any(lease_action(lease_end=n.lease_end, now=now, notice=lease_notice, notified=n.lease_notified) != NONE for n in active),
        len(active) > s.max_nodes,
        len(active) < s.max_nodes and any(o.node_count > o.holding for o in s.orders if o.status == "Paid" and o.kind in CAPACITY_KINDS),
        any(n.step_due_at is None or now >= n.step_due_at for n in provisioning),
        any(n.created_at is not None and n.created_at < now - SLOW_CAPACITY and n.pk not in s.slow_reported for n in provisioning),
        any(
            heartbeat_phase(phase=n.phase, last_heartbeat=n.last_heartbeat, now=now, grace=heartbeat_grace) != n.phase
            or (n.phase in HEARTBEAT_HELD and n.last_heartbeat is not None and now - n.last_heartbeat > heartbeat_grace)
            for n in active
        ),
    )
    return tuple(step for step, needed in zip(PASS_STEPS, checks, strict=True) if needed)


def _drifted(nodes: Sequence[NodeRow], observed: Mapping[str, ClusterNodeState] | None) -> bool:
    """Some node lost in the cluster what we applied, or the cluster runs pods on it, or not,
    unlike when last looked (None: the cluster was not read). Nodes and
    the cluster's states share the values decoded from equal texts: each distinct pair is
    compared once, not once per node (a pass reads 20,000 nodes, issue 23)."""
    compared: set[tuple] = set()
    for n in nodes if observed is not None else ():
        state = observed.get(n.name)
        fault = fault_now(observed, name=n.name, gpu_count=n.gpu_count, leaving=bool(n.release_reason))
        if fault is not None and (fault != n.cluster_fault or not n.fault_started):  # as faults_record judges
            return True
        if state is None:
            continue
        cordoned = n.phase in CORDONED_PHASES
        key = (id(n.labels), id(n.taints), cordoned, id(state.labels), id(state.taints), state.unschedulable, state.gpu_shares_advertised)
        if key in compared:
            continue
        if drifted(applied_labels=n.labels or {}, applied_taints=n.taints, cordoned=cordoned, observed=state):
            return True
        compared.add(key)
    return False


def status_of(s: PoolSnapshot, *, stalls: Sequence[str] = (), now: datetime) -> PoolStatus:
    """The pool's phase, pendingReason, conditions and node counts from its rows (T1)."""
    capacity = [o for o in s.orders if o.status == "Paid" and o.kind in CAPACITY_KINDS]
    monthly_desired = sum(o.node_count - o.retired for o in capacity)
    burst = sum(1 for n in s.nodes if n.billing == "on_demand" and not n.release_reason)
    refused = max((o for o in s.orders if order_refused(o.status, o.reason)), key=lambda o: o.pk, default=None)
    counts = PoolCounts(
        min_nodes=s.min_nodes,
        ordered=sum(o.node_count - o.retired for o in s.orders if o.status in QUOTA_HOLDING and o.kind != "renew"),
        last_refusal=f"order #{refused.pk} {refused.status}: {refused.reason}" if refused else "",
        desired=min(monthly_desired, s.max_nodes) + burst,
        ready=sum(1 for n in s.nodes if n.phase == "Ready" and not n.release_reason and not n.cluster_fault),
        unavailable=sum(1 for n in s.nodes if n.phase in FAULT_COUNTED_PHASES and not n.release_reason and n.cluster_fault),
        repairing=sum(1 for n in s.nodes if n.phase in HEARTBEAT_HELD and not n.release_reason and not n.cluster_fault),
        provisioning=sum(1 for n in s.nodes if n.phase in PROVISIONING_PHASES and not n.release_reason),
        unknown=sum(1 for n in s.nodes if n.phase == "Unknown" and not n.release_reason),
        draining=sum(1 for n in s.nodes if n.release_reason),
        awaiting_orders=tuple(sorted(o.pk for o in s.orders if o.status == "Pending")),
        unpaid_orders=tuple(sorted(o.pk for o in s.orders if o.status in UNPAID)),
    )
    errors = [n.last_error for n in s.nodes if n.last_error]  # a step, or a cluster call, failing and retried with backoff
    phase, reason = pool_status(counts=counts, stalls=[*stalls, *errors], deleting=s.phase == "Deleting")
    baseline = "preemptible" if s.preemptible else "monthly"
    return PoolStatus(
        phase=phase,
        pending_reason=reason[:500],
        conditions=pool_conditions(counts=counts, phase=phase, pending_reason=reason, previous=list(s.conditions), now=now),
        node_counts=counts_by_billing(
            nodes=[(n.billing, "Unavailable" if n.cluster_fault else n.phase) for n in s.nodes if not n.release_reason],
            desired={baseline: min(monthly_desired, s.max_nodes), "on_demand": burst},
        ),
        desired=counts.desired,
    )
