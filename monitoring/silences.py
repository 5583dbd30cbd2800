"""Silencing a pool's capacity alert rule until a time: the rule keeps recording its events on
the pool (the timeline stays true) but tells nobody (no mail, webhook or Alerts entry) while the
silence lasts. Team leads of the pool's team and platform admins set and end silences; each is a
PoolEvent, so the timeline says who hushed what and why."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.core.exceptions import PermissionDenied
from django.db import transaction

from monitoring.models import AlertSilence
from pools import roles
from pools.core.alerting import RULES_BY_REASON
from pools.core.errors import FieldError, ValidationError, control_characters
from pools.models import GpuNodePool
from pools.services.events import NORMAL, event_record

MAX_SILENCE = timedelta(days=90)
MAX_REASON = 300  # AlertSilence.reason


def may_silence(user, pool: GpuNodePool) -> bool:
    return roles.can_manage_team_pools(user, pool.team_id)


def alert_silence_create(*, user, pool: GpuNodePool, rule: str, until: datetime, reason: str, now: datetime) -> AlertSilence:
    """Silence `rule` on `pool` until `until` (after now, at most 90 days ahead)."""
    if not may_silence(user, pool):
        raise PermissionDenied("only the team's leads and platform admins silence its pools' alerts")
    errors = []
    if rule not in RULES_BY_REASON:
        errors.append(FieldError("rule", f"unknown alert rule; expected one of {', '.join(RULES_BY_REASON)}"))
    if until <= now:
        errors.append(FieldError("until", "must be in the future"))
    elif until > now + MAX_SILENCE:
        errors.append(FieldError("until", "must be at most 90 days ahead"))
    reason = (reason or "").strip()
    if not reason:
        errors.append(FieldError("reason", "say why, so the team knows when to lift it"))
    elif len(reason) > MAX_REASON:
        errors.append(FieldError("reason", f"must be at most {MAX_REASON} characters"))
    elif problem := control_characters(reason, allowed="\n\t"):  # an escape sequence would steer the reader's terminal (the CLI's events)
        errors.append(FieldError("reason", problem))
    if errors:
        raise ValidationError(errors)
    title = RULES_BY_REASON[rule].title
    with transaction.atomic():
        silence = AlertSilence.objects.create(pool=pool, rule=rule, until=until, reason=reason, created_by=user, created_at=now)
        event_record(pool=pool, reason="AlertSilenced", type=NORMAL, actor=user, now=now,
                     message=f"{title} alerts silenced until {until:%Y-%m-%d %H:%M} UTC by {user.get_username()}: {reason}")  # fmt: skip
    return silence


def alert_silence_end(*, user, silence: AlertSilence, now: datetime) -> bool:
    """End a silence now; False when it had already ended."""
    pool = silence.pool
    if not may_silence(user, pool):
        raise PermissionDenied("only the team's leads and platform admins silence its pools' alerts")
    with transaction.atomic():
        ended = AlertSilence.objects.filter(pk=silence.pk, until__gt=now).update(until=now)
        if ended:
            title = RULES_BY_REASON[silence.rule].title
            event_record(pool=pool, reason="AlertSilenceEnded", type=NORMAL, actor=user, now=now,
                         message=f"{title} alerts are told again (silence ended by {user.get_username()})")  # fmt: skip
    return bool(ended)

