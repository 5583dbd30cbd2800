"""Template filters of the pool pages."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from django import template
from django.utils import timezone
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import mark_safe

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


_SITE_PATH = re.compile(r"(?<![\w/])(/[a-z][\w/-]*/\?[\w=&%.+-]+)")


@register.filter
def site_links(text: str) -> str:
    """A hint's own pages (e.g. the order form, pre-filled) as links; the rest escaped."""
    parts = _SITE_PATH.split(str(text))
    return mark_safe("".join(format_html('<a href="{0}">{0}</a>', part) if i % 2 else conditional_escape(part) for i, part in enumerate(parts)))  # noqa: S308 (every part is escaped)
