"""Budget writes: every pool's budget kept in line with its spec, team budgets set by admins and
finance, alerts fired exactly once per (budget, period, threshold, basis) and delivered to the
team's leads by mail and to the configured webhook (design §6)."""

from __future__ import annotations

import logging
import time
from datetime import datetime
from decimal import Decimal

import httpx
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.utils import timezone

from billing import selectors
from billing.models import Budget, BudgetAlert
from pools import roles
from pools.core.errors import ValidationError
from pools.models import GpuNodePool, Membership, Team
from pools.services.events import WARNING, event_record

log = logging.getLogger("ebcloud.billing")

WEBHOOK_ATTEMPTS = 3
WEBHOOK_BACKOFF_S = 1.0
WEBHOOK_TIMEOUT_S = 5.0
WEBHOOK_TRANSPORT = None  # an httpx transport; tests put a mock here


def budgets_sync() -> int:
    """Make every live pool's Budget match its `spec.budget` (added, changed or removed)."""
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
    if not roles.is_admin(user):
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
    alert = BudgetAlert.objects.select_related("budget__pool", "budget__team").get(pk=alert_id)
    recipients = list(settings.EBCLOUD_BUDGET_ALERT_EMAILS)
    recipients += [
        e for e in Membership.objects.filter(team=alert.budget.team, role=Membership.Role.LEAD)
        .values_list("user__email", flat=True) if e
    ]  # fmt: skip
    updates = {}
    if recipients:
        message = alert_message(alert)
        send_mail(f"[EBCloud] {message[:120]}", message, None, sorted(set(recipients)))
        updates["emailed_at"] = timezone.now()
    url = settings.EBCLOUD_BUDGET_WEBHOOK_URL
    if url:
        updates["webhook_status"] = webhook_post(url=url, payload=alert_payload(alert))[:60]
    if updates:
        BudgetAlert.objects.filter(pk=alert.pk).update(**updates)


def webhook_post(
    *, url: str, payload: dict, attempts: int | None = None, backoff_s: float | None = None
) -> str:
    """POST JSON, retrying transport errors, 429 and 5xx with exponential backoff."""
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
