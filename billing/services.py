"""Billing writes: metering an hour and the daily cost rollups (design §6); budgets are in
`billing.budgets`.

Metering claims the hour by inserting its `MeterRun` row in the same transaction that writes
the hour's usage and cost rows. The row is unique per hour, so a rerun or a second worker finds
the hour taken (the insert fails, or on PostgreSQL waits for the first transaction and then
fails) and writes nothing: an hour is counted exactly once. A failure rolls the claim back
with the rows, so the hour is metered again on the next run.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db import IntegrityError, connection, transaction
from django.db.models import Sum, TextField
from django.db.models.functions import Cast

from billing import metering
from billing.bulk_insert import Unsaved, bulk_insert, inserting
from billing.costing import cost_records_for, label_group_key
from billing.hours import HOUR, last_complete_hour
from billing.label_sets import label_sets_store
from billing.models import CostDay, CostDayLock, CostRecord, MeterRun, UsageRecord
from pools.claims import WHOLE, Part, collector_paused

log = logging.getLogger("ebcloud.billing")

MAX_CATCH_UP_HOURS = 24 * 7


@dataclass
class MeterResult:
    hour: datetime
    metered: bool
    usage_records: int = 0
    cost_records: int = 0
    total: Decimal = Decimal(0)
    skipped: list[str] = field(default_factory=list)
    complete: bool = False  # this call metered the hour's last part: the hour is whole now
    part: Part = WHOLE
    error: str = ""  # `meter_pending`: why this part failed (nothing of it was written)

    @property
    def label(self) -> str:
        """The hour (and part) as the `meter` command and the task's results name it."""
        label = f"{self.hour:%Y-%m-%dT%H:00Z}"
        return label if self.part.count == 1 else f"{label} part {self.part.index + 1} of {self.part.count}"


def meter_hour(*, hour: datetime, part: Part = WHOLE, now: datetime | None = None) -> MeterResult:
    """Meter one complete hour, or one part of it (its pools whose id is `part.index` modulo
    `part.count`): usage records, then their allocation as cost records.

    Idempotent: a second call for the same hour and part (from any worker) writes nothing. An
    hour is split the same way by every worker: a part of another split of a started hour is
    refused (`ValueError`), since its pools would be metered twice or not at all.

    `now` is the caller's clock (the task's, the command's): an hour not over at `now` (after
    `last_complete_hour(now)`) is refused (`ValueError`), since an hour is metered once and a
    pod that started later in it would never be charged. Without `now` the caller vouches that
    the hour is over (a replay of past hours: tests, benchmarks).
    """
    hour = metering._check_hour(hour)
    if now is not None and hour > last_complete_hour(now):
        raise ValueError(
            f"{hour:%Y-%m-%dT%H:00Z} is not over yet: the last complete hour is {last_complete_hour(now):%Y-%m-%dT%H:00Z}"
        )
    taken = dict(MeterRun.objects.filter(hour=hour).values_list("part", "parts"))
    if any(parts != part.count for parts in taken.values()):
        raise ValueError(f"{hour:%Y-%m-%dT%H:00Z} is being metered in {max(taken.values())} parts, not {part.count}")
    if part.index in taken:
        return MeterResult(hour=hour, metered=False, part=part)
    with collector_paused():
        # Collected before the claim, so the hour's new label sets are committed before its
        # transaction (`label_sets_store`). A worker that then loses the claim has written only
        # what any hour may name or read again: label sets, and the cloud's resource samples.
        collected = metering.usage_collect(hour=hour, part=part)
        label_sets_store(collected.label_sets)
        try:
            with transaction.atomic():
                run = MeterRun.objects.create(hour=hour, part=part.index, parts=part.count)
                return _meter_claimed(run, part, collected)
        except IntegrityError:
            if MeterRun.objects.filter(hour=hour, part=part.index).exists():
                return MeterResult(hour=hour, metered=False, part=part)
            raise


