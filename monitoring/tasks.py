"""django-q2 tasks: thin, idempotent wrappers around monitoring services (design §5)."""

from __future__ import annotations

from django.utils import timezone

from monitoring import alerts, services
from pools.services.notifications import notifications_redeliver


def rollup_pool_samples() -> int:
    """Scheduled every minute by a data migration; safe to run twice or on several workers.
    Then evaluates the watermark alert rules, sends the notifications a dead worker left
    unsent, and prunes raw reports past their retention (a bounded chunk per run)."""
    sampled = services.pool_samples_rollup()
    alerts.alerts_evaluate()
    notifications_redeliver(now=timezone.now())
    services.node_reports_prune()
    return sampled
