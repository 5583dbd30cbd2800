"""django-q2 tasks: thin, idempotent wrappers around billing services (design §5)."""

from __future__ import annotations

from django.conf import settings
from django.utils import timezone

from billing import budgets, services
from pools.services.notifications import notifications_redeliver


def meter_pending() -> dict[str, int]:
    """Hourly, two minutes past the top of the hour (migration 0008): meter every complete hour
    not metered yet, then check budgets and send the alerts a dead worker left unsent."""
    now = timezone.now()
    # Stay well inside the worker's task timeout; the next run continues a long catch-up.
    budget_s = settings.Q_CLUSTER.get("timeout", 60) * 0.6
    results = services.meter_pending(now=now, time_budget_s=budget_s)
    alerts = budgets.budgets_evaluate(now=now)
    notifications_redeliver(now=now)
    return {"hours": sum(1 for r in results if r.metered), "alerts": len(alerts)}
