"""Billing writes: metering an hour, syncing budgets, firing budget alerts (design §6).

Metering claims the hour by inserting its `MeterRun` row in the same transaction that writes
the hour's usage and cost rows. The row is unique per hour, so a rerun or a second worker finds
the hour taken (the insert fails, or on PostgreSQL waits for the first transaction and then
fails) and writes nothing: an hour is counted exactly once. A failure rolls the claim back
with the rows, so the hour is metered again on the next run.
"""

from __future__ import annotations

import gc
import json
import logging
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import IntegrityError, connection, transaction

from billing import metering
from billing.allocation import allocate_hour
from billing.bulk_insert import Unsaved, bulk_insert, inserting
from billing.models import CostDay, CostRecord, MeterRun, UsageRecord
from pools.models import GpuNodePool, Team

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


def meter_hour(*, hour: datetime) -> MeterResult:
    """Meter one complete hour: usage records, then their allocation as cost records.

    Idempotent: a second call for the same hour (from any worker) writes nothing.
    """
    hour = metering._check_hour(hour)
    if MeterRun.objects.filter(hour=hour).exists():
        return MeterResult(hour=hour, metered=False)
    try:
        with _gc_paused(), transaction.atomic():
            run = MeterRun.objects.create(hour=hour)
            return _meter_claimed(run)
    except IntegrityError:
        if MeterRun.objects.filter(hour=hour).exists():
            return MeterResult(hour=hour, metered=False)
        raise


