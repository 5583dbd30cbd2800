"""The audit log: who did what, when, with the state before and after (issue #9 item 4).

`audit_record` is called by the services that change pools, orders, repairs and agent
credentials, by the price admin, and by the role signals (pools/signals.py). `before`
and `after` are JSON: `snapshot` turns a model row into plain values. They never hold a
secret: a credential appears as its public key prefix, a join token as its public id.

Signals do not know who is acting, so `AuditActorMiddleware` keeps the current request in a
context variable and `current_actor()` reads its user when the change happens (after DRF
authenticated it, since DRF sets the user on the underlying request too). Outside a request
(workers, management commands) the actor is None: the system.
"""

from __future__ import annotations

from contextvars import ContextVar
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.db import models
from django.utils import timezone

from pools.models import AuditEntry

_request: ContextVar[Any] = ContextVar("ebcloud_audit_request", default=None)


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


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value


def snapshot(obj: models.Model, *, exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """The row's concrete fields as JSON values (foreign keys as ids, Decimal as text)."""
    return {
        f.attname: _plain(getattr(obj, f.attname))
        for f in obj._meta.concrete_fields
        if not f.primary_key and f.name not in exclude and f.attname not in exclude
    }


NODE_STATE = ("phase", "unschedulable", "release_reason")


def node_state(node) -> dict[str, Any]:
    """What a repair changes on a node: its phase, whether it takes pods, why it is released."""
    return {name: getattr(node, name) for name in NODE_STATE}


def audit_node_change(*, actor, action: str, node, before: dict[str, Any], **detail: Any) -> AuditEntry:
    """Record a change of `node` with its state as stored now (read back, so the caller's
    instance is left alone) plus `detail` (what was done, and why)."""
    after = type(node).objects.filter(pk=node.pk).values(*NODE_STATE).first() or {}
    return audit_record(actor=actor, action=action, obj=node, before=before, after={**after, **{k: _plain(v) for k, v in detail.items()}})


def current_actor():
    """The user of the request being served, or None (the system)."""
    request = _request.get()
    user = getattr(request, "user", None) if request is not None else None
    return user if getattr(user, "is_authenticated", False) else None


class AuditActorMiddleware:
    """Makes the request's user known to the audit signals (after AuthenticationMiddleware)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        token = _request.set(request)
        try:
            return self.get_response(request)
        finally:
            _request.reset(token)
