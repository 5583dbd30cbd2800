"""django-q2 tasks: thin, idempotent wrappers around monitoring services (design §5)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from django.utils import timezone

from monitoring import alerts, services
from pools.services.notifications import delivery_budget, notifications_redeliver

log = logging.getLogger("ebcloud.monitoring")


def rollup_pool_samples(now: datetime | None = None) -> int:
    """Scheduled every minute by a data migration; safe to run twice or on several workers.
    Writes this minute's pool samples, prunes raw reports past their retention (a bounded chunk
    per run), then evaluates the watermark alert rules and sends the notifications that are due.

    The duties are independent: each runs whatever another raised (logged, and the first error
    re-raised at the end so the task shows as failed), and the slow one, telling people, comes
    last and under a time budget inside the task timeout, so a hanging mail server or webhook
    neither stops the pruning nor gets the worker killed."""
    now = now or timezone.now()
    errors: list[Exception] = []
    sampled = _duty(errors, services.pool_samples_rollup, now=now) or 0
    _duty(errors, services.node_reports_prune, now=now)
    with delivery_budget():  # the alerts raised now are mailed inline, under the same budget
        _duty(errors, alerts.alerts_evaluate, now=now)
        _duty(errors, notifications_redeliver, now=now)
    if errors:
        raise errors[0]
    return sampled


def _duty(errors: list[Exception], duty: Callable, **kwargs):
    try:
        return duty(**kwargs)
    except Exception as exc:  # noqa: BLE001 (recorded and re-raised once the other duties ran)
        log.exception("rollup_pool_samples: %s failed", duty.__name__)
        errors.append(exc)
        return None