@contextmanager
def _gc_paused():
    """Hold off Python's cyclic garbage collector while an hour is metered (issue 9).

    An hour of a 200,000-pod fleet allocates ~10^6 long-lived objects (records, their dicts,
    allocation rows) and none of them form cycles, yet every 700 allocations the collector
    runs and, as the survivors pile up, rescans them: a third of metering's CPU time. It is
    switched back on (if it was on) when the hour is done, whatever happens.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _meter_claimed(run: MeterRun) -> MeterResult:
    collected = metering.usage_collect(hour=run.hour)
    records = collected.records
    with inserting(UsageRecord, records):  # COPY on PostgreSQL, which stores them while the hour is allocated
        costs = cost_records_for(records)
    bulk_insert(CostRecord, costs)
    cost_day_add(day=run.hour.date(), costs=costs)
    total = sum((c.amount for c in costs), Decimal(0))
    run.node_records = sum(1 for r in records if r.kind == UsageRecord.Kind.NODE)
    run.pod_records = sum(1 for r in records if r.kind == UsageRecord.Kind.POD)
    run.cost_records = len(costs)
    run.total = total
    run.save(update_fields=["node_records", "pod_records", "cost_records", "total"])
    return MeterResult(
        hour=run.hour,
        metered=True,
        usage_records=len(records),
        cost_records=len(costs),
        total=total,
        skipped=collected.skipped,
    )


# Unsaved `CostRecord`s and `CostDay`s without `Model.__init__` (an hour of a 1,000-pool fleet
# is ~7,000 cost records; its day ~5,000 rollup rows, rewritten each hour).
_new_cost = Unsaved(CostRecord)
_new_cost_day = Unsaved(CostDay)


def cost_records_for(records: list[UsageRecord]) -> list[CostRecord]:
    """Allocate one hour's usage records with the pure core and sum its rows into unsaved cost
    records, one per (pool, charged team, namespace, labels, GPU class, billing kind, cost kind,
    component): every node's split is still computed node by node and workload by workload,
    then added exactly, so Σ amounts = Σ node costs + Σ fees of the records (the core's
    invariant) and every chargeback group gets the same cents as from per-node rows.
    """
    if not records:
        return []
    nodes, pods, fees = metering.allocation_inputs(records)
    currencies = {r.currency for r in records}
    if len(currencies) != 1:
        raise ValueError(f"one hour's usage mixes currencies {sorted(currencies)}")
    currency = currencies.pop()
    pools: dict[str, GpuNodePool] = {}
    owners: dict[str, Team] = {}
    pod_teams: dict[tuple[str, str], Team] = {}
    for r in records:
        pool = r.pool
        pools[pool.name] = pool
        if r.kind == UsageRecord.Kind.POD:
            pod_teams[(r.namespace, r.pod_name)] = r.team
        else:
            owners[pool.name] = r.team
    same_pairs = connection.vendor == "postgresql"
    label_keys: dict[int, object] = {}  # rows share their inputs' label dicts: one key each
    groups: dict[tuple, list] = {}
    for row in allocate_hour(nodes, pods, fees, currency=currency):
        labels_key = label_keys.get(id(row.labels))
        if labels_key is None:
            labels_key = label_keys[id(row.labels)] = _labels_key(row.labels, same_pairs)
        pool = pools[row.pool]
        team = pod_teams[(row.namespace, row.pod)] if row.pod else owners.get(row.pool, pool.team)
        key = (row.pool, team.slug, row.namespace, labels_key, row.gpu_class, row.billing_kind, row.cost_kind, row.component)
        group = groups.get(key)
        if group is None:
            groups[key] = [row.amount, row.gpu_hours, pool, team, row]
        else:
            group[0] += row.amount
            group[1] += row.gpu_hours
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


def cost_day_add(*, day, costs: list[CostRecord]) -> int:
    """Add one hour's (unsaved or saved) cost records to that day's `CostDay` rollup; returns
    the day's row count.

    The day's rows plus this hour's groups, summed exactly in Decimal, are what
    `cost_day_rebuild` would compute from all the day's records, without re-reading them (at
    1,000 pools that is ~450,000 records an hour, up to 24 times as many late in the day:
    issue 9). Runs in the caller's transaction, the one that claims the hour (`MeterRun`): a
    failed or rolled-back hour takes its addition with it, and a metered hour is never metered
    again, so an hour is added once. It holds the day's lock row like the rebuild, so two
    workers metering two hours of one day add one after the other, the later reading the
    earlier's committed rows. Groups are keyed as the database groups `labels` in the rebuild
    (jsonb: the same pairs in any order; elsewhere the stored JSON text).
    """
    from billing.models import CostDayLock

    same_pairs = connection.vendor == "postgresql"
    groups: dict[tuple, list] = {}
    for c in costs:
        key = (c.pool_id, c.team_id, c.namespace, _labels_key(c.labels, same_pairs), c.billing_kind, c.cost_kind, c.currency)
        group = groups.get(key)
        if group is None:
            groups[key] = [c.amount, c.gpu_hours, c.labels]
        else:
            group[0] += c.amount
            group[1] += c.gpu_hours
    with transaction.atomic():
        CostDayLock.objects.get_or_create(day=day)
        CostDayLock.objects.select_for_update().get(day=day)
        existing = CostDay.objects.filter(day=day)
        if groups:
            fields = ("pool_id", "team_id", "namespace", "labels", "billing_kind", "cost_kind", "currency", "amount", "gpu_hours")
            for pool_id, team_id, namespace, labels, billing_kind, cost_kind, currency, amount, hours in existing.values_list(*fields).order_by("pk"):
                key = (pool_id, team_id, namespace, _labels_key(labels, same_pairs), billing_kind, cost_kind, currency)
                group = groups.get(key)
                if group is None:
                    groups[key] = [amount, hours, labels]
                else:  # exact Decimal sums: the order of the additions does not matter
                    group[0] += amount
                    group[1] += hours
            existing.delete()
            bulk_insert(CostDay, [
                _new_cost_day(
                    day=day, pool_id=pool_id, team_id=team_id, namespace=namespace, labels=labels,
                    billing_kind=billing_kind, cost_kind=cost_kind, currency=currency, amount=amount,
                    gpu_hours=hours or 0,
                )
                for (pool_id, team_id, namespace, _, billing_kind, cost_kind, currency), (amount, hours, labels) in groups.items()
            ])  # fmt: skip
        return existing.count() if not groups else len(groups)


def _labels_key(labels, same_pairs: bool):
    """What makes two label sets one rollup group: on PostgreSQL (jsonb) the same pairs in any
    order, elsewhere the same JSON text (same pairs, same order)."""
    if not labels:
        return ()
    try:
        return frozenset(labels.items()) if same_pairs else tuple(labels.items())
    except TypeError:  # a nested value
        return json.dumps(labels, sort_keys=same_pairs)


def cost_day_rebuild(*, day) -> int:
    """Recompute one day's `CostDay` rollup from its cost records; returns its row count.
    Metering adds each hour with `cost_day_add`; this is the repair (a day's records changed).

    Runs in the caller's transaction, holding the day's lock row, so two workers metering two
    hours of the same day rebuild it one after the other and the later sees both hours.
    """
    from datetime import UTC, time

    from django.db.models import Sum

    from billing.models import CostDayLock

    with transaction.atomic():
        CostDayLock.objects.get_or_create(day=day)
        CostDayLock.objects.select_for_update().get(day=day)
        start = datetime.combine(day, time(), tzinfo=UTC)
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
    *, now: datetime, max_hours: int = MAX_CATCH_UP_HOURS, time_budget_s: float | None = None
) -> list[MeterResult]:
    """Meter every complete hour not metered yet, oldest first, at most `max_hours` back.

    What the hourly schedule runs: a missed tick (worker down) is caught up on the next one.
    With `time_budget_s` it stops starting new hours after that long (each hour commits on
    its own), so a long catch-up spreads over several runs instead of outliving the worker's
    task timeout.
    """
    import time

    started = time.monotonic()
    last = metering.last_complete_hour(now)
    newest = MeterRun.objects.order_by("-hour").values_list("hour", flat=True).first()
    first = last - timedelta(hours=max_hours - 1)
    # From the oldest metered hour in the window, every hour without a run: a catch-up killed
    # mid-way while another worker metered a later hour (`meter --once`) leaves a hole below
    # the newest run, which "start after the newest" would skip for ever.
    done = set(MeterRun.objects.filter(hour__gte=first, hour__lte=last).values_list("hour", flat=True))
    if done:
        first = min(done)
    elif newest is not None:
        first = max(first, newest + metering.HOUR)
    results = []
    hour = first
    while hour <= last:
        if time_budget_s is not None and results and time.monotonic() - started > time_budget_s:
            break
        if hour not in done:
            results.append(meter_hour(hour=hour))
        hour += metering.HOUR
    return results


# --------------------------------------------------------------------------- budgets

WEBHOOK_ATTEMPTS = 3
WEBHOOK_BACKOFF_S = 1.0
WEBHOOK_TIMEOUT_S = 5.0
WEBHOOK_TRANSPORT = None  # an httpx transport; tests put a mock here


def budgets_sync() -> int:
    """Make every live pool's Budget match its `spec.budget` (added, changed or removed)."""
    from billing.models import Budget

    seen = []
    for pool in GpuNodePool.objects.active().select_related("team"):
        spec = (pool.document or {}).get("spec", {}).get("budget")
        if not spec or "monthly" not in spec:
            continue
        Budget.objects.update_or_create(
            pool=pool,
            defaults={
                "team": pool.team,
                "monthly_amount": Decimal(str(spec["monthly"])),
                "currency": spec.get("currency", "CNY"),
                "thresholds": sorted({int(t) for t in spec.get("thresholds", [80, 100])}),
            },
        )
        seen.append(pool.pk)
    Budget.objects.filter(pool__isnull=False).exclude(pool_id__in=seen).delete()
    return len(seen)


def budget_team_set(
    *, user, team: Team, monthly_amount: Decimal, currency: str = "CNY", thresholds=(80, 100)
):
    """A team-wide monthly budget (platform admins only)."""
    from billing.models import Budget
    from pools import roles
    from pools.errors import ValidationError

    if not roles.is_admin(user):
        from django.core.exceptions import PermissionDenied

        raise PermissionDenied("only platform admins set team budgets")
    if monthly_amount <= 0:
        raise ValidationError("must be positive", field="monthly")
    budget, _ = Budget.objects.update_or_create(
        team=team, pool=None,
        defaults={"monthly_amount": monthly_amount, "currency": currency, "thresholds": sorted(set(thresholds))},
    )  # fmt: skip
    return budget


def budgets_evaluate(*, now: datetime) -> list:
    """Fire each crossed threshold once per period, on actual spend and on the forecast.

    The alert row is the claim: `BudgetAlert` is unique per (budget, period, threshold, basis),
    so whichever worker inserts it first notifies, and every other one finds it taken.
    """
    from billing import selectors
    from billing.models import Budget, BudgetAlert

    budgets_sync()
    fired = []
    statuses = selectors.budget_statuses_of(Budget.objects.select_related("pool", "team"), now=now)
    for status in statuses:
        budget = status.budget
        for threshold in sorted(budget.thresholds or [80, 100]):
            limit = budget.monthly_amount * threshold / 100
            for basis, amount in (("actual", status.spent), ("forecast", status.forecast)):
                if amount is not None and amount >= limit:
                    alert = _alert_fire(
                        budget=budget,
                        period=status.period,
                        threshold=threshold,
                        basis=basis,
                        amount=amount,
                        now=now,
                    )
                    if alert is not None:
                        fired.append(alert)
    # An alert whose worker died after committing it and before notifying is still due.
    due = BudgetAlert.objects.filter(period__in={s.period for s in statuses}, emailed_at=None, webhook_status="")
    for alert_id in due.values_list("pk", flat=True):
        alert_deliver(alert_id=alert_id)
    return fired


def _alert_fire(*, budget, period, threshold: int, basis: str, amount: Decimal, now: datetime):
    from billing.models import BudgetAlert
    from pools.events import WARNING, event_record

    try:
        with transaction.atomic():
            alert = BudgetAlert.objects.create(
                budget=budget, period=period, threshold=threshold, basis=basis, amount=amount,
                budget_amount=budget.monthly_amount, currency=budget.currency, created_at=now,
            )  # fmt: skip
            if budget.pool_id:
                event_record(
                    pool=budget.pool,
                    reason="BudgetThresholdReached",
                    type=WARNING,
                    message=alert_message(alert),
                    now=now,
                )
    except IntegrityError:
        return None
    transaction.on_commit(lambda: alert_deliver(alert_id=alert.pk))
    return alert


def alert_deliver(*, alert_id: int) -> bool:
    """Notify an alert not notified yet, one worker at a time: the row stays locked while it
    sends, and another worker skips it. A worker killed before this commits leaves the alert
    due, and the next evaluation sends it (at least once: a second mail only if a worker dies
    between the send and the commit)."""
    from billing.models import BudgetAlert

    with transaction.atomic():
        due = BudgetAlert.objects.select_for_update(skip_locked=True).filter(pk=alert_id, emailed_at=None, webhook_status="")
        if due.values_list("pk", flat=True).first() is None:
            return False
        alert_notify(alert_id=alert_id)
    return True


def alert_message(alert) -> str:
    budget = alert.budget
    scope = f"Pool {budget.pool.name}" if budget.pool_id else f"Team {budget.team.slug}"
    what = "spend" if alert.basis == "actual" else "forecast spend"
    return (
        f"{scope} {what} {alert.amount} {alert.currency} reached {alert.threshold}% of its monthly "
        f"budget {alert.budget_amount} {alert.currency} ({alert.period:%Y-%m})"
    )


def alert_payload(alert) -> dict:
    budget = alert.budget
    return {
        "kind": "BudgetThresholdReached",
        "pool": budget.pool.name if budget.pool_id else None,
        "team": budget.team.slug,
        "period": alert.period.strftime("%Y-%m"),
        "threshold": alert.threshold,
        "basis": alert.basis,
        "amount": str(alert.amount),
        "budget": str(alert.budget_amount),
        "currency": alert.currency,
        "message": alert_message(alert),
    }


def alert_notify(*, alert_id: int) -> None:
    """E-mail the team's leads (and EBCLOUD_BUDGET_ALERT_EMAILS); POST the webhook if set."""
    from django.conf import settings
    from django.core.mail import send_mail
    from django.utils import timezone

    from billing.models import BudgetAlert
    from pools.models import Membership

    alert = BudgetAlert.objects.select_related("budget__pool", "budget__team").get(pk=alert_id)
    recipients = list(getattr(settings, "EBCLOUD_BUDGET_ALERT_EMAILS", []))
    recipients += [
        e for e in Membership.objects.filter(team=alert.budget.team, role=Membership.Role.LEAD)
        .values_list("user__email", flat=True) if e
    ]  # fmt: skip
    updates = {}
    if recipients:
        message = alert_message(alert)
        send_mail(f"[EBCloud] {message[:120]}", message, None, sorted(set(recipients)))
        updates["emailed_at"] = timezone.now()
    url = getattr(settings, "EBCLOUD_BUDGET_WEBHOOK_URL", "")
    if url:
        updates["webhook_status"] = webhook_post(url=url, payload=alert_payload(alert))[:60]
    if updates:
        BudgetAlert.objects.filter(pk=alert.pk).update(**updates)


def webhook_post(
    *, url: str, payload: dict, attempts: int | None = None, backoff_s: float | None = None
) -> str:
    """POST JSON, retrying transport errors, 429 and 5xx with exponential backoff."""
    import time

    import httpx

    attempts = attempts or WEBHOOK_ATTEMPTS
    backoff_s = WEBHOOK_BACKOFF_S if backoff_s is None else backoff_s
    last = ""
    with httpx.Client(timeout=WEBHOOK_TIMEOUT_S, transport=WEBHOOK_TRANSPORT) as client:
        for attempt in range(1, attempts + 1):
            try:
                response = client.post(url, json=payload)
            except httpx.HTTPError as exc:
                last = f"failed: {type(exc).__name__}"
            else:
                if response.status_code < 400:
                    return f"delivered {response.status_code} (attempt {attempt})"
                last = f"failed: HTTP {response.status_code}"
                if response.status_code != 429 and response.status_code < 500:
                    return last
            if attempt < attempts:
                time.sleep(backoff_s * 2 ** (attempt - 1))
    log.warning("budget webhook %s: %s after %d attempts", url, last, attempts)
    return f"{last} after {attempts} attempts"
