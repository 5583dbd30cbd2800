"""django-q2 tasks: thin, idempotent wrappers around monitoring services (design §5)."""

from __future__ import annotations

from monitoring import alerts, services


def rollup_pool_samples() -> int:
    """Scheduled every minute by a data migration; safe to run twice or on several workers.
    Then evaluates the watermark alert rules and prunes raw reports past their retention
    (a bounded chunk per run)."""
    sampled = services.pool_samples_rollup()
    alerts.alerts_evaluate()
    services.node_reports_prune()
    return sampled
