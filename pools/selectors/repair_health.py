"""What the repair gate sees of a pool, read one way for every reader (seed P4, T3).

The repair pass decides from it (pools/controllers/repair.py); the node page's
`AcceleratedHardwareReady` condition, the repair pages and the demo's fault injector read the
same thing. Before, the pages ran the ladder alone and said "replacing the node" while the pass
held the repair back (`RepairPaused`, 2 of 2 nodes unhealthy) for 17 minutes; one reader can no
longer promise what the gate forbids.

A pool's state: its watched nodes, each node's Xids and resets or reboots within the ladder's
window, what the ladder decides for each (a replacement, whatever the ladder says, for a node the
cluster has run no pod on for `NODE_UNAVAILABLE_FOR`: `unavailable_repair`), the gate's view (`NodeHealth`), where a
replacement not over yet counts as an unhealthy node under repair, and the pool's
`autoRepairPolicy.maxUnhealthy`, read from the document of the nodes' pool (`Node.pool`, loaded
with them: `watched_nodes`, or a pool's own `pool.nodes`). Three queries whatever the number of
pools or nodes given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, Exists, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce

from monitoring.models import AgentCommand, GpuErrorEvent
from pools.core.lifecycle import REPAIRED as REPAIR_RELEASE
from pools.core.lifecycle import RETIRING_REASONS
from pools.core.max_unhealthy import DEFAULT as DEFAULT_MAX_UNHEALTHY
from pools.core.max_unhealthy import MaxUnhealthy, max_unhealthy_of
from pools.core.repair import (
    ACTIONABLE_XIDS,
    NODE_UNAVAILABLE_FOR,
    NONE,
    REPLACE,
    NodeHealth,
    RepairAttempt,
    RepairDecision,
    RepairGate,
    RepairPolicy,
    XidEvent,
    is_fatal,
    next_action,
    repair_allowed,
    unavailable_repair,
    unhealthy_limit,
)
from pools.models import GpuNodePool, Node

WATCHED_PHASES = (Node.Phase.READY, Node.Phase.CORDONED, Node.Phase.UNKNOWN, Node.Phase.REPAIRING)
OUTCOME = {AgentCommand.Status.SUCCEEDED: True, AgentCommand.Status.FAILED: False, AgentCommand.Status.PENDING: None}
REPLACEMENT_WINDOW = timedelta(days=1)  # a released node whose due successor never came is shown this long
SUCCESSOR_ORDER_WINDOW = timedelta(minutes=10)  # the lifecycle orders a successor within a pass or two


@dataclass
class PoolRepairState:
    """One pool as the repair pass sees it at `now`."""

    nodes: list[Node] = field(default_factory=list)
    xids: dict[int, list[XidEvent]] = field(default_factory=dict)
    attempts: dict[int, list[RepairAttempt]] = field(default_factory=dict)
    last_command: dict[int, AgentCommand] = field(default_factory=dict)
    decisions: dict[int, RepairDecision] = field(default_factory=dict)
    health: list[NodeHealth] = field(default_factory=list)
    max_unhealthy: MaxUnhealthy = DEFAULT_MAX_UNHEALTHY  # the pool's spec.autoRepairPolicy.maxUnhealthy

    def node_health(self, node: Node) -> NodeHealth | None:
        return next((h for h in self.health if h.name == node.name), None)

    def gate(self, node: Node, now: datetime) -> RepairGate | None:
        """Why `node`'s repair may or may not start now, as the pass would answer; None when the
        node has no fault waiting for a repair (healthy, or its reset or reboot is running)."""
        decision = self.decisions.get(node.pk)
        if decision is None or decision.action == NONE or node.phase == Node.Phase.REPAIRING:
            return None
        return repair_allowed(self.health, node=node.name, now=now, max_unhealthy=self.max_unhealthy)

    @property
    def unhealthy(self) -> int:
        return sum(1 for h in self.health if not h.healthy)

    @property
    def limit(self) -> int:
        """How many unhealthy nodes the pool tolerates now before auto repair pauses."""
        return unhealthy_limit(len(self.health), max_unhealthy=self.max_unhealthy)


def repair_states(*, nodes: list[Node], now: datetime, policy: RepairPolicy | None = None) -> dict[int, PoolRepairState]:
    """The state of each pool of `nodes` (all of each pool's watched nodes: a node left out
    would not count in the pool's total), keyed by pool id."""
    policy = policy or RepairPolicy()
    since = now - policy.window
    states: dict[int, PoolRepairState] = {}
    for node in nodes:
        if node.pool_id not in states:
            states[node.pool_id] = PoolRepairState(max_unhealthy=max_unhealthy_of(node.pool.document.get("spec")))
        states[node.pool_id].nodes.append(node)
    ids = [n.pk for n in nodes]
    xids: dict[int, list[XidEvent]] = {}
    rows = GpuErrorEvent.objects.filter(node_id__in=ids, at__gt=since, at__lte=now).order_by("at", "pk")
    for node_id, xid, at, gpu in rows.values_list("node_id", "xid", "at", "gpu_index"):
        xids.setdefault(node_id, []).append(XidEvent(xid=xid, at=at, gpu_index=gpu))
    attempts: dict[int, list[RepairAttempt]] = {}
    last_command: dict[int, AgentCommand] = {}
    commands = AgentCommand.objects.filter(node_id__in=ids, action__in=("reset_gpu", "reboot"), created_at__gt=since)
    for command in commands.order_by("created_at", "pk"):
        attempts.setdefault(command.node_id, []).append(
            RepairAttempt(action=command.action, at=command.created_at, succeeded=OUTCOME[command.status], gpu_index=command.gpu_index)
        )
        last_command[command.node_id] = command
    replacing = replacements_under_way(pool_ids=list(states), now=now)
    for pool_id, state in states.items():
        for node in state.nodes:
            decision = next_action([*xids.get(node.pk, []), *attempts.get(node.pk, [])], now, policy)
            unavailable = unavailable_repair(node.cluster_fault, node.cluster_fault_since, now, held_at=node.cluster_fault_held_at)
            if unavailable and decision.action != REPLACE and decision.reason != "RepairInProgress":  # a running reset or reboot ends by its own timeout
                decision = unavailable
            state.decisions[node.pk] = decision
            state.xids[node.pk] = xids.get(node.pk, [])
            state.attempts[node.pk] = attempts.get(node.pk, [])
            if node.pk in last_command:
                state.last_command[node.pk] = last_command[node.pk]
            running = node.phase == Node.Phase.REPAIRING and OUTCOME.get(getattr(last_command.get(node.pk), "status", None)) is None
            state.health.append(NodeHealth(
                name=node.name, healthy=decision.action == NONE,
                unhealthy_since=min(filter(None, (xids[node.pk][0].at if node.pk in xids else None, unavailable and node.cluster_fault_since)), default=None),
                fatal=decision.action == REPLACE and any(is_fatal(x.xid) for x in xids.get(node.pk, [])),
                repairing=running,
            ))  # fmt: skip
        state.health += [NodeHealth(name=name, healthy=False, repairing=True) for name in replacing.get(pool_id, [])]
    return states


def pool_repair_state(*, pool_id: int, nodes: list[Node], now: datetime, policy: RepairPolicy | None = None,
                      max_unhealthy: MaxUnhealthy | None = None) -> PoolRepairState:
    """`repair_states` for one pool's watched `nodes` (an empty state when it has none).
    `max_unhealthy`, when given (the repair pass's parsed spec), is the pool's setting."""
    state = repair_states(nodes=nodes, now=now, policy=policy).get(pool_id)
    if state is None:  # no watched node: only replacements under way can count
        state = PoolRepairState()
        names = replacements_under_way(pool_ids=[pool_id], now=now).get(pool_id, [])
        state.health = [NodeHealth(name=name, healthy=False, repairing=True) for name in names]
    if max_unhealthy is not None:
        state.max_unhealthy = max_unhealthy
    return state


def with_pool_fault_counts(nodes: QuerySet[Node], now: datetime) -> QuerySet[Node]:
    """`nodes` annotated, in the same query, with their pool's watched nodes (`pool_watched`) and
    how many of those hold a repair-class Xid within the ladder's window (`pool_faulty`), for
    `may_be_paused` (a node the cluster has run no pod on for `NODE_UNAVAILABLE_FOR` is faulty
    too, `unavailable_repair`): a page learns whether a pool could be paused at all without a query more
    (the nodes' pool, whose `maxUnhealthy` it reads, loaded with them), and reads the pool's
    full state (four queries) only when it could."""
    since = now - RepairPolicy().window
    watched = Node.objects.filter(pool_id=OuterRef("pool_id"), phase__in=WATCHED_PHASES, release_reason="").order_by()
    xids = GpuErrorEvent.objects.filter(node_id=OuterRef("pk"), at__gt=since, at__lte=now, xid__in=ACTIONABLE_XIDS)
    out_long = Q(cluster_fault_since__lte=now - NODE_UNAVAILABLE_FOR) & (Q(cluster_fault_held_at__isnull=True) | Q(cluster_fault_held_at__lte=now - NODE_UNAVAILABLE_FOR))
    faulty = watched.filter(Exists(xids) | (~Q(cluster_fault="") & out_long))
    count = {"pool_watched": watched, "pool_faulty": faulty}
    return nodes.annotate(**{
        name: Coalesce(Subquery(rows.values("pool_id").annotate(n=Count("pk")).values("n")[:1]), 0) for name, rows in count.items()
    })  # fmt: skip


def may_be_paused(node: Node) -> bool:
    """False when the node's pool cannot be paused now (`with_pool_fault_counts` annotated it).

    The gate counts as unhealthy the watched nodes whose ladder wants a repair, each of which
    holds a repair-class Xid in the window or has been out of the cluster's use for
    `NODE_UNAVAILABLE_FOR`, and the replacements under way; but a replacement
    under way, like any repair in progress, makes the gate answer `RepairInProgress` before it
    looks at the pause. So a paused pool has no replacement under way, its total is its watched
    nodes, and more of them are faulty than the pool's limit for that total (`unhealthy_limit`
    with its `maxUnhealthy`). A pool with no faulty node is never paused, whatever its limit:
    its document is not read then."""
    if not node.pool_faulty:
        return False
    return node.pool_faulty > unhealthy_limit(node.pool_watched, max_unhealthy=max_unhealthy_of(node.pool.document.get("spec")))


def watched_nodes(pool_ids) -> list[Node]:
    """The nodes of these pools that the repair pass watches (a queryset or a list of ids)."""
    return list(Node.objects.filter(pool_id__in=pool_ids, phase__in=WATCHED_PHASES, release_reason="").select_related("pool", "successor").order_by("name"))


def replacements_under_way(*, pool_ids: list[int], now: datetime) -> dict[int, list[str]]:
    """Each pool's nodes replaced after a repair whose replacement is not over: still draining or
    releasing, released with a successor that has not been Ready yet (for at most
    `REPLACEMENT_WINDOW`), or released so recently that the lifecycle may not have ordered the
    successor yet (`SUCCESSOR_ORDER_WINDOW`: a slot no longer refilled, after a shrink, must not
    hold repairs back). The repair gate counts each as a repair in progress and as an unhealthy
    node, so a second replacement waits for the first."""
    released_waiting = Q(terminated_at__gt=now - REPLACEMENT_WINDOW, successor__isnull=False, successor__ready_at__isnull=True)
    just_released = Q(terminated_at__gt=now - SUCCESSOR_ORDER_WINDOW, successor__isnull=True)
    under_way = Q(release_reason=REPAIR_RELEASE) & (Q(terminated_at__isnull=True) | released_waiting | just_released)
    out: dict[int, list[str]] = {}
    for pool_id, name in Node.objects.filter(under_way, pool_id__in=pool_ids).order_by("name").values_list("pool_id", "name"):
        out.setdefault(pool_id, []).append(name)
    return out


def pool_live_count() -> Coalesce:
    """An annotation for rows with a `pool_id` (nodes, events): how many of the pool's nodes are
    live and not leaving (not Terminated, no release reason), as the lifecycle counts them
    against `nodeCount.max` before it orders a node into a vacant slot."""
    live = Node.objects.filter(pool_id=OuterRef("pool_id"), release_reason="").exclude(phase=Node.Phase.TERMINATED).order_by()
    return Coalesce(Subquery(live.values("pool_id").annotate(n=Count("pk")).values("n")[:1]), 0)


def refill_refused(node: Node, *, pool: GpuNodePool, live: int) -> str:
    """Why the lifecycle orders no successor into the place `node` left, in plain words; "" when
    it does (its successor is ordered, or will be once there is room).

    The lifecycle's rule (pools/controllers/lifecycle.py `_create_missing`, `_node_create`): a
    node is made only for a vacant slot of a paid capacity order (`Node.order`), while the pool
    is not being deleted and has fewer live nodes than `nodeCount.max` (`live`, from
    `pool_live_count`); the slot a node leaves is vacant unless it retired with it
    (`RETIRING_REASONS`). A burst node fills no slot, so a repair that releases it is over once it
    is gone: the autoscaler orders burst capacity when pods need it. Only a node with a successor
    due is shown as waiting for it (for `REPLACEMENT_WINDOW` at most)."""
    if node.order_id is None:
        if node.billing == Node.Billing.ON_DEMAND:
            return "burst capacity is not replaced: the autoscaler orders nodes when pods need them"
        return "it filled no slot of a paid order, so no replacement is ordered"
    if node.release_reason in RETIRING_REASONS:
        return "it left the pool with its slot, so no replacement is ordered"
    if pool.phase == GpuNodePool.Phase.DELETING or pool.deleted_at is not None:
        return "the pool is being deleted: its nodes leave for good, so no replacement is ordered"
    if live >= pool.max_nodes:
        return f"the pool already has {live} live node(s), its nodeCount.max: a replacement is ordered only once fewer remain"
    return ""
