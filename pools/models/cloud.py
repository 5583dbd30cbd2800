"""State of the simulated cloud and cluster (design §1: "simulated" is the embedded default for
both providers), plus the lifecycle controller's per-pool work claim.

The simulated cloud keeps what a real cloud would keep on its side: finite stock per zone and
GPU model, machines with their provisioning step, payments (one per order, so paying twice is
impossible), injected failures, reclaim notices of preemptible machines, and the GPU faults
(Xids) its hardware raises, which the node's agent picks up like a driver log line. The simulated cluster
keeps registered nodes (labels, taints, cordon); its pods are `pools.models.pods.Pod`.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from pools.core.words import plural


class SimStock(models.Model):
    """GPUs the simulated cloud still has in a zone for one GPU model (seed T1: stock)."""

    zone = models.ForeignKey("pools.Zone", on_delete=models.CASCADE)
    gpu_model = models.ForeignKey("pools.GpuModel", on_delete=models.CASCADE)
    available_gpus = models.PositiveIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["zone", "gpu_model"], name="simstock_unique_zone_model")]

    def __str__(self) -> str:
        return f"{self.zone} {self.gpu_model}: {plural(self.available_gpus, 'GPU')}"


class SimMachine(models.Model):
    """A machine ordered from the simulated cloud; `client_token` makes ordering idempotent."""

    class Status(models.TextChoices):
        PROVISIONING = "Provisioning", "Provisioning"
        RUNNING = "Running", "Running"
        RELEASED = "Released", "Released"

    provider_id = models.CharField(max_length=100, unique=True)
    client_token = models.CharField(max_length=100, unique=True)
    zone = models.ForeignKey("pools.Zone", on_delete=models.PROTECT)
    gpu_model = models.ForeignKey("pools.GpuModel", on_delete=models.PROTECT)
    node_type = models.ForeignKey("pools.NodeType", on_delete=models.PROTECT)
    gpus = models.PositiveSmallIntegerField()
    billing = models.CharField(max_length=12)
    image = models.CharField(max_length=200)
    status = models.CharField(max_length=15, choices=Status.choices, default=Status.PROVISIONING)
    step = models.CharField(max_length=30, blank=True)
    step_due_at = models.DateTimeField(null=True, blank=True)
    step_done = models.BooleanField(default=False)
    step_attempt = models.PositiveSmallIntegerField(default=0)
    reclaim_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    released_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.provider_id} ({self.status})"


class SimPayment(models.Model):
    """One payment per order: the database refuses a second one (no double debit)."""

    order = models.OneToOneField("pools.PoolOrder", on_delete=models.CASCADE, related_name="sim_payment")
    account = models.ForeignKey("billing.Account", on_delete=models.PROTECT)
    amount = models.DecimalField(max_digits=16, decimal_places=2)
    currency = models.CharField(max_length=3)
    balance_after = models.DecimalField(max_digits=16, decimal_places=2)
    paid_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"order #{self.order_id}: {self.amount} {self.currency}"


class SimFailure(models.Model):
    """An injected failure: the next `remaining` matching steps fail (null: every time)."""

    step = models.CharField(max_length=30)
    zone = models.CharField(max_length=40, blank=True)
    image = models.CharField(max_length=200, blank=True)
    token_prefix = models.CharField(max_length=100, blank=True, help_text="Only machines whose node name starts so")
    remaining = models.PositiveIntegerField(null=True, blank=True)
    message = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"fail {self.step} ({self.remaining if self.remaining is not None else 'always'})"


class SimGpuFault(models.Model):
    """An Xid raised by one GPU of a simulated machine (issue 6: the simulated source is driven
    by the simulated cloud's fault injection). Injected by an admin or a test
    (`SimulatedCloud.inject_gpu_fault`, `manage.py inject_fault`) or drawn at
    `EBCLOUD_SIM_XID_RATE` per GPU-hour (`key` makes a drawn fault unique per GPU and hour).
    The node's agent fetches its machine's faults over HTTP; `delivered_at` is set by a
    conditional UPDATE, so each fault reaches exactly one fetch."""

    machine = models.ForeignKey(SimMachine, on_delete=models.CASCADE, related_name="gpu_faults")
    gpu_index = models.PositiveSmallIntegerField()
    xid = models.PositiveIntegerField()
    key = models.CharField(max_length=200, null=True, blank=True, unique=True, help_text="Set for faults drawn by the rate")
    created_at = models.DateTimeField(default=timezone.now, help_text="When the GPU raised it")
    delivered_at = models.DateTimeField(null=True, blank=True, help_text="When the node's agent fetched it")

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["machine", "delivered_at"])]

    def __str__(self) -> str:
        return f"Xid {self.xid} on {self.machine_id} GPU {self.gpu_index}"


class SimClusterNode(models.Model):
    """A node registered in the simulated cluster (what `kubectl get node` would show)."""

    name = models.CharField(max_length=100, unique=True)
    labels = models.JSONField(default=dict)
    taints = models.JSONField(default=list)
    unschedulable = models.BooleanField(default=False)
    # A real Node's `ebcloud.io/cordoned-for-drain` annotation: the cordon is a drain's or a repair's own
    # (`ClusterBackend.cordon(mark=True)`), not someone else's.
    cordoned_for_drain = models.BooleanField(default=False, db_default=False)
    registered_at = models.DateTimeField(default=timezone.now)
    managed = models.JSONField(
        default=dict, blank=True, help_text="What the control plane applied last: label keys and taint (key, effect) pairs (a field manager's set)"
    )

    def __str__(self) -> str:
        return self.name


class PoolClaim(models.Model):
    """Who reconciles a pool right now: claimed by conditional UPDATE on `version` (design §5)."""

    pool = models.OneToOneField("pools.GpuNodePool", on_delete=models.CASCADE, primary_key=True, related_name="claim")
    owner = models.CharField(max_length=100, blank=True)
    claimed_until = models.DateTimeField(null=True, blank=True)
    version = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return f"claim of pool {self.pool_id} by {self.owner or 'nobody'}"
