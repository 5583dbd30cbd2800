"""Where a Running pod has been: its time on a node it leaves (moved, evicted, preempted,
requeued) kept as a `PodPlacement`, so metering charges that node for it, not as idle."""

from __future__ import annotations

from django.db import connection, models
from django.db.models.functions import Coalesce

from pools.models.pods import Pod, PodPlacement


def placements_end(rows, now) -> list[PodPlacement]:
    """Keep the time these Running pods spent on their node until `now`, as they leave it (one
    INSERT): `rows` are (pod pk, node pk, `placed_at`, `started_at`) of each pod as it was on
    that node. A pod with no node or no start, or none of its time before `now`, has none."""
    placements = []
    for pod_id, node_id, placed_at, started_at in rows:
        since = placed_at or started_at
        if node_id is not None and since is not None and since < now:
            placements.append(PodPlacement(pod_id=pod_id, node_id=node_id, started_at=since, ended_at=now))
    return PodPlacement.objects.bulk_create(placements) if placements else []


def placements_end_of(rows: models.QuerySet, now) -> None:
    """`placements_end` of these Pod rows (those Running on a node), as they are about to leave
    it, in one statement whatever their number: an INSERT of a SELECT that locks them, so a
    concurrent eviction of the same pod waits and then finds it gone from its node."""
    ran = (
        rows.filter(phase=Pod.Phase.RUNNING, node__isnull=False)
        .annotate(since=Coalesce("placed_at", "started_at"), until=models.Value(now, output_field=models.DateTimeField()))
        .filter(since__lt=now)
        .values_list("pk", "node_id", "since", "until")
        .order_by()
    )
    if connection.features.has_select_for_update:
        ran = ran.select_for_update(of=("self",))
    sql, params = ran.query.sql_with_params()
    table = PodPlacement._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {table} (pod_id, node_id, started_at, ended_at) {sql}", params)
