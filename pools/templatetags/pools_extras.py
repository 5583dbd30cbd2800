"""Template filters of the pool pages."""

from __future__ import annotations

import math
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


@register.filter
def metric_value(value) -> str:
    """A scaling decision's metric as people read it: "no report" where the node agents sent
    none (stored as null, which showed as Python's `None`), a number without a pointless `.0`
    (12.0 -> 12) and at most two decimals (85.333 -> 85.33)."""
    if value is None:
        return "no report"
    if not isinstance(value, float) or not math.isfinite(value):  # an int, or anything else, as it is
        return str(value)
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


_SITE_PATH = re.compile(r"(?<![\w/])(/[a-z][\w/-]*/\?[\w=&%.+-]+)")


@register.filter
def site_links(text: str) -> str:
    """A hint's own pages (e.g. the order form, pre-filled) as links; the rest escaped."""
    parts = _SITE_PATH.split(str(text))
    return mark_safe("".join(format_html('<a href="{0}">{0}</a>', part) if i % 2 else conditional_escape(part) for i, part in enumerate(parts)))  # noqa: S308 (every part is escaped)


_NEXT_REASON = re.compile(r"; (?=[A-Z][A-Za-z]+: )")


@register.filter
def pending_parts(value: str) -> list[tuple[str, str]]:
    """A pool's pendingReason ("OrderPending: order #3 awaits approval; WaitingForNodes: ...")
    as (reason, message) pairs, so a page can say what the pool waits for in words first and
    keep the machine-readable reason beside it."""
    parts = []
    for part in _NEXT_REASON.split(value or ""):
        reason, sep, message = part.partition(": ")
        parts.append((reason, message) if sep and reason.isalpha() else ("", part))
    return parts


ROW_KIND_WORDS = {"label": "pool label", "nodelabel": "node label", "taint": "node taint"}


@register.filter
def row_kind(kind: str) -> str:
    """A pool form row's kind as a screen reader says it: "node label key", not "nodelabel key"."""
    return ROW_KIND_WORDS.get(kind, kind)
