"""How nodes leave a pool gracefully: leases (D2), reclaims of preemptible nodes (D2), surplus
after lowering `nodeCount.max`, pool deletion, and heartbeats (D1). Part of the lifecycle
controller (pools/controllers/lifecycle.py); the decisions themselves are in pools/core/lifecycle.py.

Every exit is cordon -> drain (evict pods, lowest priority first, until a deadline) -> release,
each step an event; a node is never released with pods on it without a Warning saying why.
The cluster's answers never stop an exit: a Node already gone from the cluster has nothing to
cordon and no pods to move, and a pod the cluster does not evict (whatever the refusal, or an
API server out of reach) waits like one a disruption budget keeps, until the deadline. A Node
the cluster does not delete once its machine is released leaves the node Terminating, with a
Warning, and the delete is retried with backoff (`node_sync.node_refused`); the pool's other
nodes go on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from billing import lease_ledger
from monitoring.services import credential_revoke_for_node
from pools.controllers import node_sync
from pools.controllers.context import ReconcilePass
from pools.core import leases
from pools.core import lifecycle as rules
from pools.models import GpuNodePool, Node, PoolEvent, PoolOrder
from pools.providers.base import PodInfo, ProviderError
from pools.services.events import NORMAL, WARNING
from pools.services.order_withdrawal import order_withdraw

logger = logging.getLogger("ebcloud.lifecycle")


def _at(moment: datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M} UTC"


# ---------------------------------------------------------------------------------------------
# Drain and release


def drain_start(
    p: ReconcilePass, node: Node, *, reason: str, event_reason: str, message: str, deadline: datetime | None = None, type: str = NORMAL,
    recheck: Callable[[Node], str] | None = None,
) -> str:
    """Cordon the node and start draining it; a node that never became Ready is released at once.

    The cordon is idempotent (a rerun after a crash cordons again) and marked as the drain's own
    where the Node was schedulable (`ClusterBackend.cordon`). A Node the cluster no longer
    has (`kubectl delete node`, the cloud's node controller) has nothing to cordon: the drain
    goes on, to no pods and the release, as `remove_node` takes a gone Node. A cordon the
    cluster cannot take now still starts the drain (deadline and all) but evicts nothing this
    pass: the next pass's drift check cordons the draining node first (pools/controllers/node_sync.py).

    `recheck` (the autoscaler's scale-down) judges the node's pods once it is cordoned, right
    before the drain claims it and evicts, as Cluster Autoscaler re-checks a node's pods once
    it has tainted it: a reason it returns cancels the drain and is returned ("" when the drain
    started, or another exit has the node already), and the caller lifts the cordon where it was
    the scale-down's (`PodsRecheck.cordons_lift`: by its mark); a cordon the cluster cannot take
    now cancels it too, as a pod could still land on the node."""
    deadline = deadline or p.now + timedelta(seconds=settings.EBCLOUD_DRAIN_TIMEOUT_SECONDS)
    registered = node.ready_at is not None
    cordoned, said = True, f"Node {node.name} cordoned: no new pods are scheduled on it"
    if registered:
        try:
            if p.cluster.cordon(name=node.name, mark=True) is False:
                said = f"Node {node.name} is no longer in the cluster (its Node object was deleted): nothing to cordon there"
        except ProviderError as exc:
            cordoned = False
            said = f"Node {node.name} could not be cordoned in the cluster now ({exc.message}): the next pass cordons it, then evicts"
    if recheck is not None and registered:
        why = recheck(node) if cordoned else f"node {node.name} could not be cordoned in the cluster now"
        if why:
            return why
    with transaction.atomic():
        claimed = Node.objects.filter(pk=node.pk, release_reason="").exclude(phase=Node.Phase.TERMINATED).update(
            release_reason=reason,
            drain_deadline=deadline,
            phase=Node.Phase.DRAINING if registered else Node.Phase.TERMINATING,
            unschedulable=True,
            step_due_at=None,
        )
        if not claimed:
            return ""
        p.event(event_reason, message, node=node, type=type)
        if registered:
            p.event("NodeCordoned", said, node=node, type=NORMAL if cordoned else WARNING)
    if cordoned:
        node.refresh_from_db()
        drain_advance(p, node)
    return ""


def drain_advance(p: ReconcilePass, node: Node) -> None:
    """Evict what is left (lowest priority first); release when empty or at the deadline.

    Whatever the cluster answers, the deadline holds and the pass goes on: a pod not evicted
    now (a budget's "not now", another refusal, an API server out of reach) or already
    terminating waits, said by one `DrainWaiting` a pass (the same words: the event's count
    grows), and at the deadline the node is released with a `DrainTimeout` naming them."""
    if node.phase == Node.Phase.DRAINING:
        staying = _evict_left(p, node)
        if staying:
            if node.drain_deadline and p.now < node.drain_deadline:
                p.event("DrainWaiting", f"Drain of {node.name} waits for {staying}; the node is released at {_at(node.drain_deadline)} at the latest", node=node, type=WARNING)
                return
            p.event("DrainTimeout", f"Drain of {node.name} reached its deadline: releasing it with {staying}; reason: {node.release_reason}", node=node, type=WARNING)
    release(p, node)


def _evict_left(p: ReconcilePass, node: Node) -> str:
    """Evict the node's pods that can go, one `NodeDraining` event for those evicted; what stays,
    in words for the events ("" when nothing). A terminating pod is on its way out already: it
    is waited for, neither evicted again nor counted as evicted."""
    refused: dict[tuple[str, str], str] = {}
    try:
        pods = p.cluster.list_pods(node_name=node.name)
        movable = [x for x in pods if not x.terminating]
        if movable:
            order = rules.eviction_order(rules.PodView(x.namespace, x.name, x.priority) for x in movable)
            done, refused = evict(p.cluster, [(pod.namespace, pod.name) for pod in order], reason=node.release_reason, now=p.now)
            evicted = [f"{pod.namespace}/{pod.name} (priority {pod.priority})" for pod in order if (pod.namespace, pod.name) in done]
            if evicted:
                p.event("NodeDraining", f"Evicted {len(evicted)} pod(s) from {node.name}, lowest priority first: {', '.join(evicted)}", node=node)
            pods = p.cluster.list_pods(node_name=node.name)
    except ProviderError as exc:
        return f"pods that could not be listed ({exc.message})"
    return f"{len(pods)} pod(s) still on it: {', '.join(_staying(x, refused) for x in pods)}" if pods else ""


def _staying(pod: PodInfo, refused: dict[tuple[str, str], str]) -> str:
    key = (pod.namespace, pod.name)
    if pod.terminating:
        why = "terminating"
    elif key in refused:
        why = f"eviction refused: {refused[key]}" if refused[key] else "refuses eviction"
    else:
        why = "not evicted yet"
    return f"{pod.namespace}/{pod.name} ({why})"


def evict(cluster, pods: list[tuple[str, str]], *, reason: str, now: datetime) -> tuple[set[tuple[str, str]], dict[tuple[str, str], str]]:
    """Evict (namespace, name) pods in this order: the ones evicted, and for each one not, the
    cluster's message ("" for a disruption budget's "not now"). One call when the backend evicts
    in batches (`evict_pods`, which stamps the pods' time on the node at `now`), else one
    `evict_pod` per pod; a refusal of one pod (or an API server out of reach) does not keep the
    others from being asked."""
    many = getattr(cluster, "evict_pods", None)
    if many is not None:
        done = many(pods=pods, reason=reason, now=now)
        return done, {pod: "" for pod in pods if pod not in done}
    done, refused = set(), {}
    for pod in pods:
        try:
            if cluster.evict_pod(namespace=pod[0], name=pod[1], reason=reason):
                done.add(pod)
            else:
                refused[pod] = ""
        except ProviderError as exc:
            refused[pod] = exc.message
    return done, refused


def release(p: ReconcilePass, node: Node) -> None:
    """Release the machine, delete the Node, then the row says Terminated. A delete the cluster
    refuses leaves the node Terminating (the machine is gone: nothing is left to drain), and a
    later pass, after a backoff, releases (idempotent) and deletes again."""
    if node.provider_id:
        p.cloud.release(provider_id=node.provider_id, now=p.now)
    try:
        p.cluster.remove_node(name=node.name, now=p.now)
    except ProviderError as exc:
        node_sync.node_refused(
            p, node, exc, event_reason="NodeRemoveFailed", phase=Node.Phase.TERMINATING, unschedulable=True,
            said=f"Machine of node {node.name} released, but its Node could not be deleted from the cluster",
        )  # fmt: skip
        return
    billed = ""
    if node.lease_end and node.lease_end > p.now and node.billing != Node.Billing.ON_DEMAND:
        billed = f"; its {node.billing} lease stays billed until {_at(node.lease_end)}"
        if node.release_reason and node.release_reason not in rules.RETIRING_REASONS:  # the slot is refilled
            billed = f"; its replacement takes over its share of the {node.billing} lease (paid until {_at(node.lease_end)}): the team pays once for the slot, not twice"
    with transaction.atomic():
        done = Node.objects.filter(pk=node.pk).exclude(phase=Node.Phase.TERMINATED).update(
            phase=Node.Phase.TERMINATED, terminated_at=p.now, unschedulable=True, step="", step_due_at=None
        )
        if done:
            p.event("NodeReleased", f"Node {node.name} released ({node.release_reason or 'released'}){billed}", node=node)
            credential_revoke_for_node(node, reason="NodeTerminated", now=p.now)  # the machine may live on elsewhere


def drains_advance(p: ReconcilePass) -> None:
    for node in p.live_nodes().exclude(release_reason=""):
        if node.step_due_at is not None and p.now < node.step_due_at:  # backing off after a refused delete
            p.stall(node.last_error)
            continue
        drain_advance(p, node)


# ---------------------------------------------------------------------------------------------
# Leases (D2: a short-lease node at order expiry exits gracefully; autoRenew renews instead)


_RENEWING = (*rules.UNPAID, PoolOrder.Status.PAID)  # a renewal ordered for the node and not refused or failed


def _views(nodes: list[Node]) -> list[rules.NodeView]:
    """The pool's live nodes as the surplus and renewal choices see them (`rules.drain_order`);
    `nodes` come with their `renewal_order`."""
    return [
        rules.NodeView(n.name, n.billing, n.phase, n.lease_end, renewing=n.renewal_order_id is not None and n.renewal_order.status in _RENEWING)
        for n in nodes
    ]


def _staying_nodes(p: ReconcilePass) -> list[Node]:
    """The pool's live nodes not leaving yet, with their renewal orders."""
    return list(p.live_nodes().filter(release_reason="").select_related("renewal_order"))


def leases_handle(p: ReconcilePass) -> None:
    """Expire ended leases; tell nodes of their lease's end and renew those the pool keeps.

    autoRenew renews up to `nodeCount.min` (`leases.renewals_allowed`) and never a node the
    surplus drain, next in this pass, takes out: both go by `rules.drain_order`
    (`rules.renewals_chosen`), so a pool shrunk at notice time keeps the node it renews and
    lets the unrenewed one go, instead of paying a renewal for a node it drains."""
    notice = timedelta(seconds=settings.EBCLOUD_LEASE_NOTICE_SECONDS)
    live = _staying_nodes(p)
    nodes = sorted((n for n in live if n.lease_end is not None), key=lambda n: (n.lease_end, n.name))
    staying = sum(1 for n in nodes if n.lease_end > p.now + notice)
    renewing = sum(1 for n in nodes if n.renewal_order_id and n.renewal_order.status in rules.UNPAID)
    to_notify = []
    for node in nodes:
        action = leases.lease_action(lease_end=node.lease_end, now=p.now, notice=notice, notified=node.lease_notified_at is not None)
        if action == leases.NOTIFY:
            to_notify.append(node)
        elif action == leases.EXPIRE:
            if node.renewal_order_id:
                PoolOrder.objects.filter(pk=node.renewal_order_id, status=PoolOrder.Status.APPROVED).update(
                    status=PoolOrder.Status.FAILED, reason="Lease ended before the renewal was paid"
                )
            drain_start(
                p, node, reason=rules.LEASE_EXPIRED, event_reason="LeaseExpired",
                message=f"Lease of node {node.name} ended at {_at(node.lease_end)} without renewal: cordon, drain, release",
            )  # fmt: skip
    if not to_notify:
        return
    allowed = leases.renewals_allowed(min_nodes=p.pool.min_nodes, staying=staying, renewing=renewing) if p.spec.auto_renew else 0
    views = _views(live)  # as the pass found them: a node expired just now is first in the drain order all the same
    chosen = rules.renewals_chosen(views, expiring=[n.name for n in to_notify], allowed=allowed, max_nodes=p.pool.max_nodes, now=p.now)
    surplus = {v.name for v in rules.surplus(views, max_nodes=p.pool.max_nodes, now=p.now)}
    renew = [n for n in to_notify if n.name in chosen]
    leave = [n for n in to_notify if n.name not in chosen]
    with transaction.atomic():  # the order is born linked to its nodes: a rerun never orders (and pays) it twice
        order = _renewal_order(p, renew) if renew else None
        for node in renew:
            Node.objects.filter(pk=node.pk).update(lease_notified_at=p.now, renewal_order=order)
            p.event("LeaseExpiring", f"Lease of node {node.name} ends at {_at(node.lease_end)}; autoRenew ordered renewal #{order.pk}", node=node)
        for node in leave:
            Node.objects.filter(pk=node.pk).update(lease_notified_at=p.now)
            if not p.spec.auto_renew:
                why = "autoRenew is off"
            elif node.name in surplus:
                why = f"nodeCount.max is {p.pool.max_nodes}: it is surplus"
            else:
                why = f"nodeCount.min is {p.pool.min_nodes}"
            p.event(
                "LeaseExpiring",
                f"Lease of node {node.name} ends at {_at(node.lease_end)} and is not renewed ({why}): it will be drained, then released",
                node=node,
                type=WARNING,
            )


def _renewal_order(p: ReconcilePass, nodes: list[Node]) -> PoolOrder:
    quote = p.cloud.quote(
        node_type=p.spec.node_type, gpu_model=p.spec.gpu_model, lease_type=p.spec.lease_type, nodes=len(nodes), at=p.now, preemptible=p.spec.preemptible
    )
    order = PoolOrder.objects.create(
        pool=p.pool,
        kind=PoolOrder.Kind.RENEW,
        status=PoolOrder.Status.APPROVED,
        node_count=len(nodes),
        gpus=len(nodes) * p.pool.node_type.gpu_count,
        lease_type=p.spec.lease_type,
        lease_months=quote.months,
        unit_monthly_price=quote.unit_monthly_price,
        discount=quote.discount,
        amount=quote.amount,
        currency=quote.currency,
        reason="autoRenew",
        created_at=p.now,
        decided_at=p.now,
    )
    p.event("RenewalOrdered", f"autoRenew: order #{order.pk} renews {len(nodes)} node(s) for {quote.months} month(s), {order.amount} {order.currency}")
    return order


def renewal_apply(p: ReconcilePass, order: PoolOrder) -> None:
    """A paid renewal extends the lease of the nodes it renews (call inside the payment's transaction)
    and adds each one's next lease period to the ledger, at its share of the renewal's debit.

    A renewal may be settled after its node left: it waits for funds (retried every pass) or a
    worker died after the cloud debited it (`lifecycle._pay_orders`), while the node was drained
    as surplus, reclaimed or replaced. The cloud took the money all the same (it refunds
    nothing), so the node's lease is renewed as ever, Terminated or not, and its period is on
    the ledger: a node that left for good (`rules.RETIRING_REASONS`) holds it as idle capacity
    charged to the pool's team, like a released node's lease (`CapacityReleasedUnused`); one
    whose slot is refilled hands it to its replacement (`lease_ledger.vacated_holder`), and a
    replacement made before the payment holds the renewal itself (`lifecycle._node_create`
    moves it over), so the team pays for one renewal of the slot, not a second one."""
    renewed = []
    for node in Node.objects.filter(renewal_order=order).order_by("name"):
        lease_end = leases.lease_extended(lease_start=node.lease_start, lease_end=node.lease_end, months=order.lease_months) if node.lease_end else leases.add_months(p.now, order.lease_months)
        Node.objects.filter(pk=node.pk).update(lease_end=lease_end, lease_notified_at=None, renewal_order=None)
        if node.phase != Node.Phase.TERMINATED:
            p.event("LeaseRenewed", f"Lease of node {node.name} renewed by order #{order.pk} until {_at(lease_end)}", node=node)
        elif node.release_reason in rules.RETIRING_REASONS:
            capacity_released_unused(p, f"Order #{order.pk} renewed the lease of node {node.name} after the node was released ({node.release_reason})", until=lease_end, node=node)
        else:
            p.event(
                "LeaseRenewed", node=node,
                message=f"Lease of node {node.name} renewed by order #{order.pk} until {_at(lease_end)} after the node was released ({node.release_reason}): "
                f"the node that takes its place runs on the renewed lease; until one does, it is charged to team {p.pool.team.slug} as idle capacity",
            )  # fmt: skip
        renewed.append((node, node.lease_end or p.now, lease_end))
    lease_ledger.renewal_periods_add(order, renewed, now=p.now)


def capacity_released_unused(p: ReconcilePass, what: str, *, until: datetime, node: Node | None = None) -> None:
    """Say that capacity the cloud was paid for and no node will use (an order paid as its pool's
    delete began, a renewal paid after its node left) is on the lease ledger all the same:
    charged to the pool's team as idle capacity until its lease ends, since the cloud refunds
    nothing (one `CapacityReleasedUnused` event)."""
    p.event(
        "CapacityReleasedUnused",
        f"{what}; the capacity it bought until {_at(until)} is released unused and stays charged to team {p.pool.team.slug} "
        "as idle capacity (the cloud refunds nothing)",
        node=node,
    )


# ---------------------------------------------------------------------------------------------
# Reclaims (D2: preemptible nodes may be reclaimed; guaranteed nodes never during their lease)


def reclaims_handle(p: ReconcilePass) -> None:
    """Drain each preemptible node the cloud announced a reclaim of, by the reclaim time; its
    slot is refilled (`RECLAIMED` is not a retiring reason). A node already draining for another
    reason is drained by the reclaim too (`_reclaim_draining`); in a pool being deleted that is all
    (its other nodes leave for good, drained by `delete_step`, never refilled)."""
    notices = p.notices if p.notices is not None else {n.provider_id: n.reclaim_at for n in p.cloud.reclaim_notices(now=p.now)}
    if not notices:
        return
    for node in p.live_nodes().filter(phase=Node.Phase.DRAINING, billing=Node.Billing.PREEMPTIBLE, provider_id__in=list(notices)).exclude(release_reason=""):
        _reclaim_draining(p, node, notices[node.provider_id])
    if p.pool.phase == GpuNodePool.Phase.DELETING:
        return
    for node in p.live_nodes().filter(release_reason="", provider_id__in=list(notices)):
        if node.billing != Node.Billing.PREEMPTIBLE:
            p.event("ReclaimRefused", f"The cloud announced a reclaim of guaranteed node {node.name}; guaranteed nodes are not reclaimed during their lease", node=node, type=WARNING)
            continue
        reclaim_at = notices[node.provider_id]
        drain_start(
            p, node, reason=rules.RECLAIMED, event_reason="ReclaimNotice", type=WARNING, deadline=reclaim_at,
            message=f"{_reclaim_said(p, node, reclaim_at)}: draining it; a replacement is ordered",
        )  # fmt: skip


def _reclaim_said(p: ReconcilePass, node: Node, reclaim_at: datetime) -> str:
    return f"The cloud reclaims preemptible node {node.name} at {reclaim_at:%H:%M:%S} UTC ({rules.format_duration(max(reclaim_at - p.now, timedelta(0)))} notice)"


def _reclaim_draining(p: ReconcilePass, node: Node, reclaim_at: datetime) -> None:
    """A reclaim notice for a node already draining (a lease end, a scale-in, a repair, the
    pool's deletion): the drain ends by the reclaim at the latest (its deadline becomes the
    earlier of the two), with one `ReclaimNotice` Warning. The drain keeps its reason, which
    says whether the slot is refilled: a retiring one (`rules.RETIRING_REASONS`) leaves the pool
    for good, so no replacement; any other (a repair) has its replacement ordered already."""
    if PoolEvent.objects.filter(node=node, reason="ReclaimNotice").exists():
        return
    deadline = min(node.drain_deadline or reclaim_at, reclaim_at)
    refill = "its replacement is ordered" if node.release_reason not in rules.RETIRING_REASONS else "no replacement is ordered: it was leaving the pool"
    with transaction.atomic():
        Node.objects.filter(pk=node.pk).update(drain_deadline=deadline)
        node.drain_deadline = deadline
        p.event(
            "ReclaimNotice", type=WARNING, node=node,
            message=f"{_reclaim_said(p, node, reclaim_at)} while it drains ({node.release_reason}): the drain ends by {deadline:%H:%M:%S} UTC at the latest; {refill}",
        )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Shrinking and deleting


def surplus_drain(p: ReconcilePass) -> None:
    """Above `nodeCount.max`: the nodes cheapest to lose leave (`rules.drain_order`: burst first,
    then expired, then unrenewed before renewed, then nearest lease end), the same order
    `leases_handle` renewed by, so a node just renewed is not the one drained."""
    nodes = {n.name: n for n in _staying_nodes(p)}
    for view in rules.surplus(_views(list(nodes.values())), max_nodes=p.pool.max_nodes, now=p.now):
        drain_start(
            p, nodes[view.name], reason=rules.SCALED_IN, event_reason="ScaledIn",
            message=f"nodeCount.max is {p.pool.max_nodes}: draining surplus {view.billing} node {view.name}",
        )  # fmt: skip


def delete_step(p: ReconcilePass) -> bool:
    """Drain and release every node of a Deleting pool; True once the pool is finalised.

    Orders not paid yet are withdrawn; a Paying one is not (the cloud may have debited it): the
    pass settles it first (`lifecycle._pay_orders`), and the pool is not finalised while one is
    left (the controller never passes over a deleted pool). A Paid order keeps its nodes'
    leases billed to their end, as ever; one paid as the delete began, whose slots no node
    fills, has them put on the ledger first, as capacity released unused
    (`lifecycle._unused_capacity_record`)."""
    for order in p.pool.orders.filter(status=PoolOrder.Status.APPROVED):
        order_withdraw(pool=p.pool, order=order, why="the pool was deleted", actor=None, now=p.now,
                       message=f"Order #{order.pk} withdrawn before payment: the pool is being deleted")  # fmt: skip
    for node in p.live_nodes().filter(release_reason=""):
        drain_start(
            p, node, reason=rules.POOL_DELETED, event_reason="NodeDeleting",
            message=f"Pool {p.pool.name} is being deleted: draining node {node.name}, then releasing it",
        )  # fmt: skip
    if p.live_nodes().exists() or p.pool.orders.filter(status=PoolOrder.Status.PAYING).exists():
        return False
    with transaction.atomic():
        done = GpuNodePool.objects.filter(pk=p.pool.pk, deleted_at__isnull=True).update(
            deleted_at=p.now, phase=GpuNodePool.Phase.DELETED, pending_reason=""
        )
        if done:
            p.event("PoolDeleted", "All nodes drained and released; pool deleted")
    return True


# ---------------------------------------------------------------------------------------------
# Heartbeats (D1)


def heartbeats_check(p: ReconcilePass) -> None:
    """Silence past `EBCLOUD_HEARTBEAT_GRACE_SECONDS`, with one rule: a heartbeat moves a node
    only between Ready and Unknown (`rules.heartbeat_phase`). A node under repair, Cordoned or
    Repairing (`rules.HEARTBEAT_HELD`), keeps its phase when silent and gets one `NodeSilent`
    Warning per silence: it takes no pods already; its phase is what says our cordon holds
    (the drift check keeps it cordoned: pools/controllers/node_sync.py) and which repair is
    under way; and its way back into service is the repair pass's alone (`RepairSucceeded`,
    `NodeUncordoned`). Made Unknown, it would come back Ready at its next heartbeat, repair or
    not, with our cordon left in the cluster. A reboot silences the agent by design, and the
    repair pass bounds that silence itself: a reset or reboot not acknowledged within
    `EBCLOUD_REPAIR_COMMAND_TIMEOUT_SECONDS` fails and the ladder climbs, up to a replacement.
    Most of the fleet silent at once is the control plane's outage (`rules.full_disruption`):
    then nothing is marked or reported."""
    grace = timedelta(seconds=settings.EBCLOUD_HEARTBEAT_GRACE_SECONDS)
    watched = (Node.Phase.READY, Node.Phase.UNKNOWN)
    outage = None
    for node in p.live_nodes().filter(release_reason="", phase__in=(*watched, *rules.HEARTBEAT_HELD)):
        held = node.phase in rules.HEARTBEAT_HELD
        phase = rules.heartbeat_phase(phase=node.phase, last_heartbeat=node.last_heartbeat, now=p.now, grace=grace)
        if held and (node.last_heartbeat is None or p.now - node.last_heartbeat <= grace):  # as steps_needed asks
            continue
        if not held and phase == node.phase:
            continue
        if held or phase == Node.Phase.UNKNOWN:
            if outage is None:  # asked once per pass, and only when a node would go Unknown or be reported
                fleet = Node.objects.filter(pool__deleted_at__isnull=True, release_reason="", phase__in=watched, last_heartbeat__isnull=False)
                outage = rules.full_disruption(silent=fleet.filter(last_heartbeat__lt=p.now - grace).count(), reporting=fleet.count())
                if outage:
                    logger.warning("most nodes are silent past the heartbeat grace: the control plane or its network was "
                                   "away; no node is marked Unknown until the agents report again")
            if outage:
                continue
        if held:
            _silence_report(p, node, grace)
            continue
        with transaction.atomic():
            if not Node.objects.filter(pk=node.pk, phase=node.phase).update(phase=phase):
                continue
            if phase == Node.Phase.UNKNOWN:
                p.event(
                    "NodeStatusUnknown",
                    f"No heartbeat from {node.name} since {node.last_heartbeat:%H:%M:%S} UTC (grace {rules.format_duration(grace)}): "
                    "status Unknown; its pods keep running and are not evicted for this",
                    node=node,
                    type=WARNING,
                )
            else:
                p.event("NodeReady", f"Heartbeat from {node.name} resumed: Ready again", node=node)


def _silence_report(p: ReconcilePass, node: Node, grace: timedelta) -> None:
    """One `NodeSilent` Warning per silence of a node under repair (written since its last heartbeat)."""
    if PoolEvent.objects.filter(node=node, reason="NodeSilent", last_timestamp__gte=node.last_heartbeat).exists():
        return
    timeout = rules.format_duration(timedelta(seconds=settings.EBCLOUD_REPAIR_COMMAND_TIMEOUT_SECONDS))
    p.event(
        "NodeSilent", type=WARNING, node=node,
        message=(
            f"No heartbeat from {node.name} since {node.last_heartbeat:%H:%M:%S} UTC (grace {rules.format_duration(grace)}) while {node.phase}: "
            f"it stays {node.phase} and takes no pods; its repair goes on without the agent: a GPU reset or reboot not acknowledged "
            f"within {timeout} fails and the next rung is tried, up to a replacement"
        ),
    )  # fmt: skip
