"""Writes of the lease ledger (`billing.models.LeasePeriod`): which node holds which share of a
paid lease, hour by hour, so that the chargeback of a subscription node adds up to what was
debited for it (issue 20).

The lifecycle controller calls these where it creates a node for an order's slot
(`holder_add`), where a paid renewal extends leases (`renewal_periods_add`, the leases of
nodes gone since it was ordered too), and where a pool being deleted holds the slots of an
order paid as its delete began, which no node will fill (`capacity_orders_unopened`, read in
one query however many orders the pool has, and `slots_unopened`: the controller records them
as capacity released unused). Orders paid before the ledger existed have no
periods: their nodes are billed from their lease columns as before
(`billing.node_prices.node_price`).

A period is charged only in hours metering has not closed (`hour_open`): one recorded late (a
payment settled hours after the cloud debited it) is spread over its lease's hours from the
first open one, its whole share, so its debit is still charged back, once; one recorded after
every hour of its lease was closed is charged whole in the first open hour, as a correction
(`LeasePeriod.charged_in`, `billing.lease_corrections`).
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import (
    Case,
    Count,
    Exists,
    F,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Coalesce, Greatest

from billing.hours import HOUR, ceil_hour, floor_hour
from billing.lease_costs import split_amount
from billing.models import LeasePeriod, MeterRun
from pools.core import lifecycle as rules
from pools.models import GpuNodePool, Node, PoolOrder


def vacated_holder(order: PoolOrder) -> Node | None:
    """A node of the order that left its slot (reclaimed, replaced after a repair) while the
    slot's lease runs on: its successor takes the slot over. Nodes that retire with their
    slot (lease expired, scaled in, pool deleted) keep it, as `_slots_missing` counts them."""
    return (
        order.nodes.exclude(release_reason__in=rules.RETIRING_REASONS)
        .filter(Q(phase=Node.Phase.TERMINATED) | ~Q(release_reason=""))
        .filter(Exists(LeasePeriod.objects.filter(node=OuterRef("pk"), held_to__isnull=True)))
        .order_by("pk")
        .first()
    )


def holder_add(node: Node, order: PoolOrder, *, vacated: Node | None, now: datetime) -> None:
    """Record the new node of an order's slot: it takes over `vacated`'s open periods from the
    next hour boundary, or it opens the order's next slot. A node of an order paid before the
    ledger (nodes without periods) gets none: it is billed from its lease columns."""
    if vacated is not None:
        periods_hand_over(vacated, node, now=now)
        return
    opened = LeasePeriod.objects.filter(order=order).values("slot").distinct().count()
    legacy = opened == 0 and order.nodes.exclude(pk=node.pk).exists()
    if legacy or opened >= order.node_count or node.lease_start is None or node.lease_end is None:
        return
    _share_open(node, order, opened, node.lease_start, node.lease_end, now=now)


def capacity_orders_unopened(pool: GpuNodePool) -> QuerySet[PoolOrder]:
    """The pool's Paid capacity orders (create, grow), oldest first, each annotated with
    `slots_unopened` (see `_unopened_annotate`), in one query however many orders the pool has:
    a Deleting pool's delete and pass look for the orders whose capacity no node will fill
    (`services.pools._order_unfilled`, `lifecycle._unused_capacity_record`), and a query per
    order made their cost grow with the pool's history."""
    paid = pool.orders.filter(status=PoolOrder.Status.PAID, kind__in=(PoolOrder.Kind.CREATE, PoolOrder.Kind.GROW))
    return _unopened_annotate(paid).order_by("created_at", "pk")


def slots_unopened(order: PoolOrder) -> int:
    """How many of the order's slots no node holds on the ledger yet, read again in one query
    (the controller counts them under the pool's row lock before it fills them, so two workers
    do not both fill them)."""
    return _unopened_annotate(PoolOrder.objects.filter(pk=order.pk)).values_list("slots_unopened", flat=True).get()


