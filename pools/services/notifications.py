"""Telling a team: record a notification once, deliver it once, let a lead acknowledge it.

Budget alerts (billing/budgets.py) and capacity alerts (monitoring/) both end here, so a lead
finds every alert in one list, and mail and webhook behave the same whatever raised them.

Delivery is two steps, mail then webhook, each at most once per try: a step locks the row
(another worker skips it), makes its one call and commits its mark (`mailed_at`, `webhook_at`:
when it was sent) before the next step starts; `delivered_at` once neither has anything left to
send. A worker killed mid-delivery (the django-q2 task timeout, a deploy) leaves only the step in
flight undone, and `notifications_redeliver` (every minute) repeats that one call: a second mail
needs a worker to die between the mail's send and its commit.

A step that raises (a refused recipient, an unreachable relay) is counted on the row (`attempts`,
`last_error`, `next_try_at` with back-off) and never escapes: the other notifications and the
task's other duties go on. After MAX_ATTEMPTS failed tries the row is `failed_at` and listed so.
A webhook that answers with an error is retried within its call (`webhook_post`) and then
recorded in `webhook_status`, as before.

Redelivery runs under a time budget well inside the django-q2 task timeout (Q_CLUSTER's
`timeout`): it starts a call only while that call's worst case (EMAIL_TIMEOUT, the webhook's
attempts times its timeout plus back-off) fits, and leaves the rest due for the next run. A task
can put its inline deliveries (the alerts it raises) under the same budget: `delivery_budget`.
"""

from __future__ import annotations

import logging
import smtplib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from pools import roles
from pools.models import GpuNodePool, Membership, Notification, Team

log = logging.getLogger("ebcloud.notifications")

WEBHOOK_ATTEMPTS = 3
WEBHOOK_BACKOFF_S = 1.0
WEBHOOK_TIMEOUT_S = 5.0
WEBHOOK_TRANSPORT = None  # an httpx transport; tests put one that answers here
SUBJECT_PREFIX = "[EBCloud] "
MAX_ATTEMPTS = 6  # failed tries of a notification before it is given up (failed_at)
RETRY_BASE_S = 60  # first wait after a failed try; doubles each try, at most RETRY_CAP_S
RETRY_CAP_S = 3600
BUDGET_SHARE = 0.4  # of the django-q2 task timeout, for one run's deliveries
MAIL, WEBHOOK = "mail", "webhook"
DONE_FIELD = {MAIL: "mailed_at", WEBHOOK: "webhook_at"}


@dataclass
class _Budget:
    deadline: float  # time.monotonic()
    started: int = 0  # calls started under it: the first always starts, so every run progresses


_budget: ContextVar[_Budget | None] = ContextVar("notification_delivery_budget", default=None)


def task_timeout_s() -> float:
    return float(settings.Q_CLUSTER.get("timeout") or 60)


@contextmanager
def delivery_budget(seconds: float | None = None) -> Iterator[None]:
    """Deliveries inside the block (inline ones after a commit, `notifications_redeliver`) start
    a mail or webhook call only while its worst case fits before the deadline; the others stay
    due for the next run. Default: BUDGET_SHARE of the task timeout. Nested: the nearer deadline."""
    outer = _budget.get()
    deadline = time.monotonic() + (task_timeout_s() * BUDGET_SHARE if seconds is None else seconds)
    if outer is not None and (seconds is None or outer.deadline <= deadline):
        yield
        return
    token = _budget.set(_Budget(deadline, outer.started if outer else 0))
    try:
        yield
    finally:
        _budget.reset(token)


def worst_case_s(channel: str) -> float:
    """How long one call may take before its own timeouts end it."""
    if channel == MAIL:
        return float(getattr(settings, "EMAIL_TIMEOUT", None) or 10)
    backoff = sum(WEBHOOK_BACKOFF_S * 2**i for i in range(WEBHOOK_ATTEMPTS - 1))
    return WEBHOOK_ATTEMPTS * WEBHOOK_TIMEOUT_S + backoff