def _meter_claimed(run: MeterRun, part: Part, collected: metering.Collected) -> MeterResult:
    records = collected.records
    with inserting(UsageRecord, records):  # COPY on PostgreSQL, which stores them while the hour is allocated
        costs = cost_records_for(records)
    bulk_insert(CostRecord, costs)
    _foreign_keys_check_now()
    cost_day_add(day=run.hour.date(), costs=costs, part=part)
    total = sum((c.amount for c in costs), Decimal(0))
    run.node_records = sum(1 for r in records if r.kind == UsageRecord.Kind.NODE)
    run.pod_records = sum(1 for r in records if r.kind == UsageRecord.Kind.POD)
    run.cost_records = len(costs)
    run.total = total
    run.save(update_fields=["node_records", "pod_records", "cost_records", "total"])
    complete = _hour_complete(run.hour, part)
    return MeterResult(
        hour=run.hour,
        metered=True,
        usage_records=len(records),
        cost_records=len(costs),
        total=total,
        skipped=collected.skipped,
        complete=complete,
        part=part,
    )


# Transaction-scoped advisory locks (PostgreSQL's two-key form; the scheduler's one-key lock is
# another key space): a day's rollup (shared by the parts adding to it, exclusive for a rebuild),
# one part's pools in a day's rollup, and the count of an hour's parts.
ROLLUP_DAY_LOCK = 0x0C057DA0
ROLLUP_PART_LOCK = 0x0C057DA1
HOUR_PARTS_LOCK = 0x0C057DA2


def _hour_complete(hour: datetime, part: Part) -> bool:
    """Whether the hour's parts are all metered with this one, counted under the hour's lock
    (held to the commit): each part reads the parts committed before it, so exactly one, the
    last, sees them all. The lock is taken last, so a part waits for another's commit only,
    not for its rollup. SQLite has one writer: the transactions are one after the other."""
    if part.count > 1 and connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [HOUR_PARTS_LOCK, int(hour.timestamp()) // 3600])
    return MeterRun.objects.filter(hour=hour).count() == part.count


def _day_locked(day, part: Part | None = None) -> None:
    """Lock the day's rollup until the commit: for adding the `part`'s pools to it, shared by
    the other parts of the split (their pools' rows are others) and exclusive for the same part
    (its other hours of the day read and write the same rows); with no `part`, the whole day
    (a rebuild), exclusive against every adder. On PostgreSQL advisory locks, so that no row has
    to exist first (creating one would make the day's first parts wait for each other's
    commit); on SQLite, which has one writer, the day's lock row."""
    if connection.vendor != "postgresql":
        CostDayLock.objects.get_or_create(day=day)
        CostDayLock.objects.select_for_update().get(day=day)
        return
    with connection.cursor() as cursor:
        if part is None:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [ROLLUP_DAY_LOCK, day.toordinal()])
            return
        cursor.execute("SELECT pg_advisory_xact_lock_shared(%s, %s)", [ROLLUP_DAY_LOCK, day.toordinal()])
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [ROLLUP_PART_LOCK, day.toordinal() * 1000 + part.index % 1000])


