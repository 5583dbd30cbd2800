"""Template filters of the pool pages."""

from __future__ import annotations

from datetime import timedelta

from django import template

from pools.lifecycle_rules import format_duration

register = template.Library()


@register.filter
def duration(value: timedelta | None) -> str:
    """A timedelta the way kubectl prints ages: `4m10s`, `2h3m`, `3d4h`."""
    return "—" if value is None else format_duration(value)
