"""Telling a team: record a notification once, deliver it once, let a lead acknowledge it.

Budget alerts (billing/budgets.py) and capacity alerts (monitoring/) both end here, so a lead
finds every alert in one list, and mail and webhook behave the same whatever raised them.

Delivery is at least once: the row is locked while it sends (another worker skips it) and marked
delivered in the same transaction; a worker killed before that commit leaves it due, and
`notifications_redeliver` (every minute) sends it again. A second mail therefore needs a worker
to die between the send and the commit.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.utils import timezone

from pools import roles
from pools.models import GpuNodePool, Membership, Notification, Team

log = logging.getLogger("ebcloud.notifications")

WEBHOOK_ATTEMPTS = 3
WEBHOOK_BACKOFF_S = 1.0
WEBHOOK_TIMEOUT_S = 5.0
WEBHOOK_TRANSPORT = None  # an httpx transport; tests put one that answers here
SUBJECT_PREFIX = "[EBCloud] "


def notification_raise(
    *,
    team: Team,
    kind: str,
    message: str,
    key: str,
    now: datetime,
    pool: GpuNodePool | None = None,
    severity: str = Notification.Severity.WARNING,
    payload: dict | None = None,
) -> Notification | None:
    """Record the notification unless its key is taken; deliver it once the caller commits.

    Returns None when someone already raised this key: the caller's alert was told before.
    """
    body = {"kind": kind, "team": team.slug, "pool": pool.name if pool else None, "severity": severity,
            "message": message, "at": now.isoformat(), **(payload or {})}  # fmt: skip
    try:
        with transaction.atomic():
            notification = Notification.objects.create(
                team=team, pool=pool, kind=kind, severity=severity, message=message, payload=body, key=key[:200], created_at=now,
            )  # fmt: skip
    except IntegrityError:
        return None
    transaction.on_commit(lambda: notification_deliver(notification_id=notification.pk))
    return notification


def notification_deliver(*, notification_id: int) -> bool:
    """Mail the team's leads (and EBCLOUD_ALERT_EMAILS) and POST the webhook, once."""
    with transaction.atomic():
        notification = (
            Notification.objects.select_for_update(skip_locked=True)
            .filter(pk=notification_id, delivered_at=None).select_related("team").first()
        )  # fmt: skip
        if notification is None:
            return False
        recipients = sorted(set(settings.EBCLOUD_ALERT_EMAILS) | set(lead_emails(notification.team)))
        if recipients:
            send_mail(SUBJECT_PREFIX + notification.message[:120], notification.message, None, recipients)
        url = settings.EBCLOUD_ALERT_WEBHOOK_URL
        status = webhook_post(url=url, payload=notification.payload)[:60] if url else ""
        Notification.objects.filter(pk=notification.pk).update(
            delivered_at=timezone.now(), emailed_to=len(recipients), webhook_status=status
        )
    return True


def notifications_redeliver(*, now: datetime) -> int:
    """Deliver what a dead worker committed and never sent; returns how many were sent."""
    due = Notification.objects.filter(delivered_at=None, created_at__lte=now).values_list("pk", flat=True)
    return sum(notification_deliver(notification_id=pk) for pk in list(due[:500]))


def lead_emails(team: Team) -> list[str]:
    rows = Membership.objects.filter(team=team, role=Membership.Role.LEAD).values_list("user__email", flat=True)
    return [email for email in rows if email]


def may_acknowledge(user, notification: Notification) -> bool:
    return roles.is_admin(user) or notification.team_id in roles.lead_team_ids(user)


def notification_acknowledge(*, user, notification: Notification, now: datetime) -> bool:
    """Mark it handled (team leads of its team, platform admins); False when it already was."""
    if not may_acknowledge(user, notification):
        raise PermissionDenied("only the team's leads and platform admins acknowledge its alerts")
    return bool(
        Notification.objects.filter(pk=notification.pk, acknowledged_at=None).update(acknowledged_at=now, acknowledged_by=user)
    )


def _host(url: str) -> str:
    """The webhook's scheme and host, for the log: its path or query often holds the token
    (a Slack or Teams incoming webhook), which must not reach the logs."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}"


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
    log.warning("alert webhook %s: %s after %d attempts", _host(url), last, attempts)
    return f"{last} after {attempts} attempts"