def _unopened_annotate(orders: QuerySet[PoolOrder]) -> QuerySet[PoolOrder]:
    """`slots_opened` (the distinct slots the ledger holds for the order: slots are opened in
    turn, `holder_add`), `has_nodes`, and `slots_unopened`: the slots left, 0 for an order paid
    before the ledger (nodes but no periods: they are billed from their lease columns)."""
    opened = LeasePeriod.objects.filter(order=OuterRef("pk")).order_by().values("order").annotate(n=Count("slot", distinct=True)).values("n")
    return orders.annotate(
        slots_opened=Coalesce(Subquery(opened, output_field=IntegerField()), Value(0)),
        has_nodes=Exists(Node.objects.filter(order=OuterRef("pk"))),
    ).annotate(
        slots_unopened=Case(
            When(slots_opened=0, has_nodes=True, then=Value(0)),
            default=Greatest(F("node_count") - F("slots_opened"), Value(0)),
            output_field=IntegerField(),
        )
    )


def periods_hand_over(vacated: Node, successor: Node, *, now: datetime) -> int:
    """The successor holds the vacated node's open periods from the next hour boundary on (an
    hour not metered yet: metering counts complete hours only); the hours before stay on the
    vacated node (idle: unused commitment). A period charged whole as a correction
    (`charged_in`) stays: its hours are all metered, so nothing of it is left to hold. Returns
    the periods moved."""
    boundary = ceil_hour(now)
    moved = 0
    periods = LeasePeriod.objects.filter(node=vacated, held_to__isnull=True, lease_end__gt=boundary, charged_in__isnull=True)
    for period in periods.order_by("lease_start", "pk"):
        LeasePeriod.objects.filter(pk=period.pk).update(held_to=max(boundary, period.held_from))
        LeasePeriod.objects.create(
            node=successor,
            order_id=period.order_id,
            slot=period.slot,
            amount=period.amount,
            currency=period.currency,
            lease_start=period.lease_start,
            lease_end=period.lease_end,
            held_from=max(boundary, period.held_from),
        )
        moved += 1
    return moved


def renewal_periods_add(order: PoolOrder, renewed: list[tuple[Node, datetime, datetime]], *, now: datetime) -> None:
    """A paid renewal: each renewed node that is on the ledger gets the next period of its slot,
    [old lease end, new lease end), at its share of the renewal's debit; a node that left
    before the renewal was paid too (it holds the slot on the ledger: its successor takes the
    period over, else it stays on it, idle), since the cloud took the money all the same."""
    on_ledger = set(LeasePeriod.objects.filter(node__in=[n for n, _, _ in renewed]).values_list("node_id", flat=True))
    for slot, (node, start, end) in enumerate(renewed):
        if node.pk not in on_ledger or slot >= order.node_count:
            continue
        _share_open(node, order, slot, start, end, now=now)


def hour_open(now: datetime) -> datetime:
    """The first hour a period recorded at `now` can still be charged in. Metering takes each
    complete hour once and never again (`billing.services.meter_hour`): the hours before the
    one `now` is in may be metered already, or being metered (it reads the ledger before it
    claims the hour), while this hour and the later ones are not (it takes complete hours
    only); nor is any hour after the newest one metered (a worker whose clock runs ahead, a
    replay)."""
    newest = MeterRun.objects.order_by("-hour").values_list("hour", flat=True).first()
    return floor_hour(now) if newest is None else max(floor_hour(now), newest + HOUR)


def _share_open(node: Node, order: PoolOrder, slot: int, start: datetime, end: datetime, *, now: datetime) -> LeasePeriod:
    """The node holds share `slot` of the order's debit for the lease [start, end), from its start.

    Recorded after hours of the lease were closed (`hour_open`), it is spread over the lease's
    hours from the first open one instead: the whole share over fewer hours, each a little
    dearer, so its hours still add up to the share to the cent and each is metered once. Those
    closed hours were metered, rolled up and reported without it and are not restated; the
    FOCUS export sees the same period (its purchase rows start there and add up to the share,
    as its usage rows do). A lease metered whole before its record (a worker dead for the whole
    lease) has no open hour to spread it over: it keeps its lease and its whole share is
    charged in the first open hour (`charged_in`), as a correction line of the pool's team
    (`billing.lease_corrections`), never over its own closed hours, even one metered later
    (a catch-up's hole below the newest metered hour)."""
    opens = hour_open(now)
    if floor_hour(start) < opens < ceil_hour(end):
        start = opens
    return LeasePeriod.objects.create(
        node=node,
        order=order,
        slot=slot,
        amount=split_amount(order.amount, order.node_count, slot),
        currency=order.currency,
        lease_start=start,
        lease_end=end,
        held_from=floor_hour(start),
        charged_in=opens if opens >= ceil_hour(end) else None,
    )
