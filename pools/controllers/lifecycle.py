"""The lifecycle controller: make one pool match its spec (seed G1, O2, T1; design §5).

`pool_reconcile` is level-triggered and idempotent: it compares what the pool should have
(monthly nodes bought by Paid orders, up to `nodeCount.max`) with what it has, and takes each
node one step further: Ordering -> Provisioning -> Initializing -> Registering -> Ready, one
event per step (`OrderPlaced`, `NodeInitializing`, `ImagePulled`, `DriverInstalled`,
`KubeletInstalled`, `NodeRegistered`, `NodeLabeled`, `NodeTainted`, `NodeReady`). Approved orders
are paid first (`OrderPaying`, then `OrderPaid`). Failures are Warning events, retried with exponential backoff;
`pendingReason` says why the pool is stalled, with numbers (T1).

Every provider call is idempotent on a key (node name, order id) and comes before the
controller's own write, so a pass killed anywhere is finished by the next one. Work is claimed
per pool by a conditional UPDATE on `PoolClaim.version`, so any number of workers can run. The
pass over every pool (`reconcile_all`) reads all pools' rows at once and runs the per-pool pass
only where something is to be done, and there only the steps that have work (issue 9;
pools/controllers/state.py, `lifecycle_rules.steps_needed`).

The provisioning steps are in pools/controllers/provisioning.py; leases, reclaims, shrinking,
deletion and heartbeats in pools/controllers/exits.py. The nodes' labels, taints and drain
cordons are kept level-triggered by pools/controllers/node_sync.py (the `NodeDrift` step, fed by
one read of the cluster's nodes per pass).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import IntegerField, Max, Min, Q
from django.db.models.functions import Cast, Substr
from django.utils import timezone

from billing import lease_ledger
from pools.claims import (
    WHOLE,
    WORKER_ID,
    Claims,
    Part,
    claim_acquire,
    claim_release,
    claims_seen,
    collector_paused,
)
from pools.controllers import exits, node_sync, provisioning, repair_outcome
from pools.controllers.context import ReconcilePass
from pools.controllers.state import snapshots_load, statuses_write
from pools.core import leases, stall_messages
from pools.core import lifecycle as rules
from pools.core.node_labels import REGISTERED_PHASES, ClusterNodeState
from pools.core.spec import parse_document
from pools.models import GpuNodePool, Node, PoolOrder
from pools.providers import get_cloud_provider, get_cluster_backend
from pools.providers.base import CloudProvider, ClusterBackend, InsufficientBalance, ProviderError
from pools.selectors.pools import catalog_current, quota_held
from pools.services.events import WARNING, event_record
from pools.services.pools import orders_trim_to_min, pool_orders_lock, quota_limits_lock

logger = logging.getLogger("ebcloud.lifecycle")


@dataclass(frozen=True)
class ReconcileResult:
    pool_id: int
    claimed: bool
    phase: str = ""
    pending_reason: str = ""
    error: str = ""


@collector_paused()
def reconcile_all(*, now: datetime | None = None, cloud: CloudProvider | None = None, cluster: ClusterBackend | None = None, part: Part = WHOLE) -> list[ReconcileResult]:
    """One pass over every live pool (the scheduled task and `manage.py reconcile --once`).

    Batched (issue 9): the rows of every live pool are loaded with a fixed number of queries
    (pools/controllers/state.py). A pool where no step has anything to do
    (`lifecycle_rules.work_needed`) costs no statement of its own: the status of all such pools
    is written with one UPDATE where it changed. Pools with work are claimed together with one
    conditional UPDATE and go through the per-pool pass (`_reconcile`) with the steps their
    rows call for, so the statements of a pass grow with what happens, not with the number of
    pools. A pool another worker holds is skipped, as before. `part`: the share of one worker.
    """
    moment = now or timezone.now()
    cloud, cluster = cloud or get_cloud_provider(), cluster or get_cluster_backend()
    pools = list(part.of(GpuNodePool.objects.filter(deleted_at__isnull=True), "pk").select_related("team", "gpu_model", "node_type", "zone").order_by("pk"))
    seen = claims_seen(p.pk for p in pools)
    busy = seen.busy
    snapshots = snapshots_load([p for p in pools if p.pk not in busy])
    notice = timedelta(seconds=settings.EBCLOUD_LEASE_NOTICE_SECONDS)
    grace = timedelta(seconds=settings.EBCLOUD_HEARTBEAT_GRACE_SECONDS)
    names = [n.name for s in snapshots.values() for n in s.nodes if n.phase in REGISTERED_PHASES]
    observed = node_sync.observe(cluster, names)  # one read of the cluster's nodes for the whole pass
    shared = PassShared(
        catalog=catalog_current(), notices=reclaim_notices_of(cloud, moment), snapshots=snapshots, lease_notice=notice, heartbeat_grace=grace, observed=observed
    )
    reclaiming = frozenset(shared.notices)
    results: dict[int, ReconcileResult] = {}
    work, changed = [], []
    for pool in pools:
        if pool.pk in busy:
            continue
        snapshot = snapshots[pool.pk]
        if rules.work_needed(snapshot, now=moment, lease_notice=notice, heartbeat_grace=grace, reclaiming=reclaiming, observed=observed):
            work.append(pool)
            continue
        status = rules.status_of(snapshot, now=moment)
        if not status.same_as(snapshot, pool.generation):
            changed.append((pool, status))
        results[pool.pk] = ReconcileResult(pool_id=pool.pk, claimed=True, phase=status.phase, pending_reason=status.pending_reason)
    for pool, status in statuses_write(changed, seen=seen):
        event_record(pool=pool, reason="PoolReady", message=status.ready_news(pool.name, pool.phase), now=moment)
    with Claims([p.pk for p in work], owner=WORKER_ID) as claims:
        for pool in work:
            if pool.pk not in claims:
                continue
            claims.keep_alive()
            try:
                results[pool.pk] = _reconcile(pool.pk, moment, cloud, cluster, shared)
            except Exception as exc:  # one broken pool must not stop the others; the next pass retries it
                logger.exception("reconcile of pool %s failed", pool.pk)
                results[pool.pk] = ReconcileResult(pool_id=pool.pk, claimed=True, error=f"{type(exc).__name__}: {exc}")
    return [results.get(p.pk) or ReconcileResult(pool_id=p.pk, claimed=False) for p in pools]


@dataclass(frozen=True)
class PassShared:
    """What the pass over all pools read once: the catalog, the cloud's reclaim notices, each
    pool's rows (`lifecycle_state.snapshots_load`), the cluster's nodes (`node_sync.Unread`
    when they could not be read: no drift is seen, and no pool asks again this pass) and the
    settings its rules take."""

    catalog: object
    notices: dict[str, datetime]
    snapshots: dict[int, rules.PoolSnapshot]
    lease_notice: timedelta
    heartbeat_grace: timedelta
    observed: Mapping[str, ClusterNodeState] | None = None

    def steps_needed(self, snapshot: rules.PoolSnapshot, now: datetime) -> tuple[str, ...]:
        """`lifecycle_rules.steps_needed` under this pass's settings and the cloud's notices."""
        return rules.steps_needed(
            snapshot, now=now, lease_notice=self.lease_notice, heartbeat_grace=self.heartbeat_grace, reclaiming=frozenset(self.notices), observed=self.observed
        )


def reclaim_notices_of(cloud: CloudProvider, now: datetime) -> dict[str, datetime]:
    return {n.provider_id: n.reclaim_at for n in cloud.reclaim_notices(now=now)}


def pool_reconcile(*, pool_id: int, now: datetime | None = None, cloud: CloudProvider | None = None, cluster: ClusterBackend | None = None) -> ReconcileResult:
    """Claim the pool, make it match its spec, release the claim. Unclaimed: another worker has it."""
    now = now or timezone.now()
    version = claim_acquire(pool_id=pool_id)
    if version is None:
        return ReconcileResult(pool_id=pool_id, claimed=False)
    try:
        return _reconcile(pool_id, now, cloud or get_cloud_provider(), cluster or get_cluster_backend())
    finally:
        claim_release(pool_id=pool_id, version=version)


def next_wakeup(*, after: datetime, part: Part = WHOLE) -> datetime | None:
    """The earliest moment a live node (of the part's pools) needs the controller again (a step ends,
    a backoff or a drain deadline passes), so the worker can wake then instead of at the next tick."""
    live = part.of(Node.objects.exclude(phase=Node.Phase.TERMINATED).filter(pool__deleted_at__isnull=True))
    moments = [
        live.filter(release_reason="", step_due_at__gt=after).aggregate(m=Min("step_due_at"))["m"],
        live.exclude(release_reason="").filter(drain_deadline__gt=after).aggregate(m=Min("drain_deadline"))["m"],
    ]
    moments = [m for m in moments if m is not None]
    return min(moments) if moments else None


def pool_capacity_times(*, pool: GpuNodePool) -> rules.CapacityTimes:
    """Per pool: how long nodes took from request to Ready and to their first Running pod."""
    nodes = list(pool.nodes.filter(ready_at__isnull=False).annotate(first_pod=Min("pods__started_at")).order_by("ready_at", "name"))
    ready = [n.ready_at - n.created_at for n in nodes]
    first_pod = [n.first_pod - n.created_at for n in nodes if n.first_pod is not None and n.first_pod >= n.created_at]
    return rules.capacity_summary(ready, first_pod, slow_after=rules.SLOW_CAPACITY)


# ---------------------------------------------------------------------------------------------
# One pass


def _reconcile(pool_id: int, now: datetime, cloud: CloudProvider, cluster: ClusterBackend, shared: PassShared | None = None) -> ReconcileResult:
    """Every step of the pass, for `pool_reconcile`; `reconcile_all` gives `shared`, with the
    rows it read of the pool, and only the steps those rows call for run (`_steps_run`)."""
    pool = GpuNodePool.objects.select_related("team", "gpu_model", "node_type", "zone").get(pk=pool_id)
    if pool.deleted_at is not None:
        return ReconcileResult(pool_id=pool_id, claimed=True, phase=pool.phase, pending_reason=pool.pending_reason)
    generation = pool.generation
    catalog = shared.catalog if shared else catalog_current()
    p = ReconcilePass(
        pool=pool, spec=parse_document(pool.document, catalog), now=now, cloud=cloud, cluster=cluster,
        notices=shared.notices if shared else None, observed=shared.observed if shared else None,
    )  # fmt: skip
    fresh = None
    if pool.phase == GpuNodePool.Phase.DELETING:
        exits.reclaims_handle(p)  # a draining node the cloud reclaims drains by the reclaim
        exits.drains_advance(p)
        _pay_orders(p, statuses=(PoolOrder.Status.PAYING,))  # a payment left unsettled: Paid, or refused (then withdrawn)
        _unused_capacity_record(p)  # before the pool is finalised: a Paid order no node will fill
        if exits.delete_step(p):
            return ReconcileResult(pool_id=pool_id, claimed=True, phase=GpuNodePool.Phase.DELETED)
    elif shared is None:
        for _, step in _STEPS:
            step(p)
    else:
        fresh = _steps_run(p, shared.snapshots[pool_id], shared)
    phase, reason = _status_write(p, generation, fresh)
    return ReconcileResult(pool_id=pool_id, claimed=True, phase=phase, pending_reason=reason)


def _steps_run(p: ReconcilePass, snapshot: rules.PoolSnapshot, shared: PassShared) -> rules.PoolSnapshot | None:
    """Run the steps the pool's rows call for (`lifecycle_rules.steps_needed`), in the pass's
    order; after each step that ran, read the pool's rows again and ask anew, since a payment,
    a drain or a released node can give the later steps work. A step skipped is one that would
    have read its rows and done nothing (tests/pools/test_lifecycle_batched.py compares every
    tick with `pool_reconcile`, which runs them all). Returns the rows read after the last
    step, if any ran (the status is computed from them). The first rows are those the pass
    read of every pool: a change made since then waits for the next pass, as for a pool the
    pass found quiet."""
    fresh, todo = None, shared.steps_needed(snapshot, p.now)
    for name, step in _STEPS:
        if name in todo:
            step(p)
            fresh = snapshots_load([p.pool])[p.pool.pk]
            todo = shared.steps_needed(fresh, p.now)
    return fresh


def _pay_orders(p: ReconcilePass, statuses: tuple[str, ...] = rules.UNPAID) -> None:
    """Pay every Approved order and settle every Paying one (oldest first); the payment is keyed
    by the order (no double debit).

    An order is claimed, paid, then settled. Under the locks every writer of a pool's orders
    takes, in the same order (`pool_services.pool_orders_lock`: the quota rows, then the pool's
    row), the quota is checked again and the order goes Approved -> Paying, committed. The cloud
    is asked with no lock held, so a slow cloud holds up no other write of the region's orders.
    Then, under the locks again, Paying -> Paid, or back to Approved when the cloud refuses.
    A delete, a lowered `nodeCount.min` or a decision never withdraws or reduces a Paying order
    (the cloud may have debited it): they leave it to be settled here. A worker that dies or times
    out in between leaves the order Paying, and the next pass, of a live pool or of a Deleting
    one (`statuses`: Paying only), asks the cloud again with the same order id, which returns
    the payment when there is one."""
    unpaid = p.pool.orders.filter(status__in=statuses).order_by("created_at", "pk")
    for order_id in list(unpaid.values_list("pk", flat=True)):
        claimed = _pay_claim(p, order_id)
        if claimed is not None:
            _pay_order(p, *claimed)


def _pay_claim(p: ReconcilePass, order_id: int) -> tuple[PoolOrder, str] | None:
    """Under the locks: an Approved order of a pool not being deleted becomes Paying once the
    quota allows it (with the quota's note for its `QuotaValidated` event), with an `OrderPaying`
    event in the same transaction; a Paying one is settled as it is, never held back again (the
    cloud may hold its debit). None: not to pay."""
    with transaction.atomic():
        pool = pool_orders_lock(pool=p.pool)
        order = PoolOrder.objects.filter(pk=order_id, status__in=rules.UNPAID).first()
        if order is None:
            return None
        if order.status == PoolOrder.Status.PAYING:
            return order, ""
        if pool.deleted_at is not None or pool.phase == GpuNodePool.Phase.DELETING:
            return None  # the delete withdraws it
        quota_note = _quota_check(p, order)
        if quota_note is None:
            return None
        if not PoolOrder.objects.filter(pk=order.pk, status=PoolOrder.Status.APPROVED).update(status=PoolOrder.Status.PAYING):
            return None
        p.event("OrderPaying", f"Order #{order.pk} is being paid: {order.amount} {order.currency}")  # a state change: an event of its own
    return order, quota_note


def _pay_order(p: ReconcilePass, order: PoolOrder, quota_note: str) -> None:
    """Ask the cloud (no lock held, no transaction open), then settle the Paying order under the
    locks. A refusal (`ProviderError`: nothing was debited) puts it back to Approved, and then
    trims it as a lowered `nodeCount.min` would have, had it not been Paying; any other failure
    (a timeout: the outcome is unknown) leaves it Paying for the next pass."""
    try:
        payment = p.cloud.pay(order_id=order.pk, amount=order.amount, currency=order.currency, now=p.now)
    except ProviderError as exc:
        with transaction.atomic():
            pool = pool_orders_lock(pool=p.pool)
            if not PoolOrder.objects.filter(pk=order.pk, status=PoolOrder.Status.PAYING).update(status=PoolOrder.Status.APPROVED):
                return
            if isinstance(exc, InsufficientBalance):
                detail = stall_messages.insufficient_balance_reason(need=exc.need, balance=exc.balance, currency=exc.currency)
                p.stall(detail)
            else:
                detail = exc.message
                p.stall(f"{exc.reason}: {detail}")
            top_up = "; a platform admin tops the account up (Admin → Accounts)" if isinstance(exc, InsufficientBalance) else ""
            p.event(exc.reason, f"Order #{order.pk} is unpaid: {detail}{top_up}; payment is retried every pass", type=WARNING)
            orders_trim_to_min(pool=pool, now=p.now)
        return
    with transaction.atomic():
        pool_orders_lock(pool=p.pool)
        if PoolOrder.objects.filter(pk=order.pk, status=PoolOrder.Status.PAYING).update(status=PoolOrder.Status.PAID, paid_at=payment.paid_at):
            if quota_note:
                p.event("QuotaValidated", quota_note)
            p.event(
                "OrderPaid",
                f"Order #{order.pk} paid: {payment.amount} {payment.currency} debited, balance {payment.balance_after} {payment.currency}",
            )
            if order.kind == PoolOrder.Kind.RENEW:
                exits.renewal_apply(p, order)


def _quota_check(p: ReconcilePass, order: PoolOrder) -> str | None:
    """Quotas can be lowered after approval: check again before paying (T1), in every scope the
    approval checked: region-wide and the pool's team's own (`pool_services.quota_limits_lock`).
    What counts is what is in use (bought, or bursting) and what admins approved, this order
    among them; a Pending request, of this team or another, is not decided and must not hold
    back an order that is. None: exceeded."""
    if order.kind == PoolOrder.Kind.RENEW:
        return ""  # a renewal keeps capacity the pool already holds
    region, model, pool = p.pool.zone.region, p.spec.gpu_model, p.pool
    limits = quota_limits_lock(region=region, gpu_model_id=pool.gpu_model_id, team_id=pool.team_id)
    if not any(q.team_id is None for q in limits):
        return _quota_refused(p, order, f"QuotaExceeded: no quota for {model} in {region}")
    held = []
    for quota in limits:
        in_use, approved = quota_held(region=region, gpu_model_id=pool.gpu_model_id, team_id=quota.team_id, exclude_order_id=order.pk)
        scope = stall_messages.quota_scope(region, model, pool.team.slug if quota.team_id else None)
        if in_use + approved + order.gpus > quota.limit_gpus:
            return _quota_refused(p, order, stall_messages.quota_exceeded(scope, requested=order.gpus, in_use=in_use, approved=approved, limit=quota.limit_gpus))
        held.append(f"{scope} {in_use + approved + order.gpus} of {quota.limit_gpus} GPU(s)")
    return f"Quota allows order #{order.pk}: {'; '.join(held)} in use or approved with it"


def _quota_refused(p: ReconcilePass, order: PoolOrder, reason: str) -> None:
    p.stall(reason)
    p.event("QuotaExceeded", f"Order #{order.pk} is not paid: {reason}", type=WARNING)


def _slots_missing(order: PoolOrder) -> int:
    """Nodes the order still needs: its count less nodes holding a slot (live, or retired)."""
    holding = order.nodes.filter(Q(release_reason__in=rules.RETIRING_REASONS) | (~Q(phase=Node.Phase.TERMINATED) & Q(release_reason=""))).count()
    return max(0, order.node_count - holding)


def _capacity_orders(pool: GpuNodePool):
    return pool.orders.filter(status=PoolOrder.Status.PAID, kind__in=(PoolOrder.Kind.CREATE, PoolOrder.Kind.GROW)).order_by("created_at", "pk")


def _create_missing(p: ReconcilePass) -> None:
    room = p.pool.max_nodes - p.live_nodes().filter(release_reason="").count()
    billing = Node.Billing.PREEMPTIBLE if p.pool.preemptible else Node.Billing.MONTHLY
    for order in _capacity_orders(p.pool):
        for _ in range(min(_slots_missing(order), room)):
            if _node_create(p, order, billing) is None:
                return
            room -= 1


def _unused_capacity_record(p: ReconcilePass) -> None:
    """Put on the ledger the paid capacity of a Deleting pool that no node will fill.

    A Deleting pool makes no node (`_node_create`), and a delete never withdraws a Paying order:
    an order paid as the delete began (settled after it, or paid before the pass made its nodes)
    was debited for the lease the team ordered, and the cloud refunds nothing (`CloudProvider`
    has no refund). Each slot of it the ledger has not opened gets what a node released by the
    delete has: a holder of the slot's share of the debit for the lease the payment bought, a
    node row born Terminated (`POOL_DELETED`), no machine ever ordered for it. Metering charges
    its hours to the pool's team as idle capacity and the FOCUS export lists its purchase (its
    hours are the commitment's unused part), so what was debited is charged back; one
    `CapacityReleasedUnused` event says so (`exits.capacity_released_unused`, as for a renewal
    paid after its node left). Recorded hours after the payment (a settle a dead worker left to
    a later pass), the holders' periods are charged from the first hour metering has not closed
    (`lease_ledger.hour_open`). One query reads every order's unopened slots
    (`lease_ledger.capacity_orders_unopened`), however many orders the pool has; idempotent: an
    order it finds unfilled has its slots counted again under the pool's row lock, so a second
    pass or worker adds nothing."""
    billing = Node.Billing.PREEMPTIBLE if p.pool.preemptible else Node.Billing.MONTHLY
    for order in lease_ledger.capacity_orders_unopened(p.pool).filter(slots_unopened__gt=0):
        paid_at = p.cloud.pay(order_id=order.pk, amount=order.amount, currency=order.currency, now=p.now).paid_at  # idempotent: the existing payment
        lease_end = leases.add_months(paid_at, order.lease_months)
        with transaction.atomic():
            GpuNodePool.objects.select_for_update(no_key=True).filter(pk=p.pool.pk).values_list("pk").get()
            missing = lease_ledger.slots_unopened(order)
            for name in node_names_next(p.pool, missing):
                node = Node.objects.create(
                    pool=p.pool, name=name, billing=billing, phase=Node.Phase.TERMINATED, zone=p.pool.zone,
                    gpu_count=p.pool.node_type.gpu_count, unschedulable=True, order=order, lease_start=paid_at,
                    lease_end=lease_end, created_at=p.now, terminated_at=p.now, release_reason=rules.POOL_DELETED,
                )  # fmt: skip
                lease_ledger.holder_add(node, order, vacated=None, now=p.now)
            if missing:
                exits.capacity_released_unused(
                    p, f"Order #{order.pk} was paid ({order.amount} {order.currency}) as the pool's delete began: {missing} of its "
                    f"{order.node_count} node(s) were never made", until=lease_end,
                )  # fmt: skip


def node_name_next(pool: GpuNodePool) -> str:
    """The next node name of the pool: `<pool>-<pool id>-<seq>` (unique across pools)."""
    return node_names_next(pool, 1)[0]


def node_names_next(pool: GpuNodePool, count: int) -> list[str]:
    """The pool's next `count` node names, one past the highest sequence taken (terminated
    nodes keep their names: a name is never reused). One query, however many nodes the pool
    has had."""
    prefix = f"{pool.name}-{pool.pk}-"
    taken = (
        Node.objects.filter(name__startswith=prefix, name__regex=rf"^{re.escape(prefix)}[0-9]{{1,9}}$")
        .annotate(seq=Cast(Substr("name", len(prefix) + 1), IntegerField()))
        .aggregate(highest=Max("seq"))["highest"]
    ) or 0
    return [f"{prefix}{taken + i:03d}" for i in range(1, count + 1)]


def _node_create(p: ReconcilePass, order: PoolOrder, billing: str) -> Node | None:
    """A node for a slot of a paid order; None when the pool is being deleted: a delete that
    landed during this pass (after the payment, say) finds no node it has not seen, since the
    node is written under the pool's row lock, which the delete takes too.

    A replacement takes over the vacated node's lease as it is then (read under that lock,
    which a renewal's payment takes too) and the renewal ordered for it, not paid yet: the
    renewal renews the slot, which the replacement now holds (`exits.renewal_apply`), and no
    second renewal is ordered for it (it was told of its lease's end with the node it replaces)."""
    vacated = lease_ledger.vacated_holder(order)  # a replacement takes over the vacated slot's lease
    sibling = vacated or order.nodes.exclude(lease_end=None).order_by("-lease_end").first()
    if sibling is not None:  # the order's nodes share its lease
        lease_start, lease_end = sibling.lease_start, sibling.lease_end
    else:
        paid_at = p.cloud.pay(order_id=order.pk, amount=order.amount, currency=order.currency, now=p.now).paid_at  # idempotent: the existing payment
        lease_start, lease_end = paid_at, leases.add_months(paid_at, order.lease_months)
    with transaction.atomic():
        phase, deleted_at = GpuNodePool.objects.select_for_update(no_key=True).filter(pk=p.pool.pk).values_list("phase", "deleted_at").get()
        if phase == GpuNodePool.Phase.DELETING or deleted_at is not None:
            return None
        renewal_id = notified = None
        if vacated is not None:
            lease_start, lease_end, renewal_id, notified = (
                Node.objects.filter(pk=vacated.pk).values_list("lease_start", "lease_end", "renewal_order_id", "lease_notified_at").get()
            )
            if renewal_id is not None:
                Node.objects.filter(pk=vacated.pk).update(renewal_order=None)
        node = Node.objects.create(
            pool=p.pool,
            name=node_name_next(p.pool),
            billing=billing,
            phase=Node.Phase.ORDERING,
            zone=p.pool.zone,
            gpu_count=p.pool.node_type.gpu_count,
            order=order,
            lease_start=lease_start,
            lease_end=lease_end,
            created_at=p.now,
            renewal_order_id=renewal_id,
            lease_notified_at=notified if renewal_id is not None else None,
        )
        lease_ledger.holder_add(node, order, vacated=vacated, now=p.now)
        repair_outcome.successor_link(vacated=vacated, successor=node)
    return node


# The steps of a live pool's pass, in order, each by the reason `lifecycle_rules.steps_needed`
# gives when it has work (`lifecycle_rules.PASS_STEPS`).
_STEPS = (
    ("NodeDrift", node_sync.nodes_sync),
    ("Draining", exits.drains_advance),
    ("OrderApproved", _pay_orders),
    ("ReclaimNotice", exits.reclaims_handle),
    ("LeaseAction", exits.leases_handle),
    ("Surplus", exits.surplus_drain),
    ("NodesMissing", _create_missing),
    ("StepDue", provisioning.nodes_advance),
    ("SlowCapacity", provisioning.slow_capacity_check),
    ("Heartbeat", exits.heartbeats_check),
)

# ---------------------------------------------------------------------------------------------
# Status


def _status_write(p: ReconcilePass, generation: int, snapshot: rules.PoolSnapshot | None = None) -> tuple[str, str]:
    """Write the pool's status from its rows as the pass left them (`snapshot`, when the caller
    has just read them)."""
    snapshot = snapshot or snapshots_load([p.pool])[p.pool.pk]
    status = rules.status_of(snapshot, stalls=p.stalls, now=p.now)
    rows = GpuNodePool.objects.filter(pk=p.pool.pk, deleted_at__isnull=True)
    if status.phase != GpuNodePool.Phase.DELETING:  # a delete requested during this pass wins
        rows = rows.exclude(phase=GpuNodePool.Phase.DELETING)
    observed = p.pool.observed_generation if p.hold_generation else generation  # a spec not on every node yet is not observed
    with transaction.atomic():
        written = rows.update(**status.columns(), observed_generation=observed)
        if written and (news := status.ready_news(p.pool.name, p.pool.phase)):
            p.event("PoolReady", news)
    return status.phase, status.pending_reason

