"""The audit log: who did what, when, with the state before and after."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from pools.models import AuditEntry


def audit_record(*, actor, action: str, obj: Any, before: Any = None, after: Any = None) -> AuditEntry:
    return AuditEntry.objects.create(
        actor=actor if getattr(actor, "is_authenticated", False) else None,
        action=action,
        object_type=obj._meta.label,
        object_id=str(obj.pk),
        before=before,
        after=after,
        at=timezone.now(),
    )
