"""What a team must be told: a budget threshold crossed, a capacity alert firing.

One row per thing to tell, kept: the in-app list shows it until a lead acknowledges it, and
delivery (mail to the team's leads, the configured webhook) happens once, after the row commits.
Mail and webhook are marked done apart (`mailed_at`, `webhook_at`), each committed as soon as its
call returns, so a worker killed mid-delivery repeats at most the call it was making. A failed
call is counted (`attempts`, `last_error`, `next_try_at`) and, after too many, `failed_at` ends
the tries.
The row's `key` is the claim: whoever inserts it first delivers, any other worker finds it taken,
so an alert evaluated by several workers, or twice, tells people once.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from pools.models.pools import GpuNodePool, Team, TeamScopedQuerySet


class Notification(models.Model):
    class Severity(models.TextChoices):
        WARNING = "Warning", "Warning"
        CRITICAL = "Critical", "Critical"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="notifications")
    pool = models.ForeignKey(GpuNodePool, null=True, blank=True, on_delete=models.CASCADE, related_name="notifications")
    kind = models.CharField(max_length=60, help_text="What happened, e.g. BudgetThresholdReached, HighGpuAllocation")
    severity = models.CharField(max_length=10, choices=Severity.choices, default=Severity.WARNING)
    message = models.TextField()
    payload = models.JSONField(default=dict, blank=True, help_text="The JSON the webhook receives")
    key = models.CharField(max_length=200, unique=True, help_text="Once per key: the alert, its object and its period")
    created_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True, help_text="When mail and webhook were both done (or found nobody to send to)")
    mailed_at = models.DateTimeField(null=True, blank=True, help_text="When the mail went out (empty: not yet, or nobody to mail)")
    webhook_at = models.DateTimeField(null=True, blank=True, help_text="When the webhook was called (empty: not yet, or none configured); its answer is webhook_status")
    emailed_to = models.PositiveSmallIntegerField(default=0, help_text="How many addresses the mail went to")
    webhook_status = models.CharField(max_length=60, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0, db_default=0, help_text="Failed delivery tries so far")
    last_error = models.CharField(max_length=200, blank=True, default="", db_default="", help_text="Why the last try failed")
    next_try_at = models.DateTimeField(null=True, blank=True, help_text="After a failed try: not tried again before this")
    failed_at = models.DateTimeField(null=True, blank=True, help_text="When delivery was given up after too many failed tries")
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    objects = TeamScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["team", "-created_at"]),
            models.Index(fields=["delivered_at"], condition=models.Q(delivered_at__isnull=True), name="notification_undelivered"),
        ]

    def __str__(self) -> str:
        return f"{self.kind}: {self.message[:60]}"