def _foreign_keys_check_now() -> None:
    """Check the foreign keys of the rows written so far now, not at the commit: the commit
    comes after the count of the hour's parts (`_hour_complete`), whose lock the other parts of
    the hour wait for (PostgreSQL applies `SET CONSTRAINTS ALL IMMEDIATE` to the pending checks
    at once; the rest of the transaction checks as it goes). The ledgers' own references are
    checked per statement (migrations 0011 and 0014); what is left are the pools' resource
    samples. SQLite checks at the commit, where writers are serialised anyway."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")


# Unsaved `CostRecord`s and `CostDay`s without `Model.__init__` (an hour of a 1,000-pool fleet
# is ~7,000 cost records; its day ~5,000 rollup rows, rewritten each hour).
_new_cost_day = Unsaved(CostDay)


def cost_day_add(*, day, costs: list[CostRecord], part: Part = WHOLE) -> int:
    """Add one hour's (unsaved or saved) cost records of the `part`'s pools to that day's
    `CostDay` rollup; returns the day's row count (of those pools).

    The day's rows plus this hour's groups, summed exactly in Decimal, are what
    `cost_day_rebuild` would compute from all the day's records, without re-reading them (at
    1,000 pools that is ~450,000 records an hour, up to 24 times as many late in the day:
    issue 9). A group the day has already is updated in place (its amount and GPU-hours only:
    no index or foreign key to write, issue 23), a new one inserted. Runs in the caller's
    transaction, the one that claims the hour (`MeterRun`): a failed or rolled-back hour takes
    its addition with it, and a metered hour is never metered again, so an hour is added once.
    It locks the day (`_day_locked`) so that two workers metering two hours of one
    day for the same pools add one after the other, the later reading the earlier's committed
    rows, while the other parts of an hour add theirs at the same time; on PostgreSQL the
    existing rows get the hour's sums added in the database, so even pools of two splits
    (a changed `EBCLOUD_METER_PARTS`) adding at once lose nothing. Groups are keyed
    as the database groups `labels` in the rebuild (jsonb: the same pairs in any order;
    elsewhere the stored JSON text).
    """
    same_pairs = connection.vendor == "postgresql"
    groups: dict[tuple, list] = {}
    for c in costs:
        key = (c.pool_id, c.team_id, c.namespace, label_group_key(c.labels, same_pairs), c.billing_kind, c.cost_kind, c.currency)
        group = groups.get(key)
        if group is None:
            groups[key] = [c.amount, c.gpu_hours, c.labels]
        else:
            group[0] += c.amount
            group[1] += c.gpu_hours
    with transaction.atomic():
        _day_locked(day, part)
        existing = part.of(CostDay.objects.filter(day=day))
        if not groups:
            return existing.count()
        fields = ("pk", "pool_id", "team_id", "namespace", "labels_text", "billing_kind", "cost_kind", "currency", "amount", "gpu_hours")
        existing = existing.annotate(labels_text=Cast("labels", TextField())).values_list(*fields).order_by("pk")
        labels_keys: dict[str, object] = {}  # the day's rows share their label sets: each text decoded once
        updates, rows = [], 0
        for pk, pool_id, team_id, namespace, text, billing_kind, cost_kind, currency, amount, hours in existing:
            rows += 1
            labels_key = labels_keys.get(text)
            if labels_key is None:
                labels_key = labels_keys[text] = label_group_key(json.loads(text), same_pairs)
            group = groups.pop((pool_id, team_id, namespace, labels_key, billing_kind, cost_kind, currency), None)
            if group is not None:  # exact Decimal sums: the order of the additions does not matter
                updates.append((pk, amount, hours or 0, group[0], group[1]))
        _cost_days_update(updates)
        bulk_insert(CostDay, [
            _new_cost_day(
                day=day, pool_id=pool_id, team_id=team_id, namespace=namespace, labels=labels,
                billing_kind=billing_kind, cost_kind=cost_kind, currency=currency, amount=amount,
                gpu_hours=hours or 0,
            )
            for (pool_id, team_id, namespace, _, billing_kind, cost_kind, currency), (amount, hours, labels) in groups.items()
        ])  # fmt: skip
        return rows + len(groups)


def _cost_days_update(updates: list[tuple[int, Decimal, Decimal, Decimal, Decimal]]) -> None:
    """Add (pk, amount read, GPU-hours read, amount added, GPU-hours added) to existing `CostDay`
    rows in one statement: in the database on PostgreSQL (exact numeric), what was read plus
    what is added elsewhere (SQLite has one writer, and its arithmetic on decimals is float)."""
    if not updates:
        return
    table = CostDay._meta.db_table
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            pks, _, _, amounts, hours = zip(*updates, strict=True)
            cursor.execute(
                f"UPDATE {table} AS d SET amount = d.amount + u.amount, gpu_hours = d.gpu_hours + u.hours "
                "FROM unnest(%s::bigint[], %s::numeric[], %s::numeric[]) AS u(id, amount, hours) WHERE d.id = u.id",
                [list(pks), list(amounts), list(hours)],
            )
        else:
            amount, gpu_hours = CostDay._meta.get_field("amount"), CostDay._meta.get_field("gpu_hours")
            cursor.executemany(
                f"UPDATE {table} SET amount = %s, gpu_hours = %s WHERE id = %s",
                [(amount.get_db_prep_save(a + da, connection), gpu_hours.get_db_prep_save(h + dh, connection), pk) for pk, a, h, da, dh in updates],
            )


def cost_day_rebuild(*, day) -> int:
    """Recompute one day's `CostDay` rollup from its cost records; returns its row count.
    Metering adds each hour with `cost_day_add`; this is the repair (a day's records changed).

    Runs in the caller's transaction, holding the day's lock (`_day_locked`), so two workers metering two
    hours of the same day rebuild it one after the other and the later sees both hours.
    """
    with transaction.atomic():
        _day_locked(day)
        start = datetime.combine(day, datetime.min.time(), tzinfo=UTC)
        groups = (
            CostRecord.objects.filter(hour__gte=start, hour__lt=start + timedelta(days=1))
            .values(
                "pool_id", "team_id", "namespace", "labels", "billing_kind", "cost_kind", "currency"
            )
            .annotate(total=Sum("amount"), hours=Sum("gpu_hours"))
            .order_by()
        )
        rows = [
            CostDay(
                day=day,
                pool_id=g["pool_id"],
                team_id=g["team_id"],
                namespace=g["namespace"],
                labels=g["labels"],
                billing_kind=g["billing_kind"],
                cost_kind=g["cost_kind"],
                currency=g["currency"],
                amount=g["total"],
                gpu_hours=g["hours"] or 0,
            )  # fmt: skip
            for g in groups.iterator(chunk_size=5000)
        ]
        CostDay.objects.filter(day=day).delete()
        bulk_insert(CostDay, rows)
    return len(rows)


def meter_pending(
    *, now: datetime, max_hours: int = MAX_CATCH_UP_HOURS, time_budget_s: float | None = None, parts: int = 1
) -> list[MeterResult]:
    """Meter every complete hour not metered yet, oldest first, at most `max_hours` back, each
    in `parts` parts one after the other (the workers' split, so that this process and they
    agree on which pools each part holds).

    What the hourly schedule runs: a missed tick (worker down) is caught up on the next one.
    With `time_budget_s` it stops starting new hours after that long (each hour commits on
    its own), so a long catch-up spreads over several runs instead of outliving the worker's
    task timeout.

    A part that fails (its data, a bug, the database) is logged and reported (`error`), and
    the later hours are metered all the same: one bad hour must not stop the ledger. Nothing
    of the failed part was written, so it is pending again and tried on every run.
    """
    started = time.monotonic()
    results = []
    for hour, missing in parts_pending(now=now, max_hours=max_hours, parts=parts):
        if time_budget_s is not None and results and time.monotonic() - started > time_budget_s:
            break
        for part in missing:
            try:
                results.append(meter_hour(hour=hour, part=part))
            except Exception as exc:  # any failure: the later hours go on
                log.exception("metering %s part %d of %d failed; the later hours go on", hour.isoformat(), part.index + 1, part.count)
                results.append(MeterResult(hour=hour, metered=False, part=part, error=f"{type(exc).__name__}: {exc}"))
    return results


def parts_pending(*, now: datetime, max_hours: int = MAX_CATCH_UP_HOURS, parts: int = 1) -> list[tuple[datetime, list[Part]]]:
    """The complete hours not wholly metered, oldest first, at most `max_hours` back, each with
    its parts not metered yet (in `parts` parts; an hour started with another split keeps it)."""
    last = last_complete_hour(now)
    newest = MeterRun.objects.order_by("-hour").values_list("hour", flat=True).first()
    first = last - timedelta(hours=max_hours - 1)
    started = MeterRun.objects.filter(hour__gte=first, hour__lte=last).order_by("hour").values_list("hour", flat=True).first()
    # From the oldest metered hour in the window, every hour without a run: a catch-up killed
    # mid-way while another worker metered a later hour (`meter --once`) leaves a hole below
    # the newest run, which "start after the newest" would skip for ever.
    if started is not None:
        first = started
    elif newest is not None:
        first = max(first, newest + HOUR)
    hours = [first + i * HOUR for i in range(max(0, int((last - first) / HOUR) + 1))]
    return metering.parts_unmetered(hours, parts=parts)
