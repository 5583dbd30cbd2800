"""Lease periods recorded after metering had closed every hour of their lease, charged whole in
one later hour as a correction line (seed C1; issue 20).

Why: metering takes each complete hour once and never restates it (`billing.services.meter_hour`),
and the ledger spreads a period recorded late over its lease's hours still open
(`billing.lease_ledger.hour_open`). A payment settled only after its whole lease was metered (a
worker dead for the whole lease; a renewal, or a released slot's holder, whose hours are all
closed) has no such hour: the ledger marks the period `charged_in` the first open hour instead,
and metering charges its whole share there. The hour is claimed once (`MeterRun`), so the share
is charged once, however many workers meter it; what was debited is charged back to the cent.

How it is charged: one usage record per period (`UsageRecord.Kind.CORRECTION`, its resource the
period's FOCUS commitment id) and from it one allocation row, idle capacity of the pool's team on
the period's node, with the node's labels, GPU class and billing kind, component `correction`.
Not split over the pods of the hour it is charged in: they did not use the hours it pays for,
which are past (whoever ran pods on the node then was charged nothing for them). So chargeback
groups it like any idle cost (charged team, project, GPU class; no namespace), the detail CSV
names its component, and the FOCUS exports bill the lease as a purchase in that hour and
amortise it there, as the commitment's unused part (`billing.focus_commitments`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from decimal import Decimal

from billing.allocation import CORRECTION, IDLE, AllocationRow, effective_labels
from billing.bulk_insert import Unsaved
from billing.hours import HOUR, ceil_hour, floor_hour
from billing.label_sets import LabelSets
from billing.models import LeasePeriod, UsageRecord
from pools.claims import Part

KIND = UsageRecord.Kind.CORRECTION  # "correction": a correction record's kind is its cost rows' component
_new_usage = Unsaved(UsageRecord)


def commitment_id(period: LeasePeriod, node_name: str) -> str:
    """The FOCUS commitment a ledger period's holder has (`billing.focus_commitments`): its
    order, slot, the hour its lease (or its spread) starts in, and the node; also the resource
    of its correction record, which names the lease it pays for."""
    return f"lease/order-{period.order_id}/slot-{period.slot}/{floor_hour(period.lease_start):%Y%m%dT%H}/{node_name}"


def correction_records(*, hour: datetime, part: Part, label_sets: LabelSets) -> list[UsageRecord]:
    """Unsaved usage records of the periods charged in the hour (of the part's pools), one each
    (one query): its whole share, the node-hours of the lease it pays for, the node's labels
    (their sets added to `label_sets`, stored by the caller)."""
    periods = (
        part.of(LeasePeriod.objects.filter(charged_in=hour), "node__pool_id")
        .select_related("node__pool__team", "node__pool__gpu_model", "node__pool__zone")
        .order_by("node__name", "lease_start", "pk")
    )
    records, named = [], set()
    for period in periods:
        node = period.node
        pool = node.pool
        resource = commitment_id(period, node.name)
        if resource in named:  # two periods alike (never written so): each still its own record
            resource = f"{resource}#{period.pk}"
        named.add(resource)
        label_set = label_sets.of(effective_labels(pool.labels, node.labels, None))
        hours = max(0, (ceil_hour(period.lease_end) - floor_hour(period.lease_start)) // HOUR)
        records.append(
            _new_usage(
                hour=hour, kind=KIND, resource=resource, pool=pool, team=pool.team, node_name=node.name,
                billing_kind=node.billing, gpu_class=pool.gpu_model.name, region=pool.zone.name, gpu_count=node.gpu_count,
                quantity=Decimal(hours), amount=period.amount, currency=period.currency, label_set=label_set,
                labels=label_set.labels,
            )
        )  # fmt: skip
    return records


def allocation_rows(records: Iterable[UsageRecord], *, pool_names: Mapping[int, str], team_slugs: Mapping[int, str]) -> list[AllocationRow]:
    """The records' corrections as allocation rows (the others are left out): each the pool's
    team's idle capacity on the period's node, whole. `pool_names`: the ledger's name of each
    pool by id (`metering.ledger_pool_name`), `team_slugs` each team's slug by id."""
    return [
        AllocationRow(
            hour=r.hour, pool=pool_names[r.pool_id], team=team_slugs[r.team_id], namespace="", pod="", node=r.node_name,
            labels=r.labels, gpu_class=r.gpu_class, billing_kind=r.billing_kind, cost_kind=IDLE, component=CORRECTION,
            amount=Decimal(r.amount), currency=r.currency,
        )  # fmt: skip
        for r in records
        if r.kind == KIND
    ]
