"""One hour's usage records -> its cost records: the pure allocation core (`billing.allocation`)
run over the records' nodes, pods and fees, its rows summed per chargeback group. Writes nothing:
metering (`billing.services`) stores what this returns, and the current hour's projection
(`billing.selectors`) shows it unsaved."""

from __future__ import annotations

import json

from django.db import connection

from billing import metering
from billing.allocation_totals import allocate_hour_totals
from billing.bulk_insert import Unsaved
from billing.models import CostRecord, UsageRecord
from pools.models import GpuNodePool, Team

_new_cost = Unsaved(CostRecord)


def cost_records_for(records: list[UsageRecord]) -> list[CostRecord]:
    """Allocate one hour's usage records with the pure core and sum its rows into unsaved cost
    records, one per (pool, charged team, namespace, labels, GPU class, billing kind, cost kind,
    component): every node's split is the core's, node by node and workload by workload
    (`allocation_totals`: nodes alike split once), added exactly, so Σ amounts = Σ node costs +
    Σ fees of the records (the core's invariant) and every chargeback group gets the same cents
    as from per-node rows.
    """
    if not records:
        return []
    nodes, pods, fees = metering.allocation_inputs(records)
    currencies = {r.currency for r in records}
    if len(currencies) != 1:
        raise ValueError(f"one hour's usage mixes currencies {sorted(currencies)}")
    pools: dict[str, GpuNodePool] = {metering.ledger_pool_name(p): p for p in metering.related_by_id(records, "pool").values()}
    teams: dict[str, Team] = {t.slug: t for t in metering.related_by_id(records, "team").values()}
    same_pairs = connection.vendor == "postgresql"
    label_keys: dict[int, object] = {}  # totals share their inputs' label dicts: one key each
    groups: dict[tuple, list] = {}
    for total in allocate_hour_totals(nodes, pods, fees, currency=currencies.pop()):
        row = total.first
        labels_key = label_keys.get(id(row.labels))
        if labels_key is None:
            labels_key = label_keys[id(row.labels)] = label_group_key(row.labels, same_pairs)
        key = (row.pool, row.team, row.namespace, labels_key, row.gpu_class, row.billing_kind, row.cost_kind, row.component)
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


def label_group_key(labels, same_pairs: bool):
    """What makes two label sets one rollup group: on PostgreSQL (jsonb) the same pairs in any
    order, elsewhere the same JSON text (same pairs, same order)."""
    if not labels:
        return ()
    try:
        return frozenset(labels.items()) if same_pairs else tuple(labels.items())
    except TypeError:  # a nested value
        return json.dumps(labels, sort_keys=same_pairs)
