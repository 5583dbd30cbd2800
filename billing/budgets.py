"""Budget writes: alerts fired exactly once per (budget, period, threshold, basis) and handed to the
notifications (in-app list, mail to the team's leads, the configured webhook; design §6).

Every live pool's budget is kept in line by `billing.budget_sync` (default, spec or finance's);
team and pool budgets finance sets are `billing.budget_admin`'s. Both names are importable from
here too, as before.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.db import IntegrityError, transaction

from billing.budget_admin import budget_team_set
from billing.budget_sync import budgets_sync, pool_budgets_synced
from billing.models import Budget, BudgetAlert
from billing.month_spend import budget_statuses_of
from pools.claims import WHOLE, Part
from pools.models import Notification
from pools.services.events import WARNING, event_record
from pools.services.notifications import notification_raise

__all__ = ["alert_message", "alert_payload", "budget_team_set", "budgets_evaluate", "budgets_sync"]


def budgets_evaluate(*, now: datetime, part: Part = WHOLE, teams: bool = True) -> list:
    """Fire each crossed threshold once per period, on actual spend and on the forecast: of the
    budgets of the `part`'s pools, and of the teams' budgets unless `teams` is False.

    A pool's costs are all in its own part of an hour, so its budget can be checked as soon as
    that part is metered; a team is charged on many pools, so team budgets wait for the whole
    hour (`billing.tasks.meter_part`: each part checks its pools, the last one the teams too).

    The alert row is the claim: `BudgetAlert` is unique per (budget, period, threshold, basis),
    so whichever worker inserts it first notifies, and every other one finds it taken. The
    alerts already fired this period are read first, in one query, so a threshold crossed hours
    ago costs no statement each hour (at 1,000 pools past their 80% forecast, a second of
    failed inserts every hour: issue 23).
    """
    budgets = pool_budgets_synced(now=now, part=part)
    if teams:
        budgets += Budget.objects.filter(pool__isnull=True).select_related("team")
    fired = []
    statuses = budget_statuses_of(budgets, now=now)
    periods = {status.period for status in statuses}
    taken = set(BudgetAlert.objects.filter(period__in=periods).values_list("budget_id", "period", "threshold", "basis")) if periods else set()
    for status in statuses:
        budget = status.budget
        for threshold in sorted(budget.thresholds or [80, 100]):
            limit = budget.monthly_amount * threshold / 100
            for basis, amount in (("actual", status.spent), ("forecast", status.forecast)):
                if amount is not None and amount >= limit and (budget.pk, status.period, threshold, basis) not in taken:
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
                key=alert.notification_key, now=now, payload=alert_payload(alert),
                severity=Notification.Severity.CRITICAL if threshold >= 100 else Notification.Severity.WARNING,
            )  # fmt: skip
    except IntegrityError:
        return None
    return alert


def alert_message(alert) -> str:
    """What the alert says. A deleted pool is named as in the reports, `name#id`, and said to be
    deleted: a new pool may have its name meanwhile (its leases run on after it is gone)."""
    budget = alert.budget
    if not budget.pool_id:
        scope = f"Team {budget.team.slug}"
    elif budget.pool.deleted_at is not None:
        scope = f"Deleted pool {budget.pool.ledger_name}"
    else:
        scope = f"Pool {budget.pool.name}"
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
