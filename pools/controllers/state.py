"""Every pool's controller state in a fixed number of queries, and one-statement writes of what
changed (the claims of many pools at once are `pools.claims.Claims`) (issue 9: a pass over 1,000 pools
must not cost statements per pool).

The passes over all pools (`pools.controllers.lifecycle.reconcile_all`, `pools.controllers.autoscaler
.autoscale_all`) read the claims, then the rows their decisions need, with a handful of
queries whatever the number of pools and nodes. Pools where something is to be done are
claimed together (one conditional UPDATE) and go through the per-pool code path, whose
statements are those of the changes it makes. What the other pools need written (their
status, the autoscaler's history) goes out in one UPDATE, skipping any pool that a worker
claimed since the claims were read: its worker writes what it did.
"""

from __future__ import annotations

import json
from collections import defaultdict

from django.db import connection, models
from django.db.models import Count, Q, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from pools.claims import ClaimsSeen
from pools.core import lifecycle as rules
from pools.models import GpuNodePool, Node, PoolEvent, PoolOrder
from pools.models.cloud import PoolClaim


def snapshots_load(pools: list[GpuNodePool]) -> dict[int, rules.PoolSnapshot]:
    """Plain rows of these pools: live nodes, orders with their node tallies, and which slow
    nodes were already reported. Four queries, whatever the number of pools and nodes."""
    ids = [p.pk for p in pools]
    nodes: dict[int, list[rules.NodeRow]] = defaultdict(list)
    fields = (
        "pool_id", "pk", "name", "phase", "billing", "release_reason", "last_error", "provider_id", "created_at",
        "step_due_at", "lease_end", "lease_notified_at", "last_heartbeat", "labels_text", "taints_text", "gpu_count", "cluster_fault",
        "cluster_fault_since",
    )  # fmt: skip
    # A pool's nodes share their labels and taints: each distinct text is decoded once (20,000
    # nodes are ~40,000 JSON texts, a few thousand distinct), and the rows share the values.
    label_sets: dict[str | None, object] = {None: None}
    taint_lists: dict[str | None, tuple] = {None: ()}
    rows = Node.objects.filter(pool_id__in=ids).exclude(phase=Node.Phase.TERMINATED).order_by("name")
    texts = {"labels_text": Cast("labels", TextField()), "taints_text": Cast("taints", TextField())}
    for row in rows.annotate(**texts).values_list(*fields):
        pool_id, pk, name, phase, billing, rr, error, provider_id, created, due, lease_end, notified, heartbeat, labels, taints, gpus, fault, since = row
        if labels not in label_sets:
            label_sets[labels] = json.loads(labels)
        if taints not in taint_lists:
            taint_lists[taints] = tuple(json.loads(taints) or ())
        nodes[pool_id].append(
            rules.NodeRow(
                pk, name, phase, billing, rr, error, provider_id, created, due, lease_end, notified is not None, heartbeat,
                label_sets[labels], taint_lists[taints], gpus, fault, not fault or since is not None,
            )  # fmt: skip
        )
    tallies = {
        row["order_id"]: (row["holding"], row["retired"])
        for row in Node.objects.filter(pool_id__in=ids, order__isnull=False)
        .values("order_id")
        .annotate(
            holding=Count("pk", filter=Q(release_reason__in=rules.RETIRING_REASONS) | (~Q(phase=Node.Phase.TERMINATED) & Q(release_reason=""))),
            retired=Count("pk", filter=Q(release_reason__in=rules.RETIRING_REASONS)),
        )
        .order_by()
    }
    orders: dict[int, list[rules.OrderRow]] = defaultdict(list)
    for pool_id, pk, kind, status, count, reason in PoolOrder.objects.filter(pool_id__in=ids).order_by("pk").values_list(
        "pool_id", "pk", "kind", "status", "node_count", "reason"
    ):
        holding, retired = tallies.get(pk, (0, 0))
        orders[pool_id].append(rules.OrderRow(pk, kind, status, count, reason, holding, retired))
    slow: dict[int, set[int]] = defaultdict(set)
    for pool_id, node_id in PoolEvent.objects.filter(pool_id__in=ids, reason="SlowCapacity", node__isnull=False).values_list("pool_id", "node_id").distinct():
        slow[pool_id].add(node_id)
    return {
        p.pk: rules.PoolSnapshot(
            pk=p.pk, phase=p.phase, min_nodes=p.min_nodes, max_nodes=p.max_nodes, preemptible=p.preemptible,
            nodes=tuple(nodes[p.pk]), orders=tuple(orders[p.pk]), slow_reported=frozenset(slow[p.pk]),
            conditions=tuple(p.conditions or ()), node_counts=p.node_counts or {}, pending_reason=p.pending_reason,
            observed_generation=p.observed_generation, generation=p.generation,
        )  # fmt: skip
        for p in pools
    }