def _may_start(channel: str) -> bool:
    budget = _budget.get()
    if budget is None:
        return True
    if budget.started and time.monotonic() + worst_case_s(channel) > budget.deadline:
        return False
    budget.started += 1
    return True


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
    The pool is named by its ledger name: a deleted pool's budget alert (its leases run on) says
    `name#id`, not the name a new pool may have taken.
    """
    body = {"kind": kind, "team": team.slug, "pool": pool.ledger_name if pool else None, "severity": severity,
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


def notification_deliver(*, notification_id: int, now: datetime | None = None) -> bool:
    """Mail the team's leads (and EBCLOUD_ALERT_EMAILS), then POST the webhook: each step once,
    committed on its own. True when a step was done now (sent, or nobody to send to)."""
    now = now or timezone.now()
    results = [_step(notification_id, channel, now) for channel in (MAIL, WEBHOOK)]
    return "done" in results


def notifications_redeliver(*, now: datetime, time_budget_s: float | None = None) -> int:
    """Deliver what is due: left by a dead worker, or a failed try whose back-off has passed.
    Every due mail first, then the webhooks (a hanging webhook does not hold the mail back), for
    as long as the time budget allows (default: BUDGET_SHARE of the task timeout); what does
    not fit waits for the next run. Never raises for a failed send. Returns how many
    notifications had a step done."""
    due = (
        Notification.objects.filter(delivered_at=None, failed_at=None, created_at__lte=now)
        .filter(Q(next_try_at=None) | Q(next_try_at__lte=now)).order_by("created_at", "pk")
    )  # fmt: skip
    rows = list(due.values("pk", *DONE_FIELD.values())[:500])
    done: set[int] = set()
    with delivery_budget(time_budget_s):
        for channel, field in DONE_FIELD.items():  # every mail, then every webhook
            for row in rows:
                if row[field] is not None:
                    continue
                result = _step(row["pk"], channel, now)
                if result == "later":
                    break
                if result == "done":
                    done.add(row["pk"])
    return len(done)


def _step(notification_id: int, channel: str, now: datetime) -> str:
    """One channel of one notification: "done", "failed" (recorded on the row), "skip" (done
    already, given up, or another worker has it) or "later" (it does not fit the time budget)."""
    field = DONE_FIELD[channel]
    with transaction.atomic():
        notification = (
            Notification.objects.select_for_update(skip_locked=True)
            .filter(pk=notification_id, delivered_at=None, failed_at=None, **{field: None})
            .select_related("team").first()
        )  # fmt: skip
        if notification is None:
            return "skip"
        try:
            with transaction.atomic():  # a savepoint: the row stays writable whatever fails
                changes = _send(notification, channel, now)
        except Exception as exc:  # noqa: BLE001 (any failure is recorded and retried; it must not stop the run)
            _record_failure(notification, channel, exc, now)
            return "failed"
        if changes is None:
            return "later"
        other = WEBHOOK if channel == MAIL else MAIL
        if getattr(notification, DONE_FIELD[other]) is not None or not _has_to_send(notification, other):
            changes["delivered_at"] = now
        Notification.objects.filter(pk=notification.pk).update(**changes)
    return "done"


def _recipients(notification: Notification) -> list[str]:
    return sorted(set(settings.EBCLOUD_ALERT_EMAILS) | set(lead_emails(notification.team)))


def _has_to_send(notification: Notification, channel: str) -> bool:
    return bool(_recipients(notification) if channel == MAIL else settings.EBCLOUD_ALERT_WEBHOOK_URL)


def _send(notification: Notification, channel: str, now: datetime) -> dict | None:
    """Make the channel's one call; the fields to save (its done-mark only when it sent
    something), or None when it does not fit the time budget."""
    if channel == MAIL:
        recipients = _recipients(notification)
        if not recipients:
            return {"emailed_to": 0}
        if not _may_start(MAIL):
            return None
        send_mail(SUBJECT_PREFIX + notification.message[:120], notification.message, None, recipients)
        return {"emailed_to": len(recipients), "mailed_at": now}
    url = settings.EBCLOUD_ALERT_WEBHOOK_URL
    if not url:
        return {"webhook_status": ""}
    if not _may_start(WEBHOOK):
        return None
    return {"webhook_status": webhook_post(url=url, payload=notification.payload)[:60], "webhook_at": now}


def _record_failure(notification: Notification, channel: str, exc: Exception, now: datetime) -> None:
    attempts = notification.attempts + 1
    wait = min(RETRY_BASE_S * 2 ** (attempts - 1), RETRY_CAP_S)
    given_up = attempts >= MAX_ATTEMPTS
    Notification.objects.filter(pk=notification.pk).update(
        attempts=attempts, last_error=f"{channel}: {describe_error(exc)}"[:200],
        next_try_at=None if given_up else now + timedelta(seconds=wait), failed_at=now if given_up else None,
    )  # fmt: skip
    log.warning(
        "alert %s of notification %s failed (try %d of %d%s): %s", channel, notification.pk, attempts, MAX_ATTEMPTS,
        ", given up" if given_up else f", next in {wait}s", describe_error(exc), exc_info=exc,
    )  # fmt: skip


def describe_error(exc: Exception) -> str:
    """What went wrong, for the alert list: the kind and the SMTP code, never the message (it
    can hold addresses, or the webhook URL with its token)."""
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        return f"the mail server refused {len(exc.recipients)} recipient(s)"
    if isinstance(exc, smtplib.SMTPResponseException):
        return f"{type(exc).__name__} (SMTP {exc.smtp_code})"
    return type(exc).__name__


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
