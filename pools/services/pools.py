"""Writes: pools and their orders (design §6). Web views, API views and the CLI's endpoints call
these and hold no logic of their own.

Each service validates everything before it writes anything, then writes inside one transaction,
so bad input changes nothing and a half-written pool cannot exist. Every state change records a
PoolEvent; decisions by people are also audit-logged.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from billing import lease_ledger, pricing
from billing.budget_sync import budget_sync_pool
from pools import roles
from pools.core.documents import merge_patch_bounded, read_uid, read_version, split_server_fields
from pools.core.errors import (
    ConflictError,
    FieldError,
    QuotaExceeded,
    StaleVersion,
    ValidationError,
    free_text,
)
from pools.core.lifecycle import UNPAID, WITHDRAWN
from pools.core.spec import PoolSpec, parse_document, thresholds_repeated
from pools.core.spec_changes import describe_change
from pools.core.stall_messages import quota_exceeded, quota_scope
from pools.models import GpuModel, GpuNodePool, NodeType, PoolOrder, Quota, Team, Zone
from pools.providers import get_cloud_provider
from pools.selectors.pools import (
    catalog_current,
    decided_baseline,
    ordered_baseline,
    quota_usage,
    teams_led_by,
)
from pools.services.audit import audit_record
from pools.services.events import WARNING, event_record
from pools.services.order_withdrawal import order_withdraw
from pools.services.pool_status import pool_status_refresh

# Pool names are one namespace for all teams: one another team took is taken, though unseen (QA).
NAME_TAKEN = "a pool named {!r} already exists (pool names are unique across all teams): choose another name"
IMMUTABLE_FIELDS = (("nodeType", "node_type"), ("gpuModel", "gpu_model"), ("region", "region"), ("preemptible", "preemptible"))


# ---------------------------------------------------------------------------------------------
# Pools


def pool_create(*, user, document: Any, team_slug: str = "", now: datetime | None = None) -> GpuNodePool:
    """Declare a pool from a GpuNodePool document; order its monthly baseline for approval."""
    now = now or timezone.now()
    document, server = split_server_fields(document)
    team = _team_for_new_pool(user=user, team_slug=team_slug or str(server.get("team") or ""))
    spec = parse_document(document, catalog_current(writing=True))
    if repeated := thresholds_repeated(document):
        raise ValidationError(repeated)
    _check_sharing(spec, team)
    if GpuNodePool.objects.active().filter(name=spec.name).exists():
        raise ConflictError(NAME_TAKEN.format(spec.name))
    refs = _Refs(spec)
    _check_budget_currency(spec, refs, now=now)
    quote = _quote(spec, refs, nodes=spec.min_nodes, now=now) if spec.min_nodes else None
    try:
        with transaction.atomic():
            room = _check_quota(spec=spec, refs=refs, team=team, requested_gpus=spec.min_nodes * refs.node_type.gpu_count) if spec.min_nodes else ""
            pool = GpuNodePool.objects.create(
                name=spec.name,
                team=team,
                document=document,
                created_by=user,
                created_at=now,
                updated_at=now,
                **_columns(spec, refs),
            )
            event_record(pool=pool, reason="PoolCreated", message=f"Pool created by {user.get_username()} for team {team.slug}", actor=user, now=now)
            if quote is not None:
                _order_request(pool=pool, kind=PoolOrder.Kind.CREATE, nodes=spec.min_nodes, spec=spec, refs=refs, quote=quote, room=room, user=user, now=now)
            else:
                _set_status(pool, phase=GpuNodePool.Phase.READY, pending_reason="")
            audit_record(actor=user, action="pool.create", obj=pool, after=document)
            budget_sync_pool(pool=pool, now=now)
    except IntegrityError as exc:  # a concurrent create with the same name won the race
        raise ConflictError(NAME_TAKEN.format(spec.name)) from exc
    return pool


def pool_update(*, user, pool: GpuNodePool, document: Any, now: datetime | None = None, based_on: dict | None = None) -> GpuNodePool:
    """Replace the pool's document. Raising `nodeCount.min` above what is ordered requests more.
    `based_on`: the document `document` was made from (a patch's); if the pool's is another by
    the time the update holds the pool's lock, `_Outdated` is raised and nothing is written.
    A `metadata.resourceVersion` in the document is the version the client read: another one
    under the lock raises `StaleVersion` (409), so that a form or a file edited from an older
    read does not silently undo a change made since; a `metadata.uid` of another pool (one of
    that name deleted since, whose generations this one repeats) is refused as well."""
    now = now or timezone.now()
    _require_manage(user, pool)
    if pool.phase == GpuNodePool.Phase.DELETING:
        raise ConflictError(f"pool {pool.name!r} is being deleted")
    document, server = split_server_fields(document)
    read_at, read_as = read_version(server), read_uid(server)
    spec = parse_document(document, catalog_current(writing=True))
    old = parse_document(pool.document, catalog_current())
    errors = thresholds_repeated(document, stored=pool.document)
    if spec.name != pool.name:
        errors.append(FieldError("metadata.name", f"field is immutable: the pool is named {pool.name!r}"))
    for path, attr in IMMUTABLE_FIELDS:
        if getattr(spec, attr) != getattr(old, attr):
            if attr == "region" and "region" not in document.get("spec", {}):
                path = "zones[0]"  # the preferred zone, given as the first of spec.zones
            errors.append(FieldError(f"spec.{path}", f"field is immutable (is {getattr(old, attr)!r}); create a new pool instead"))
    if errors:
        raise ValidationError(errors)
    _check_sharing(spec, pool.team)
    refs = _Refs(spec)
    if spec.budget != old.budget:  # an unchanged budget never blocks a resize
        _check_budget_currency(spec, refs, now=now)
    grow = max(0, spec.min_nodes - ordered_baseline(pool=pool))
    # The price, asked before the locks (a real cloud's quote is a network call); how many nodes
    # it is for is settled under them.
    quote = _quote(spec, refs, nodes=grow, now=now) if grow else None
    with transaction.atomic():
        locked = pool_orders_lock(pool=pool)
        if locked.deleted_at is not None or locked.phase == GpuNodePool.Phase.DELETING:
            raise ConflictError(f"pool {pool.name!r} is being deleted")
        if based_on is not None and locked.document != based_on:
            raise _Outdated(f"pool {pool.name!r} changed while this update was being made; send it again")
        if read_as is not None and read_as != locked.uid:  # a pool of that name deleted since, or none this one ever was
            gone = any(p.uid == read_as for p in GpuNodePool.objects.filter(name=pool.name, deleted_at__isnull=False).only("pk"))
            what = "was deleted and created again since it was read" if gone else f"is not the object of metadata.uid {read_as!r}"
            raise ConflictError(f"pool {pool.name!r} {what} (its metadata.uid is {locked.uid}); get it again and make your change on that")
        if read_at is not None and read_at != locked.generation:
            raise StaleVersion(f"pool {pool.name!r}", read=read_at, current=locked.generation)
        # Counted again under the pool's lock: two identical updates at once (a double-click,
        # the web and the CLI) each counted before the other's order existed, and both ordered
        # the growth. The second now finds the first's order and orders nothing.
        ordered = ordered_baseline(pool=locked)
        grow = max(0, spec.min_nodes - ordered)
        if grow and quote is None:  # an order was withdrawn meanwhile: nothing was priced for it
            raise ConflictError(f"pool {pool.name!r} changed while this update was being made; send it again")
        quote = replace(quote, nodes=grow) if grow else None
        room = _check_quota(spec=spec, refs=refs, team=locked.team, requested_gpus=grow * refs.node_type.gpu_count) if grow else ""
        before = locked.document
        if before != document:
            for key, value in _columns(spec, refs).items():
                setattr(locked, key, value)
            locked.document = document
            locked.generation += 1
            locked.updated_at = now
            locked.save()
            current = old if before == pool.document else parse_document(before, catalog_current())  # another update came first
            event_record(pool=locked, reason="SpecUpdated", message=describe_change(current, spec), actor=user, now=now)
            audit_record(actor=user, action="pool.update", obj=locked, before=before, after=document)
            budget_sync_pool(pool=locked, now=now)
        if ordered > spec.min_nodes:
            _orders_trim(pool=locked, min_nodes=spec.min_nodes, excess=ordered - spec.min_nodes, user=user, now=now)
        if quote is not None:
            kind = PoolOrder.Kind.CREATE if ordered == 0 and not locked.orders.exists() else PoolOrder.Kind.GROW
            _order_request(pool=locked, kind=kind, nodes=grow, spec=spec, refs=refs, quote=quote, room=room, user=user, now=now)
        if not ordered == spec.min_nodes == old.min_nodes:  # the stored status may name an order withdrawn or refused, or not the one filed: written anew
            pool_status_refresh(pool=locked, user=user, now=now)
    return locked


class _Outdated(ConflictError):
    """The pool's document is no longer the one an update was made from."""


PATCH_TRIES = 3


def pool_patch(*, user, pool: GpuNodePool, patch: Any, now: datetime | None = None) -> GpuNodePool:
    """Apply a JSON merge patch (RFC 7386) to the pool's document as it is when the update is
    made, as the API server applies a patch to the object it stores: two resizes at once (the
    web and the CLI, one of min and one of max) both take effect, where the later one wrote the
    document both had read and undid the other. The merged document is held to the size limit."""
    for _ in range(PATCH_TRIES - 1):
        try:
            return pool_update(user=user, pool=pool, document=_merged(pool, patch), now=now, based_on=pool.document)
        except _Outdated:
            pool = GpuNodePool.objects.get(pk=pool.pk)
    return pool_update(user=user, pool=pool, document=_merged(pool, patch), now=now, based_on=pool.document)


def _merged(pool: GpuNodePool, patch: Any) -> dict:
    return merge_patch_bounded(pool.document, patch, max_bytes=settings.EBCLOUD_MAX_SPEC_BYTES)


def pool_resize(*, user, pool: GpuNodePool, min_nodes: int | None = None, max_nodes: int | None = None, now: datetime | None = None) -> GpuNodePool:
    """Change `nodeCount.min`/`max` (`POST /api/v1/pools/NAME/scale/`, which the CLI's `scale` sends)."""
    count = {key: value for key, value in (("min", min_nodes), ("max", max_nodes)) if value is not None}
    if not count:
        raise ValidationError("give a new min, max or both", field="spec.nodeCount")
    return pool_patch(user=user, pool=pool, patch={"spec": {"nodeCount": count}}, now=now)


def pool_delete(*, user, pool: GpuNodePool, now: datetime | None = None) -> GpuNodePool:
    """Start deleting the pool: pending orders are withdrawn; nodes are drained, then released.

    A pool without live nodes is gone at once. One with nodes stays `Deleting` until the
    lifecycle controller has drained and released them (monthly nodes stay billed to lease end),
    and so does one with an order being paid, or paid with no node made for it yet (the
    controller puts its capacity on the lease ledger, released unused, before the pool goes).
    """
    now = now or timezone.now()
    _require_manage(user, pool)
    with transaction.atomic():
        locked = pool_orders_lock(pool=pool, quotas=False)
        if locked.deleted_at is not None:
            raise ConflictError(f"pool {pool.name!r} is already deleted")
        # Approved orders not paid yet go too, as the Deleting path withdraws them
        # (pools/controllers/exits.py): a pool without nodes is gone at once, and the
        # controller never passes over a deleted pool to do it. The controller claims an order
        # for payment (Approved -> Paying) under this same lock, so an Approved one here is not
        # being paid. A Paying one is left to the payment (the cloud may have debited it): the
        # pool stays Deleting until the controller settles it, Paid or withdrawn.
        for order in locked.orders.filter(status__in=(PoolOrder.Status.PENDING, PoolOrder.Status.APPROVED)).order_by("pk"):
            unpaid = " before payment" if order.status == PoolOrder.Status.APPROVED else ""
            order_withdraw(pool=locked, order=order, why="the pool was deleted", actor=user, now=now,
                           message=f"Order #{order.pk} withdrawn{unpaid}: the pool is being deleted")  # fmt: skip
        audit_record(actor=user, action="pool.delete", obj=locked, before=locked.document)
        paying = locked.orders.filter(status=PoolOrder.Status.PAYING).values_list("pk", flat=True).first()
        if locked.nodes.exclude(phase="Terminated").exists():
            _set_status(locked, phase=GpuNodePool.Phase.DELETING, pending_reason="Draining: nodes are drained, then released")
            event_record(pool=locked, reason="PoolDeleting", message="Deletion requested: draining nodes before release", actor=user, now=now)
        elif paying is not None:
            why = f"order #{paying} is being paid; the pool goes once the payment is settled"
            _set_status(locked, phase=GpuNodePool.Phase.DELETING, pending_reason=f"OrderPaying: {why}")
            event_record(pool=locked, reason="PoolDeleting", message=f"Deletion requested: {why}", actor=user, now=now)
        elif (unfilled := _order_unfilled(locked)) is not None:
            why = f"order #{unfilled} is paid and no node was made for it; the pool goes once its capacity is recorded as released unused"
            _set_status(locked, phase=GpuNodePool.Phase.DELETING, pending_reason=f"OrderPaid: {why}")
            event_record(pool=locked, reason="PoolDeleting", message=f"Deletion requested: {why}", actor=user, now=now)
        else:
            locked.deleted_at = now
            locked.save(update_fields=["deleted_at"])
            _set_status(locked, phase=GpuNodePool.Phase.DELETED, pending_reason="")
            event_record(pool=locked, reason="PoolDeleted", message="Pool deleted (it had no nodes)", actor=user, now=now)
    return locked


def _order_unfilled(pool: GpuNodePool) -> int | None:
    """A Paid capacity order of the pool with slots no node holds on the lease ledger (paid just
    before the delete, its nodes not made yet), or None. Its debit must reach the ledger before
    the pool goes: the controller's Deleting pass records it (`lifecycle._unused_capacity_record`),
    and it never passes over a deleted pool."""
    return lease_ledger.capacity_orders_unopened(pool).filter(slots_unopened__gt=0).values_list("pk", flat=True).first()


# ---------------------------------------------------------------------------------------------
# Orders


def order_approve(*, user, order: PoolOrder, now: datetime | None = None) -> PoolOrder:
    """An admin approves a Pending order; quota is checked again at this moment, and the order
    must still fit the pool's `nodeCount.min` (the lead may have lowered it since)."""
    now = now or timezone.now()
    _require_admin(user)
    with transaction.atomic():
        pool = _order_pool_lock(order, quotas=True)
        spec = parse_document(pool.document, catalog_current())
        refs = _Refs(spec)
        _check_quota(spec=spec, refs=refs, team=pool.team, requested_gpus=order.gpus, exclude_order_id=order.pk)
        _check_fits(order=order, pool=pool, spec=spec)
        _decide(order=order, status=PoolOrder.Status.APPROVED, user=user, reason="", now=now)
        order.pool = pool
        event_record(pool=pool, reason="OrderApproved", message=f"Order #{order.pk} for {order.node_count} {order.lease_type} node(s) approved by {user.get_username()}", actor=user, now=now)
        if pool.phase == GpuNodePool.Phase.PENDING:
            _set_status(pool, phase=GpuNodePool.Phase.PROVISIONING, pending_reason=f"OrderApproved: order #{order.pk} awaits payment")
    return order


def order_reject(*, user, order: PoolOrder, reason: str, now: datetime | None = None) -> PoolOrder:
    """An admin rejects a Pending order, with a reason the team lead will read."""
    now = now or timezone.now()
    _require_admin(user)
    reason = free_text("" if reason is None else reason, field="reason", max_length=500,
                       required="a reason is required to reject an order")
    if reason.lower().startswith(WITHDRAWN.strip().lower()):  # an earlier release's mark of an order its own pool took back
        raise ValidationError(f"may not begin with {WITHDRAWN.strip()!r}: that marks an order its pool withdrew, not a rejection", field="reason")
    with transaction.atomic():
        pool = _order_pool_lock(order, quotas=False)
        _decide(order=order, status=PoolOrder.Status.REJECTED, user=user, reason=reason, now=now)
        order.pool = pool
        event_record(pool=pool, reason="OrderRejected", type=WARNING, message=f"Order #{order.pk} rejected by {user.get_username()}: {reason}", actor=user, now=now)
        if pool.phase == GpuNodePool.Phase.PENDING:
            _set_status(pool, phase=GpuNodePool.Phase.PENDING, pending_reason=f"OrderRejected: {reason}")
    return order


def pool_orders_lock(*, pool: GpuNodePool, quotas: bool = True) -> GpuNodePool:
    """Lock what writing the pool's orders takes, in the one order every writer takes it (pool
    updates and deletes, decisions, the controller's payments; the autoscaler's scale-ups take
    the same quota rows the same way, then write nodes, not the pool's row): the quota rows of
    the pool's region and GPU model (`quota_limits_lock`), when the write may hold quota, then
    the pool's row; its orders come after. Taken in another order they deadlocked:
    a decision held the order while its event waited for the pool's row, which a delete held
    while it waited to withdraw that order. Returns the pool as locked."""
    if quotas:  # region, model and team never change: read before the lock, they are the same after
        quota_limits_lock(region=pool.zone.region, gpu_model_id=pool.gpu_model_id, team_id=pool.team_id)
    return GpuNodePool.objects.select_for_update().get(pk=pool.pk)


def _order_pool_lock(order: PoolOrder, *, quotas: bool) -> GpuNodePool:
    """`pool_orders_lock` for a decision, then the order read again under it: still Pending, or
    a 409 (another admin, or a delete, decided it first)."""
    pool = pool_orders_lock(pool=order.pool, quotas=quotas)
    order.refresh_from_db()
    if order.status != PoolOrder.Status.PENDING:
        raise ConflictError(f"order #{order.pk} is {order.status}, not Pending: it was already decided")
    return pool


def _check_fits(*, order: PoolOrder, pool: GpuNodePool, spec: PoolSpec) -> None:
    """Refuse an order that buys more monthly nodes than the pool's baseline asks now. Lowering
    `nodeCount.min` trims unpaid orders (`_orders_trim`); this keeps an order from before that,
    or from a race, from debiting nodes that are past `nodeCount.max` (never built) or past the
    baseline (billed, unasked for)."""
    if order.kind == PoolOrder.Kind.RENEW:
        return  # a renewal extends leases the pool holds; it adds no node
    held = decided_baseline(pool=pool, exclude_order_id=order.pk)
    if held + order.node_count > spec.min_nodes:
        wanted = max(0, spec.min_nodes - held)
        raise ConflictError(
            f"order #{order.pk} asks for {order.node_count} monthly node(s), but pool {pool.name} wants {wanted} more: "
            f"nodeCount.min is {spec.min_nodes} and {held} are already approved or bought; reject this order"
        )


def orders_trim_to_min(*, pool: GpuNodePool, now: datetime) -> None:
    """What is ordered, trimmed to the pool's `nodeCount.min` (`_orders_trim`): for an order a
    refused payment put back to Approved, which a minimum lowered while it was Paying left
    alone. The caller holds `pool_orders_lock`; `pool` is the row it returned."""
    ordered = ordered_baseline(pool=pool)
    if ordered > pool.min_nodes:
        _orders_trim(pool=pool, min_nodes=pool.min_nodes, excess=ordered - pool.min_nodes, user=None, now=now)


def _orders_trim(*, pool: GpuNodePool, min_nodes: int, excess: int, user, now: datetime) -> None:
    """`nodeCount.min` was lowered below what is ordered: take the `excess` nodes off orders not
    paid yet, newest first, Pending before Approved (an approval covers money; less of it is
    still covered). An order wholly in excess is withdrawn; one partly so keeps the nodes still
    wanted at its own price terms, so its amount stays exact to the cent. Paid orders are bought:
    their nodes stay until their leases end. A Paying order is left alone too: the cloud may
    have debited it. The caller holds the pool's lock, under which the controller claims an
    order for payment (Approved -> Paying), so no Approved order here starts being paid meanwhile."""
    why = f"nodeCount.min lowered to {min_nodes}"
    for status in (PoolOrder.Status.PENDING, PoolOrder.Status.APPROVED):
        for order in pool.orders.filter(status=status).exclude(kind=PoolOrder.Kind.RENEW).order_by("-created_at", "-pk"):
            if excess <= 0:
                return
            cut = min(excess, order.node_count)
            excess -= cut
            if cut == order.node_count:
                order_withdraw(pool=pool, order=order, why=why, actor=user, now=now,
                               message=f"Order #{order.pk} ({order.node_count} node(s), {order.amount} {order.currency}) withdrawn: {why}")  # fmt: skip
                continue
            nodes = order.node_count - cut
            amount = pricing.Quote(unit_monthly_price=order.unit_monthly_price, nodes=nodes, months=order.lease_months, discount=order.discount, currency=order.currency).amount
            PoolOrder.objects.filter(pk=order.pk, status=status).update(node_count=nodes, gpus=order.gpus // order.node_count * nodes, amount=amount)
            event_record(pool=pool, reason="OrderReduced", actor=user, now=now,
                         message=f"Order #{order.pk} reduced from {order.node_count} to {nodes} node(s), {order.amount} → {amount} {order.currency}: {why}")  # fmt: skip
            audit_record(actor=user, action="order.reduce", obj=order, before={"status": status, "nodes": order.node_count, "amount": str(order.amount)},
                         after={"status": status, "nodes": nodes, "amount": str(amount)})  # fmt: skip


def _decide(*, order: PoolOrder, status: str, user, reason: str, now: datetime) -> None:
    """Claim the decision with a conditional UPDATE: of two concurrent deciders one wins, the other gets 409."""
    before = {"status": order.status}
    claimed = PoolOrder.objects.filter(pk=order.pk, status=PoolOrder.Status.PENDING).update(
        status=status, decided_by=user, decided_at=now, reason=reason
    )
    if not claimed:
        current = PoolOrder.objects.filter(pk=order.pk).values_list("status", flat=True).first()
        raise ConflictError(f"order #{order.pk} is {current}, not Pending: it was already decided")
    order.refresh_from_db()
    audit_record(actor=user, action=f"order.{status.lower()}", obj=order, before=before, after={"status": status, "reason": reason})


def _order_request(*, pool: GpuNodePool, kind: str, nodes: int, spec: PoolSpec, refs: _Refs, quote, room: str, user, now: datetime) -> PoolOrder:
    order = PoolOrder.objects.create(
        pool=pool,
        kind=kind,
        node_count=nodes,
        gpus=nodes * refs.node_type.gpu_count,
        lease_type=spec.lease_type,
        lease_months=quote.months,
        unit_monthly_price=quote.unit_monthly_price,
        discount=quote.discount,
        amount=quote.amount,
        currency=quote.currency,
        requested_by=user,
        created_at=now,
    )
    event_record(pool=pool, reason="QuotaValidated", message=f"Quota allows this order's {order.gpus} {spec.gpu_model} GPU(s): {room} in use or requested with it", actor=user, now=now)
    event_record(
        pool=pool,
        reason="OrderRequested",
        message=(
            f"Order #{order.pk}: {nodes} × {spec.node_type} {spec.gpu_model}, {spec.lease_type} lease, "
            f"{order.amount} {order.currency} for {order.lease_months} month(s); awaiting approval"
        ),
        actor=user,
        now=now,
    )
    audit_record(actor=user, action="order.request", obj=order, after={"kind": kind, "nodes": nodes, "amount": str(order.amount)})
    if pool.phase in (GpuNodePool.Phase.PENDING, GpuNodePool.Phase.READY) and kind == PoolOrder.Kind.CREATE:
        _set_status(pool, phase=GpuNodePool.Phase.PENDING, pending_reason=f"OrderPending: order #{order.pk} awaits approval by a platform admin")
    return order


# ---------------------------------------------------------------------------------------------
# Helpers


class _Refs:
    """The catalog rows a spec names (already validated to exist)."""

    def __init__(self, spec: PoolSpec):
        self.gpu_model = GpuModel.objects.get(name=spec.gpu_model)
        self.node_type = NodeType.objects.get(name=spec.node_type)
        self.zone = Zone.objects.get(name=spec.region)


def _columns(spec: PoolSpec, refs: _Refs) -> dict[str, Any]:
    return {
        "gpu_model": refs.gpu_model,
        "node_type": refs.node_type,
        "zone": refs.zone,
        "min_nodes": spec.min_nodes,
        "max_nodes": spec.max_nodes,
        "lease_type": spec.lease_type,
        "preemptible": spec.preemptible,
    }


def _quote(spec: PoolSpec, refs: _Refs, *, nodes: int, now: datetime):
    """The cloud's quote, the one route to a price: renewals (pools/controllers/exits.py) ask
    the same provider call."""
    return get_cloud_provider().quote(
        node_type=spec.node_type, gpu_model=spec.gpu_model, lease_type=spec.lease_type, nodes=nodes, at=now, preemptible=spec.preemptible
    )


def _check_quota(*, spec: PoolSpec, refs: _Refs, team: Team, requested_gpus: int, exclude_order_id: int | None = None) -> str:
    """Refuse when the request would pass a quota, naming region, model, requested, in use, limit
    (T1); else say how much of each quota it leaves used (`cn-east-2 A100_80G 16 of 48 GPU(s)`)."""
    region, room = refs.zone.region, []
    limits = quota_limits_lock(region=region, gpu_model_id=refs.gpu_model.pk, team_id=team.pk)
    if not any(q.team_id is None for q in limits):
        raise QuotaExceeded(
            f"QuotaExceeded: no quota for {spec.gpu_model} in {region}; ask a platform admin for one",
            field="spec.gpuModel",
        )
    for quota in limits:
        in_use = quota_usage(region=region, gpu_model_id=refs.gpu_model.pk, team_id=quota.team_id, exclude_order_id=exclude_order_id)
        scope = quota_scope(region, spec.gpu_model, team.slug if quota.team_id else None)
        room.append(f"{scope} {in_use + requested_gpus} of {quota.limit_gpus} GPU(s)")
        if in_use + requested_gpus > quota.limit_gpus:  # orders not paid yet hold quota too, but are not in use
            held = partial(quota_usage, region=region, gpu_model_id=refs.gpu_model.pk, team_id=quota.team_id, exclude_order_id=exclude_order_id, burst=False)
            waiting, approved = held(statuses=(PoolOrder.Status.PENDING,)), held(statuses=UNPAID)
            raise QuotaExceeded(quota_exceeded(scope, requested=requested_gpus, in_use=in_use - waiting - approved, approved=approved, awaiting=waiting,
                                               limit=quota.limit_gpus), field="spec.nodeCount.min")  # fmt: skip
    return "; ".join(room)


def quota_limits_lock(*, region: str, gpu_model_id: int, team_id: int) -> list[Quota]:
    """The quotas a team's order is held to, region-wide first, then the team's own; locked.
    Locking them serialises concurrent requests, approvals and payments for the same region and
    model (PostgreSQL); callers run inside a transaction, and take them before the pool's row
    (`pool_orders_lock`)."""
    return list(
        Quota.objects.select_for_update()
        .filter(region=region, gpu_model_id=gpu_model_id)
        .filter(Q(team__isnull=True) | Q(team_id=team_id))
        .order_by(F("team_id").asc(nulls_first=True), "pk")
    )


def _check_budget_currency(spec: PoolSpec, refs: _Refs, *, now: datetime) -> None:
    """A pool's budget is compared with the pool's spend in the budget's own currency
    (`billing.month_spend`), so a budget in any other currency than its nodes' price would show
    nothing spent and never alert. No price yet: nothing to compare with."""
    if spec.budget is None:
        return
    try:
        price = pricing.price_in_force(node_type_id=refs.node_type.pk, gpu_model_id=refs.gpu_model.pk, at=now)
    except ValidationError:
        return
    if spec.budget.currency != price.currency:
        raise ValidationError(
            f"must be {price.currency}: {spec.node_type} nodes with {spec.gpu_model} are priced in {price.currency}, "
            "and a budget in another currency would count none of their cost", field="spec.budget.currency",
        )  # fmt: skip


def _set_status(pool: GpuNodePool, *, phase: str, pending_reason: str) -> None:
    pool.phase = phase
    pool.pending_reason = pending_reason
    GpuNodePool.objects.filter(pk=pool.pk).update(phase=phase, pending_reason=pending_reason)


def _team_for_new_pool(*, user, team_slug: str) -> Team:
    """The team comes from the creator's own memberships, never from an arbitrary id."""
    led = list(teams_led_by(user=user))
    if not led:
        raise PermissionDenied("only team leads and platform admins can create pools")
    return team_choose(teams=led, team_slug=team_slug, action="create pools", several="you lead several teams")


def team_choose(*, teams: list[Team], team_slug: str, action: str, several: str) -> Team:
    """One of the user's own `teams`: the one named, or the only one (design §6: the team of a
    new object comes from the user's memberships; a lead of several teams picks one of theirs)."""
    if team_slug:
        for team in teams:
            if team.slug == team_slug:
                return team
        raise ValidationError(f"you cannot {action} for team {team_slug!r}; choose one of: {', '.join(t.slug for t in teams)}", field="team")
    if len(teams) == 1:
        return teams[0]
    raise ValidationError(f"{several}; choose one of: {', '.join(t.slug for t in teams)}", field="team")


def _check_sharing(spec: PoolSpec, team: Team) -> None:
    """A pool is lent to other teams; naming its own team there is a mistake worth saying."""
    if team.slug in spec.shared_with:
        raise ValidationError(f"team {team.slug!r} owns the pool; list only the teams it is lent to", field=f"spec.sharedWith[{spec.shared_with.index(team.slug)}]")


def _require_manage(user, pool: GpuNodePool) -> None:
    if not roles.can_manage_team_pools(user, pool.team_id):
        raise PermissionDenied(f"only leads of team {pool.team.slug} and platform admins can change this pool")


def _require_admin(user) -> None:
    if not roles.is_admin(user):
        raise PermissionDenied("only platform admins can decide orders")