def statuses_write(changes: list[tuple[GpuNodePool, rules.PoolStatus]], *, seen: ClaimsSeen) -> list[tuple[GpuNodePool, rules.PoolStatus]]:
    """Write the new status of pools where nothing else happened, in one UPDATE. A pool deleted,
    being deleted or claimed by a worker since `seen` keeps its own: a delete requested during
    the pass wins, and the worker acting on the pool writes the status of what it did. Returns
    the pools that became Ready (their `PoolReady` event is the caller's)."""
    if not changes:
        return []
    pools_update(
        {pool.pk: {**status.columns(), "observed_generation": pool.generation} for pool, status in changes},
        seen=seen,
    )
    became_ready = [pool.pk for pool, status in changes if status.ready_news(pool.name, pool.phase)]
    if not became_ready:
        return []
    ready = set(
        GpuNodePool.objects.filter(pk__in=became_ready, phase=GpuNodePool.Phase.READY, deleted_at__isnull=True).values_list("pk", flat=True)
    )
    return [(pool, status) for pool, status in changes if pool.pk in ready]


def pools_update(rows: dict[int, dict[str, object]], *, seen: ClaimsSeen) -> int:
    """Set different values on many pools with one statement: `UPDATE ... FROM (VALUES ...)`
    (Django's `bulk_update` builds a CASE per field and pool, which takes seconds at 1,000
    pools). Only live pools not being deleted are written, and only if no worker holds or took
    their claim since `seen` (the claim's version is unchanged). Every row must name the same
    fields. Returns the number of pools written."""
    if not rows:
        return 0
    names = list(next(iter(rows.values())))
    per_statement = (connection.features.max_query_params or 60_000) // (len(names) + 2) - 1  # SQLite: 999 parameters
    if len(rows) > per_statement:
        items = list(rows.items())
        return sum(pools_update(dict(items[i : i + per_statement]), seen=seen) for i in range(0, len(items), per_statement))
    fields = [GpuNodePool._meta.get_field(name) for name in names]
    qn = connection.ops.quote_name
    table, claims = qn(GpuNodePool._meta.db_table), qn(PoolClaim._meta.db_table)
    cast = "CAST(v.{} AS jsonb)" if connection.vendor == "postgresql" else "v.{}"
    assign = ", ".join(f"{qn(f.column)} = " + (cast.format(f"c{i}") if isinstance(f, models.JSONField) else f"v.c{i}") for i, f in enumerate(fields))
    row = "(" + ", ".join(["%s"] * (len(fields) + 2)) + ")"
    params: list = []
    for pk, values in rows.items():
        params += [pk, seen.versions.get(pk, -1)]
        for f in fields:
            value = values[f.name]
            params.append(json.dumps(value) if isinstance(f, models.JSONField) else f.get_db_prep_save(value, connection=connection))
    params += [GpuNodePool.Phase.DELETING, timezone.now()]
    columns = ", ".join(["id", "seen", *(f"c{i}" for i in range(len(fields)))])
    sql = (
        f"WITH v ({columns}) AS (VALUES {', '.join([row] * len(rows))}) "
        f"UPDATE {table} SET {assign} FROM v WHERE {table}.{qn('id')} = v.id AND {table}.{qn('deleted_at')} IS NULL "
        f"AND {table}.{qn('phase')} <> %s AND NOT EXISTS (SELECT 1 FROM {claims} c WHERE c.{qn('pool_id')} = v.id "
        f"AND (c.{qn('claimed_until')} > %s OR c.{qn('version')} <> v.seen))"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount
