"""How many burst nodes a pool buys for its Pending pods, as Cluster Autoscaler decides it (pure
core: standard library only).

The HPA core (`pools.core.autoscaling.decide`) says how many nodes the metrics ask for; this
module says how many of them Pending pods would actually use, which bounds the scale-up. The
rules are Cluster Autoscaler's (kubernetes/autoscaler, cluster-autoscaler/FAQ.md, "How does
scale-up work?"), so that people who know it can predict what the pool does:

- **Expendable pods** (priority below `--expendable-pods-priority-cutoff`, -10 by default) never
  trigger a scale-up: they are meant to wait for spare room (left out of the queue read for it:
  `pools.selectors.queue.scale_up_queue`).
- **Filter out schedulable**: a Pending pod that fits the free capacity of a Ready node will be
  placed by the scheduler's next pass; it asks for no new node (it only arrived between two
  scheduler passes).
- **Upcoming nodes**: a node ordered but not Ready yet (Ordering, Provisioning, Initializing,
  Registering) is counted as an empty node of its pool's template, and the pods are packed onto
  it before any new node is counted. Otherwise every pass while the first node boots (several
  minutes) buys another one for the same pod.
- **Max provision time and backoff**: a burst node not Ready `EBCLOUD_MAX_NODE_PROVISION_SECONDS`
  after it was requested (CA's `--max-node-provision-time`, 15 minutes) is upcoming no more: the
  lifecycle gives it up, and its pool takes no scale-up for a while (CA's node group backoff:
  5 minutes, doubled for each failure within 3 hours of the one before, at most 30 minutes), so
  the pods go to the team's other pools that fit them instead of waiting on a zone out of stock.
  Monthly nodes are bought capacity: they stay upcoming and are retried for as long as it takes.
- What remains is packed first-fit-decreasing onto copies of the pool's template (CA's
  binpacking estimator); that many nodes are needed.
- **Quotas** cap the nodes bought: burst nodes hold GPU quota like ordered ones, region-wide
  and the team's (`QuotaRooms`).

A pass over many pools keeps one `Capacity` per team: a pool's planned nodes are added to it as
upcoming nodes, so a pod one pool scales up for is not counted again by the team's next pool
(CA expands one node group per pod). It groups each team's queue by shape (`Shapes`), so that a
pool tries only the shapes that could fit its nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from pools.core.scheduling.nodes import (
    MILLI,
    NO_EXECUTE,
    NO_SCHEDULE,
    NodeState,
    OversubscribedError,
    Pod,
    best_fit_gpus,
    filter_node,
)


def _decreasing(pods: Iterable[Pod]) -> list[Pod]:
    """First-fit-decreasing order: the biggest requests first, then by name (deterministic)."""
    return sorted(pods, key=lambda p: (-p.gpu_count, -p.gpu_milli, -p.cpu_milli, -p.memory_mib, p.name))


def first_fit(pod: Pod, nodes: Sequence[NodeState]) -> NodeState | None:
    """The first of `nodes` the pod passes the filters of, with the pod bound to it; None if none."""
    for node in nodes:
        if filter_node(pod, node) is None:
            node.bind(pod, best_fit_gpus(pod, node.gpu_free) or ())
            return node
    return None


def take_totals(node: NodeState, *, cpu_milli: int, memory_mib: int, gpu_milli: int) -> bool:
    """Count the Running pods of a node from the sums of their requests, where the sums say it
    all: none of its GPUs used, or all of them (a full node, the common case). False, and
    nothing counted, when its GPUs are partly used: which GPU has how much room left takes the
    pods themselves (`take_requests`)."""
    if 0 < gpu_milli < node.gpu_count * MILLI:
        return False
    node.cpu_used += cpu_milli
    node.memory_used += memory_mib
    if gpu_milli:
        node.gpu_free = [0] * node.gpu_count
    node.touch()
    return True


def take_requests(node: NodeState, pod: Pod, gpu_indices: Sequence[int] = ()) -> None:
    """Count a Running pod's requests on the node. A pod with no GPU indices recorded (a real
    cluster's: its device plugin chose them) takes the GPUs it fits best; a record that
    disagrees with the node (it would oversubscribe) is left out, as `cluster_state` does."""
    gpus = tuple(gpu_indices) or (best_fit_gpus(pod, node.gpu_free) if pod.gpu_count else ()) or ()
    try:
        node.bind(pod, gpus)
    except (OversubscribedError, ValueError):
        pass


# Cluster Autoscaler's node group backoff (--initial-node-group-backoff-duration,
# --max-node-group-backoff-duration, --node-group-backoff-reset-timeout).
BACKOFF_INITIAL = timedelta(minutes=5)
BACKOFF_MAX = timedelta(minutes=30)
BACKOFF_RESET = timedelta(hours=3)
BACKOFF_FAILURES_READ = 4  # 5, 10, 20, then the 30-minute cap: an older failure changes nothing


def scale_up_backoff(failures: Iterable[datetime]) -> tuple[datetime, timedelta] | None:
    """Until when a pool takes no scale-up after these failures (its burst nodes given up, not
    Ready in time), and for how long (None: no failure). As Cluster Autoscaler backs off a node
    group: 5 minutes after a failure, twice the previous backoff (at most 30 minutes) when the
    previous failure was at most 3 hours before, else 5 minutes again. A zone out of stock stays
    so for a while: buying there again at once would hold the pods another 15 minutes."""
    last, duration = None, BACKOFF_INITIAL
    for at in sorted(failures):
        duration = min(2 * duration, BACKOFF_MAX) if last is not None and at - last <= BACKOFF_RESET else BACKOFF_INITIAL
        last = at
    return None if last is None else (last + duration, duration)


@dataclass
class Capacity:
    """Where a team's Pending pods can go before any node is bought: the free capacity of its
    pools' Ready nodes (`existing`, with their Running pods' requests taken) and its pools'
    upcoming nodes (`upcoming`: empty templates of their pools). For the backoff of its pools'
    scale-ups (`backoff`): when each upcoming burst node of its own pools is given up if it is
    not Ready by then (`deadlines`: node name -> pool id and that moment), and when each pool's
    latest burst nodes were given up (`given_up`: pool id -> moments)."""

    existing: list[NodeState] = field(default_factory=list)
    upcoming: list[NodeState] = field(default_factory=list)
    deadlines: dict[str, tuple[int, datetime]] = field(default_factory=dict)
    given_up: dict[int, list[datetime]] = field(default_factory=dict)

    def backoff(self, pool_id: int, now: datetime) -> tuple[datetime, timedelta] | None:
        """Until when the pool takes no scale-up, and for how long (None: it may scale up now).
        First the burst nodes past their deadline, of any pool of the team, stop being upcoming:
        the lifecycle gives them up on its next pass (the autoscaler's may come first), and
        their pool counts as failed now: it buys no other node in the same zone while the
        team's other pools buy for the pods."""
        overdue = {name for name, (_, deadline) in self.deadlines.items() if now >= deadline}
        if overdue:
            self.upcoming = [node for node in self.upcoming if node.name not in overdue]
            for name in overdue:
                self.given_up.setdefault(self.deadlines.pop(name)[0], []).append(now)
        backoff = scale_up_backoff(self.given_up.get(pool_id, ()))
        return backoff if backoff is not None and now < backoff[0] else None

    def plan_nodes(self, template: NodeState, count: int) -> None:
        """Nodes a pool of the pass is about to buy: upcoming nodes for the pools decided after it."""
        for index in range(count):
            node = template.clone()
            node.name = f"{template.name}-planned-{len(self.upcoming)}-{index}"
            self.upcoming.append(node)


@dataclass(frozen=True)
class ScaleUpNeed:
    """Where the pods went in the simulation: the pods (names) that fit free capacity, those that
    fit upcoming nodes, and, per new node needed, the pods packed on it (the first nodes get the
    biggest pods)."""

    on_existing: tuple[str, ...] = ()
    on_upcoming: tuple[str, ...] = ()
    on_new: tuple[tuple[str, ...], ...] = ()

    @property
    def new_nodes(self) -> int:
        return len(self.on_new)


def scale_up_need(pods: Iterable[Pod], template: NodeState, capacity: Capacity | None = None) -> ScaleUpNeed:
    """How many new nodes like `template` the pods need once the free capacity and the upcoming
    nodes of `capacity` are used (neither is changed: the packing runs on copies). A pod that
    fits none of them nor an empty template is left out: no new node would help it."""
    pods = list(pods)
    gpus_only = all(pod.gpu_count for pod in pods)  # then a node with no GPU left takes none of them
    existing = [n.clone() for n in capacity.existing if not gpus_only or n.gpu_free_milli] if capacity else []
    upcoming = [n.clone() for n in capacity.upcoming] if capacity else []
    on_existing, on_upcoming, new = [], [], []
    for pod in _decreasing(pods):
        if first_fit(pod, existing) is not None:
            on_existing.append(pod.name)
        elif first_fit(pod, upcoming) is not None:
            on_upcoming.append(pod.name)
        elif first_fit(pod, new) is None:
            node = template.clone()
            node.name = f"{template.name}-new-{len(new)}"
            if filter_node(pod, node) is None:
                node.bind(pod, best_fit_gpus(pod, node.gpu_free) or ())
                new.append(node)
    return ScaleUpNeed(tuple(on_existing), tuple(on_upcoming), tuple(tuple(node.bound) for node in new))


@dataclass
class Shapes:
    """A team's Pending pods grouped by shape (`shape_key`: pods of one shape filter alike),
    with two indexes so that a pool tries only the shapes that could fit its nodes, not the
    team's whole queue (at 1,000 pools most shapes are meant for one pool): each shape is
    listed under one pair of its nodeSelector (or as having none), and under what each of its
    tolerations can tolerate. A shape fits a node only if the node has that label pair and
    every NoSchedule/NoExecute taint of the node is tolerated, so the shapes left out would
    fail `filter_node` anyway: the result is exactly that of trying them all."""

    groups: dict[tuple, list[Pod]] = field(default_factory=dict)  # shape_key -> its pods, first seen first
    # By shape number (the order first seen): its pods and the nodeSelector pair it is listed under.
    numbered: list[list[Pod]] = field(default_factory=list)
    selector: list[tuple[str, str] | None] = field(default_factory=list)
    by_selector: dict[tuple[str, str] | None, list[int]] = field(default_factory=dict)  # a pair (None: no selector) -> shapes
    by_toleration: dict[tuple, list[int]] = field(default_factory=dict)  # (key, value) / (key, None) for Exists / () for any key -> shapes

    def add(self, pod: Pod) -> None:
        group = self.groups.get(pod.shape_key)
        if group is None:
            number, pair = len(self.numbered), min(pod.node_selector.items()) if pod.node_selector else None
            group = self.groups[pod.shape_key] = []
            self.numbered.append(group)
            self.selector.append(pair)
            self.by_selector.setdefault(pair, []).append(number)
            for t in pod.tolerations:
                tolerates = () if not t.key else (t.key, None) if t.operator == "Exists" else (t.key, t.value)
                self.by_toleration.setdefault(tolerates, []).append(number)
        group.append(pod)

    def fitting(self, template: NodeState) -> list[list[Pod]]:
        """The groups whose pods fit an empty node like `template`, in the order first seen."""
        hard = next((t for t in template.taints if t.effect in (NO_SCHEDULE, NO_EXECUTE)), None)
        if hard is None:
            numbers = [*self.by_selector.get(None, ()), *(n for pair in template.labels.items() for n in self.by_selector.get(pair, ()))]
        else:  # the shapes that tolerate the node's first hard taint, then those it can select
            index, labels = self.by_toleration, template.labels
            tolerating = {*index.get((hard.key, hard.value), ()), *index.get((hard.key, None), ()), *index.get((), ())}
            numbers = [n for n in tolerating if (pair := self.selector[n]) is None or labels.get(pair[0]) == pair[1]]
        numbers.sort()
        return [self.numbered[n] for n in numbers if filter_node(self.numbered[n][0], template) is None]


QuotaScope = tuple[str, int, int | None]  # (region, GPU model id, team id or None for the region-wide quota)


@dataclass
class QuotaRooms:
    """The GPU quotas of some regions and GPU models: each scope's limit and the GPUs held
    against it (ordered monthly capacity and live burst nodes). A region and model with no
    region-wide quota allow no burst node, as they allow no order."""

    limits: dict[QuotaScope, int] = field(default_factory=dict)
    in_use: dict[QuotaScope, int] = field(default_factory=dict)

    def update(self, other: QuotaRooms) -> None:
        self.limits.update(other.limits)
        self.in_use.update(other.in_use)

    def scopes(self, region: str, model_id: int, team_id: int) -> list[QuotaScope]:
        """The quotas a pool's new node holds: the region-wide one, and its team's if it has one."""
        return [(region, model_id, None), *([(region, model_id, team_id)] if (region, model_id, team_id) in self.limits else [])]

    def nodes_allowed(self, region: str, model_id: int, team_id: int, gpus_per_node: int) -> tuple[int, QuotaScope | None]:
        """How many nodes of `gpus_per_node` GPUs fit every quota of the pool, and the scope that
        sets that number (None when no quota limits it below what it allows anyway)."""
        best, limiting = None, None
        for scope in self.scopes(region, model_id, team_id):
            left = max(0, self.limits.get(scope, 0) - self.in_use.get(scope, 0))
            nodes = left // gpus_per_node if gpus_per_node else left
            if best is None or nodes < best:
                best, limiting = nodes, scope
        return best or 0, limiting

    def take(self, region: str, model_id: int, team_id: int, gpus: int) -> None:
        """GPUs a planned scale-up holds from now on (the next pool of the pass sees them)."""
        for scope in self.scopes(region, model_id, team_id):
            self.in_use[scope] = self.in_use.get(scope, 0) + gpus
