"""The auto-repair controller's own state: repair requests awaiting an admin's approval.

A pool that declares `autoRepairPolicy: {requireApproval: true}` does not repair on its own:
the repair service (pools/controllers/repair.py) records what the ladder chose as a `Pending`
request; a platform admin approves or rejects it on the node page (pools/services/repair.py);
the next repair pass starts an approved request and marks it `Started`. At most one request
per node is open (Pending or Approved) — the database refuses a second — so any number of
workers, passes and clicks end in one repair.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from pools.models.pools import GpuNodePool, Node, PoolChildQuerySet


class RepairApproval(models.Model):
    class Status(models.TextChoices):
        PENDING = "Pending", "Pending approval"
        APPROVED = "Approved", "Approved"
        REJECTED = "Rejected", "Rejected"
        STARTED = "Started", "Started"
        CANCELLED = "Cancelled", "Cancelled"

    OPEN = (Status.PENDING, Status.APPROVED)

    pool = models.ForeignKey(GpuNodePool, on_delete=models.CASCADE, related_name="repair_approvals")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="repair_approvals")
    action = models.CharField(max_length=12, help_text="reset_gpu | reboot | replace: the repair ladder's step")
    gpu_index = models.PositiveSmallIntegerField(null=True, blank=True)
    xid = models.PositiveIntegerField(null=True, blank=True)
    reason = models.CharField(max_length=60, help_text="The ladder's reason, e.g. ResetClassXid, FatalXid")
    message = models.TextField(blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    requested_at = models.DateTimeField(default=timezone.now)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)
    note = models.CharField(max_length=300, blank=True, help_text="The admin's reason, or why the request closed")
    started_at = models.DateTimeField(null=True, blank=True)

    objects = PoolChildQuerySet.as_manager()

    class Meta:
        ordering = ["-requested_at", "-id"]
        indexes = [models.Index(fields=["node", "-requested_at"])]
        constraints = [
            models.UniqueConstraint(fields=["node"], condition=Q(status__in=["Pending", "Approved"]), name="repairapproval_one_open_per_node")
        ]

    def __str__(self) -> str:
        return f"{self.action} of {self.node_id} ({self.status})"

    @property
    def what(self) -> str:
        gpu = f" GPU {self.gpu_index}" if self.gpu_index is not None and self.action == "reset_gpu" else ""
        return f"{self.action}{gpu}"
