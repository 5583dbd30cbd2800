"""Reads of the notification list: what a user may see (their teams'; finance and admins all)."""

from __future__ import annotations

from django.db.models import QuerySet

from pools.models import Notification


def notifications_for_user(*, user, open_only: bool = False) -> QuerySet[Notification]:
    rows = Notification.objects.for_user(user).select_related("team", "pool", "acknowledged_by")
    return rows.filter(acknowledged_at=None) if open_only else rows


def notification_get(*, user, notification_id: int) -> Notification:
    """The user's notification, or Notification.DoesNotExist (a 404: another team's does not exist)."""
    return notifications_for_user(user=user).get(pk=notification_id)


def open_count(user) -> int:
    """Unacknowledged notifications of the user's teams: the count beside the navigation link."""
    if not user.is_authenticated:
        return 0
    return notifications_for_user(user=user, open_only=True).count()
