"""Template filters of the pool pages."""

from __future__ import annotations

from datetime import datetime, timedelta

from django import template
from django.utils import timezone
from django.utils.html import format_html

from pools.core.lifecycle import format_duration

register = template.Library()


@register.filter
def duration(value: timedelta | None) -> str:
    """A timedelta the way kubectl prints ages: `4m10s`, `2h3m`, `3d4h`."""
    return "—" if value is None else format_duration(value)


@register.filter
def age(value: datetime | None) -> str:
    """How long ago, the way `kubectl get events` prints AGE (`45s`, `3m10s`), not "0 minutes"."""
    return duration(None if value is None else max(timezone.now() - value, timedelta(0)))


@register.filter
def isotime(value: str | None) -> str:
    """A condition's `lastTransitionTime` (RFC 3339 text in the JSON) shown like the page's
    other times, in a `<time>` element; a dash when absent or unreadable."""
    try:
        moment = datetime.fromisoformat(value) if value else None
    except (TypeError, ValueError):
        moment = None
    if moment is None:
        return "—"
    return format_html('<time datetime="{}">{}</time>', moment.isoformat(), timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S"))
