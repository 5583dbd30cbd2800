"""One hour's usage records -> its cost records: the pure allocation core (`billing.allocation`)
run over the records' nodes, pods and fees, its rows summed per chargeback group. Writes nothing:
metering (`billing.services`) stores what this returns, and the current hour's projection
(`billing.selectors`) shows it unsaved."""

from __future__ import annotations

import json
from dataclasses import replace
from decimal import Decimal
from itertools import chain

from django.db import connection

from billing import lease_corrections, metering
from billing.allocation import FeeHour, NodeHour, PodHour
from billing.allocation_totals import RowTotal, allocate_hour_totals
from billing.bulk_insert import Unsaved
from billing.models import CostRecord, UsageRecord
from pools.models import GpuNodePool, Team

_new_cost = Unsaved(CostRecord)

# (currency, nodes, pods, fees): what the allocation core takes for one hour in one currency.
HourInputs = tuple[str, list[NodeHour], list[PodHour], list[FeeHour]]


def cost_records_for(records: list[UsageRecord]) -> list[CostRecord]:
    """Allocate one hour's usage records with the pure core and sum its rows into unsaved cost
    records, one per (pool, charged team, namespace, labels, GPU class, billing kind, cost kind,
    component, currency): every node's split is the core's, node by node and workload by workload
    (`allocation_totals`: nodes alike split once), added exactly, so Σ amounts = Σ node costs +
    Σ fees of the records in each currency (the core's invariant) and every chargeback group gets
    the same cents as from per-node rows. Lease corrections are not allocated: each is its pool's
    team's idle cost, whole (`billing.lease_corrections`).
    """
    if not records:
        return []
    pools_by_id, teams_by_id = metering.related_by_id(records, "pool"), metering.related_by_id(records, "team")
    pools: dict[str, GpuNodePool] = {metering.ledger_pool_name(p): p for p in pools_by_id.values()}
    teams: dict[str, Team] = {t.slug: t for t in teams_by_id.values()}
    same_pairs = connection.vendor == "postgresql"
    label_keys: dict[int, object] = {}  # totals share their inputs' label dicts: one key each
    groups: dict[tuple, list] = {}
    inputs = inputs_by_currency(records, pools=pools_by_id, teams=teams_by_id)
    totals = (t for currency, n, p, f in inputs for t in allocate_hour_totals(n, p, f, currency=currency))
    names, slugs = {pool.pk: name for name, pool in pools.items()}, {pk: t.slug for pk, t in teams_by_id.items()}
    corrections = (RowTotal(row, row.amount, Decimal(0)) for row in lease_corrections.allocation_rows(records, pool_names=names, team_slugs=slugs))
    for total in chain(totals, corrections):
        row = total.first
        labels_key = label_keys.get(id(row.labels))
        if labels_key is None:
            labels_key = label_keys[id(row.labels)] = label_group_key(row.labels, same_pairs)
        key = (row.pool, row.team, row.namespace, labels_key, row.gpu_class, row.billing_kind, row.cost_kind, row.component, row.currency)
        group = groups.get(key)
        if group is None:
            groups[key] = [total.amount, total.gpu_hours, pools[row.pool], teams[row.team], row]
        else:
            group[0] += total.amount
            group[1] += total.gpu_hours
    make = _new_cost.with_values
    return [
        make({"pool": pool, "team": team}, {
            "id": None, "hour": row.hour, "pool_id": pool.pk, "team_id": team.pk, "namespace": row.namespace,
            "labels": dict(row.labels), "gpu_class": row.gpu_class, "billing_kind": row.billing_kind,
            "cost_kind": row.cost_kind, "component": row.component, "gpu_hours": hours, "amount": amount,
            "currency": row.currency,
        })
        for amount, hours, pool, team, row in groups.values()
    ]  # fmt: skip


def inputs_by_currency(
    records: list[UsageRecord], *, pools: dict[int, GpuNodePool] | None = None, teams: dict[int, Team] | None = None
) -> list[HourInputs]:
    """One hour's allocation inputs (`metering.allocation_inputs`) per currency charged, never
    converted: for each currency its fees, and every node with its cost where it is in that
    currency and 0 elsewhere, so that a fee priced in one currency is still split over all its
    pool's pods (by GPU-hours) while a node priced in another is split in its own. Metering and
    the node-level FOCUS export allocate the same way. `pools` and `teams`: the records' by id,
    when the caller has them."""
    nodes, pods, fees = metering.allocation_inputs(records, pools=pools, teams=teams)
    currencies = sorted({r.currency for r in records})
    if len(currencies) == 1:
        return [(currencies[0], nodes, pods, fees)]
    node_currency = {name: r.currency for r in records if r.kind == UsageRecord.Kind.NODE for name in r.nodes_billed}
    pool_names = {pk: metering.ledger_pool_name(pool) for pk, pool in (pools or metering.related_by_id(records, "pool")).items()}
    fee_currency = {(pool_names[r.pool_id], r.kind): r.currency for r in records if r.kind not in (UsageRecord.Kind.NODE, UsageRecord.Kind.POD)}
    return [
        (
            currency,
            [n if node_currency[n.node] == currency else replace(n, cost=Decimal(0), list_price=None) for n in nodes],
            pods,
            [f for f in fees if fee_currency[(f.pool, f.kind)] == currency],
        )
        for currency in currencies
    ]


def label_group_key(labels, same_pairs: bool):
    """What makes two label sets one rollup group: on PostgreSQL (jsonb) the same pairs in any
    order, elsewhere the same JSON text (same pairs, same order)."""
    if not labels:
        return ()
    try:
        return frozenset(labels.items()) if same_pairs else tuple(labels.items())
    except TypeError:  # a nested value
        return json.dumps(labels, sort_keys=same_pairs)
