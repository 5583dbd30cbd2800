"""Budget writes: every pool's budget kept in line with its spec, team budgets set by admins and
finance, alerts fired exactly once per (budget, period, threshold, basis) and handed to the
notifications (in-app list, mail to the team's leads, the configured webhook; design §6)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction

from billing import selectors
from billing.models import Budget, BudgetAlert
from pools import roles
from pools.core.errors import ValidationError
from pools.models import GpuNodePool, Notification, Team
from pools.services.events import WARNING, event_record
from pools.services.notifications import notification_raise


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
    return fired


def _alert_fire(*, budget, period, threshold: int, basis: str, amount: Decimal, now: datetime):
    try:
        with transaction.atomic():
            alert = BudgetAlert.objects.create(
                budget=budget, period=period, threshold=threshold, basis=basis, amount=amount,
                budget_amount=budget.monthly_amount, currency=budget.currency, created_at=now,
            )  # fmt: skip
            message = alert_message(alert)
            if budget.pool_id:
                event_record(pool=budget.pool, reason="BudgetThresholdReached", type=WARNING, message=message, now=now)
            notification_raise(
                team=budget.team, pool=budget.pool, kind="BudgetThresholdReached", message=message,
                key=f"budget-alert:{alert.pk}", now=now, payload=alert_payload(alert),
                severity=Notification.Severity.CRITICAL if threshold >= 100 else Notification.Severity.WARNING,
            )  # fmt: skip
    except IntegrityError:
        return None
    return alert


def alert_message(alert) -> str:
    budget = alert.budget
    scope = f"Pool {budget.pool.name}" if budget.pool_id else f"Team {budget.team.slug}"
    what = "spend" if alert.basis == "actual" else "forecast spend"
    return (
        f"{scope} {what} {alert.amount} {alert.currency} reached {alert.threshold}% of its monthly "
        f"budget {alert.budget_amount} {alert.currency} ({alert.period:%Y-%m})"
    )


def alert_payload(alert) -> dict:
    return {
        "period": alert.period.strftime("%Y-%m"),
        "threshold": alert.threshold,
        "basis": alert.basis,
        "amount": str(alert.amount),
        "budget": str(alert.budget_amount),
        "currency": alert.currency,
    }
