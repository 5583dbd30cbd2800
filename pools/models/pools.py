"""The pool domain's nouns (design §3).

Authorization lives in one place per model: `Model.objects.for_user(user)`. Every view, API
`get_queryset`, selector and CLI endpoint starts from it, so another team's object is simply not
found (404), never "forbidden".
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from pools import roles
from pools.core.fields import label_value_error
from pools.core.spec import DEFAULT_SCHEDULING_POLICY, spec_autoscales, spec_burst_max_nodes
from pools.core.words import plural


class TeamScopedQuerySet(models.QuerySet):
    """A queryset that knows the path from its rows to their owning team."""

    team_path = "team"

    def for_user(self, user):
        if not user.is_authenticated:
            return self.none()
        if roles.sees_all_teams(user):
            return self
        return self.filter(**{f"{self.team_path}__in": roles.team_ids(user)})


class PoolChildQuerySet(TeamScopedQuerySet):
    """Orders, nodes and events belong to the team of their pool."""

    team_path = "pool__team"


class Team(models.Model):
    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=63, unique=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    class Role(models.TextChoices):
        LEAD = "lead", "Lead"
        MEMBER = "member", "Member"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "team"], name="membership_unique_user_team")]

    def __str__(self) -> str:
        return f"{self.user} {self.role} of {self.team}"


def validate_label_value(value: str) -> None:
    """A catalog name nodes carry as a Kubernetes label value (their zone, region, GPU model and
    node type): the cluster refuses any other, and pools and orders would be built on it."""
    if not value or label_value_error(value):
        raise ValidationError(
            "Nodes carry this as a Kubernetes label value: 1 to 63 characters of ASCII letters, digits, "
            "'-', '_' or '.', starting and ending with a letter or digit (such as cn-east-2a or A100_80G).",
            code="label_value",
        )


class GpuModel(models.Model):
    """A GPU the cloud sells (A100_80G, H100_80G, ...)."""

    name = models.CharField(max_length=40, unique=True, validators=[validate_label_value])
    memory_gib = models.PositiveIntegerField(validators=[MinValueValidator(1)])

    def __str__(self) -> str:
        return self.name


class NodeType(models.Model):
    """A machine shape (GPU_8_CARD = 8 GPUs) with its CPU and memory per node."""

    name = models.CharField(max_length=40, unique=True, validators=[validate_label_value])
    gpu_count = models.PositiveSmallIntegerField(validators=[MinValueValidator(1)])
    cpu_milli = models.PositiveIntegerField()
    memory_mib = models.PositiveIntegerField()

    class Meta:
        ordering = ["gpu_count"]

    def __str__(self) -> str:
        return self.name


class Zone(models.Model):
    """An availability zone (`cn-east-2a`) of a region (`cn-east-2`); pools bind to one (D4)."""

    name = models.CharField(max_length=40, unique=True, validators=[validate_label_value])
    region = models.CharField(max_length=40, validators=[validate_label_value])

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Quota(models.Model):
    """GPU limit per (region, GPU model); with a team, a limit for that team alone (T1)."""

    region = models.CharField(max_length=40)
    gpu_model = models.ForeignKey(GpuModel, on_delete=models.PROTECT)
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.CASCADE)
    limit_gpus = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["region", "gpu_model", "team"], name="quota_unique_scope",
                violation_error_message="This team already has a quota for this region and GPU model: change that one.",
            ),
            models.UniqueConstraint(
                fields=["region", "gpu_model"], condition=Q(team__isnull=True), name="quota_unique_global",
                violation_error_message="A quota for all teams already exists for this region and GPU model: change that one.",
            ),
        ]

    def __str__(self) -> str:
        scope = self.team.slug if self.team_id else "all teams"
        return f"{self.region} {self.gpu_model}: {plural(self.limit_gpus, 'GPU')} ({scope})"


class PoolQuerySet(TeamScopedQuerySet):
    def active(self):
        return self.filter(deleted_at__isnull=True)

    def without_status(self):
        """The pools without their status columns (conditions, scaling history, node counts):
        what a pool costs is in its document and its other columns, and billing reads hundreds
        of pools an hour, so it leaves that JSON in the database."""
        return self.defer("conditions", "scaling_history", "node_counts")


POOL_UID_NAMESPACE = uuid.UUID("5b0c6a52-7a43-4f0e-9d55-2f1a3c7e8b10")


class GpuNodePool(models.Model):
    """A declared group of identical GPU nodes; `document` is the user's GpuNodePool as given."""

    class Phase(models.TextChoices):
        PENDING = "Pending", "Pending"
        PROVISIONING = "Provisioning", "Provisioning"
        READY = "Ready", "Ready"
        SCALING = "Scaling", "Scaling"
        DEGRADED = "Degraded", "Degraded"
        DELETING = "Deleting", "Deleting"
        DELETED = "Deleted", "Deleted"

    name = models.CharField(max_length=63)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="pools")
    document = models.JSONField()
    # Columns copied from the document for filtering, sorting and quota sums.
    gpu_model = models.ForeignKey(GpuModel, on_delete=models.PROTECT)
    node_type = models.ForeignKey(NodeType, on_delete=models.PROTECT)
    zone = models.ForeignKey(Zone, on_delete=models.PROTECT)
    min_nodes = models.PositiveIntegerField()
    max_nodes = models.PositiveIntegerField()
    lease_type = models.CharField(max_length=10)
    preemptible = models.BooleanField(default=False)
    # Status.
    generation = models.PositiveIntegerField(default=1)
    observed_generation = models.PositiveIntegerField(default=0)
    phase = models.CharField(max_length=20, choices=Phase.choices, default=Phase.PENDING)
    pending_reason = models.CharField(max_length=500, blank=True)
    conditions = models.JSONField(default=list, blank=True)
    scaling_history = models.JSONField(default=dict, blank=True, help_text="The autoscaler's stored recommendations and scale events")
    node_counts = models.JSONField(
        default=dict, blank=True, help_text="Per billing kind: desired, current and ready nodes (written by the controller)"
    )
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    deleted_at = models.DateTimeField(null=True, blank=True)

    objects = PoolQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        indexes = [models.Index(fields=["team", "phase"]), models.Index(fields=["zone", "gpu_model"])]
        constraints = [
            # Names are cluster-wide like a Kubernetes cluster-scoped object; a deleted pool's
            # name can be used again.
            models.UniqueConstraint(fields=["name"], condition=Q(deleted_at__isnull=True), name="pool_unique_live_name")
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def ledger_name(self) -> str:
        """The pool as the costs name it: its name, or for a deleted pool `name#id`. A deleted
        pool's monthly leases are billed to their end and its budget and alerts stay, while a
        new pool may take its name: reports, budgets, alerts and metrics must keep the two
        apart. `billing.selectors.ledger_pool_name_of` is the same rule in SQL."""
        return self.name if self.deleted_at is None else f"{self.name}#{self.pk}"

    @property
    def uid(self) -> str:
        """`metadata.uid`, as a Kubernetes object's: one pool's, never another's of the same name
        made after it was deleted (whose generation starts at 1 again), so that a document read
        from the first cannot replace the second (`pool_update`)."""
        return str(uuid.uuid5(POOL_UID_NAMESPACE, f"gpunodepool/{self.pk}"))

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.document.get("metadata", {}).get("labels", {}))

    @property
    def baseline_gpus(self) -> int:
        return self.min_nodes * self.node_type.gpu_count

    @property
    def scheduling_policy(self) -> str:
        """`spec.schedulingPolicy`, else the product's default: how the pool's nodes are scored,
        by the simulated scheduler pass and by the scheduler extender alike."""
        return self.document.get("spec", {}).get("schedulingPolicy") or DEFAULT_SCHEDULING_POLICY

    @property
    def shared_with(self) -> tuple[str, ...]:
        """`spec.sharedWith`: the slugs of the teams the owning lead lends the pool's nodes to."""
        shared = self.document.get("spec", {}).get("sharedWith")
        return tuple(shared) if isinstance(shared, list) else ()

    @property
    def fallback_zones(self) -> tuple[str, ...]:
        """`spec.zones` after the first: where nodes are ordered, in this order, while the
        preferred zone (`zone`) is out of stock. () for a pool given as `spec.region`."""
        zones = self.document.get("spec", {}).get("zones")
        return tuple(zones[1:]) if isinstance(zones, list) else ()

    @property
    def bursts(self) -> bool:
        """Whether the autoscaler may add burst nodes (`PoolSpec.autoscaling`), read from the
        stored (validated) document without parsing it against the catalog."""
        return spec_autoscales(self.document.get("spec", {}))

    @property
    def burst_max_nodes(self) -> int:
        """`spec.burst.maxNodes`: on-demand nodes the pool may add above its monthly ones (0: up
        to nodeCount.max), read like `bursts` from the stored document."""
        return spec_burst_max_nodes(self.document.get("spec", {}))

    @property
    def changing(self) -> bool:
        """Whether the pool is in a phase it leaves by itself (nodes being bought, joining,
        repaired or released): its pages poll while this holds, and stop once it settles."""
        return self.phase in (self.Phase.PENDING, self.Phase.PROVISIONING, self.Phase.SCALING, self.Phase.DEGRADED, self.Phase.DELETING)


class PoolOrder(models.Model):
    """A request to buy or change monthly capacity; admins decide (design §3)."""

    class Kind(models.TextChoices):
        CREATE = "create", "Create"
        GROW = "grow", "Grow baseline"
        RENEW = "renew", "Renew lease"

    class Status(models.TextChoices):
        PENDING = "Pending", "Pending"
        APPROVED = "Approved", "Approved"
        PAYING = "Paying", "Paying"  # the controller is paying it: only the payment settles it (Paid, or back to Approved)
        REJECTED = "Rejected", "Rejected"
        PAID = "Paid", "Paid"
        FAILED = "Failed", "Failed"
        WITHDRAWN = "Withdrawn", "Withdrawn"  # taken back by its own pool before payment (min lowered, pool deleted)

    pool = models.ForeignKey(GpuNodePool, on_delete=models.CASCADE, related_name="orders")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    node_count = models.PositiveIntegerField(help_text="Monthly nodes this order buys")
    gpus = models.PositiveIntegerField()
    lease_type = models.CharField(max_length=10)
    lease_months = models.PositiveSmallIntegerField()
    unit_monthly_price = models.DecimalField(max_digits=14, decimal_places=2)
    discount = models.DecimalField(max_digits=5, decimal_places=4)
    amount = models.DecimalField(max_digits=16, decimal_places=2, help_text="Total for the lease term")
    currency = models.CharField(max_length=3)
    reason = models.CharField(max_length=500, blank=True)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    decided_at = models.DateTimeField(null=True, blank=True)
    paid_at = models.DateTimeField(null=True, blank=True, help_text="When the account was debited (status Paid)")

    objects = PoolChildQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status", "created_at"]), models.Index(fields=["paid_at"])]

    def __str__(self) -> str:
        return f"order #{self.pk} ({self.kind}) for {self.pool.name}"


class Node(models.Model):
    """A GPU machine of a pool, walked through its phases by the lifecycle controller."""

    class Billing(models.TextChoices):
        MONTHLY = "monthly", "Monthly"
        ON_DEMAND = "on_demand", "On demand"
        PREEMPTIBLE = "preemptible", "Preemptible"

    class Phase(models.TextChoices):
        ORDERING = "Ordering", "Ordering"
        PROVISIONING = "Provisioning", "Provisioning"
        INITIALIZING = "Initializing", "Initializing"
        REGISTERING = "Registering", "Registering"
        READY = "Ready", "Ready"
        CORDONED = "Cordoned", "Cordoned"
        DRAINING = "Draining", "Draining"
        REPAIRING = "Repairing", "Repairing"
        UNKNOWN = "Unknown", "Unknown"
        TERMINATING = "Terminating", "Terminating"
        TERMINATED = "Terminated", "Terminated"

    pool = models.ForeignKey(GpuNodePool, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=100, unique=True)
    billing = models.CharField(max_length=12, choices=Billing.choices, default=Billing.MONTHLY)
    phase = models.CharField(max_length=15, choices=Phase.choices, default=Phase.ORDERING)
    zone = models.ForeignKey(Zone, on_delete=models.PROTECT)
    gpu_count = models.PositiveSmallIntegerField()
    labels = models.JSONField(default=dict)
    taints = models.JSONField(default=list)
    unschedulable = models.BooleanField(default=False)
    cordon_theirs = models.BooleanField(
        default=False, db_default=False,
        help_text="The cluster's Node was cordoned by someone else when the repair cordoned it: lifting the repair's cordon leaves theirs",
    )  # fmt: skip
    cluster_fault = models.CharField(
        max_length=300, blank=True, default="", db_default="",
        help_text="Why the cluster runs no pod on the node now (its Node gone, not Ready, no GPU allocatable); blank when it does",
    )  # fmt: skip
    cluster_fault_since = models.DateTimeField(
        null=True, blank=True, help_text="Since when the cluster has run no pod on the node (the start of `cluster_fault`, whatever its wording since)"
    )  # fmt: skip
    cluster_fault_held_at = models.DateTimeField(
        null=True, blank=True,
        help_text="When the repair last held the node's fault, its zone out of the cluster's use at once: its 30 minutes count from then",
    )
    lease_start = models.DateTimeField(null=True, blank=True)
    lease_end = models.DateTimeField(null=True, blank=True)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    ready_at = models.DateTimeField(null=True, blank=True)
    # Lifecycle controller state (pools/controllers/lifecycle.py, seed G1, D2).
    order = models.ForeignKey(PoolOrder, null=True, blank=True, on_delete=models.SET_NULL, related_name="nodes", help_text="The order whose capacity this node fills")
    renewal_order = models.ForeignKey(PoolOrder, null=True, blank=True, on_delete=models.SET_NULL, related_name="renewing_nodes")
    provider_id = models.CharField(max_length=100, blank=True, help_text="The cloud's id of the machine")
    machine_at = models.DateTimeField(
        null=True, blank=True,
        help_text="When the cloud delivered the node's machine (its order succeeded); an on-demand node is billed from it, as the cloud bills from launch",
    )  # fmt: skip
    system_image = models.CharField(
        max_length=128, blank=True, default="", db_default="",
        help_text="The system image the node's machine was ordered with; its provisioning steps follow it, whatever the pool's spec says later",
    )  # fmt: skip
    step = models.CharField(max_length=30, blank=True, help_text="Provisioning step in progress")
    step_due_at = models.DateTimeField(null=True, blank=True, help_text="When the controller looks again (step end or backoff)")
    attempts = models.PositiveSmallIntegerField(default=0)
    last_error = models.CharField(max_length=500, blank=True)
    release_reason = models.CharField(max_length=40, blank=True, help_text="Why the node is being drained and released")
    drain_deadline = models.DateTimeField(null=True, blank=True)
    lease_notified_at = models.DateTimeField(null=True, blank=True)
    terminated_at = models.DateTimeField(null=True, blank=True)
    successor = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="predecessors",
        help_text="The node that took this node's place (and its share of the lease) after it was replaced",
    )  # fmt: skip

    objects = PoolChildQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        indexes = [models.Index(fields=["pool", "phase"])]

    def __str__(self) -> str:
        return self.name


class PoolEvent(models.Model):
    """A Kubernetes-style event; every state change of a pool or node writes one (design §3)."""

    class Type(models.TextChoices):
        NORMAL = "Normal", "Normal"
        WARNING = "Warning", "Warning"

    pool = models.ForeignKey(GpuNodePool, on_delete=models.CASCADE, related_name="events")
    node = models.ForeignKey(Node, null=True, blank=True, on_delete=models.SET_NULL, related_name="events")
    type = models.CharField(max_length=7, choices=Type.choices, default=Type.NORMAL)
    reason = models.CharField(max_length=60)
    message = models.TextField()
    count = models.PositiveIntegerField(default=1)
    first_timestamp = models.DateTimeField(default=timezone.now)
    last_timestamp = models.DateTimeField(default=timezone.now)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    objects = PoolChildQuerySet.as_manager()

    class Meta:
        ordering = ["-last_timestamp", "-id"]
        indexes = [models.Index(fields=["pool", "-last_timestamp"])]

    def __str__(self) -> str:
        return f"{self.type} {self.reason}: {self.message}"


class ScalingActivity(models.Model):
    """One autoscaler decision that changed the pool's size or was blocked (design §3)."""

    pool = models.ForeignKey(GpuNodePool, on_delete=models.CASCADE, related_name="scaling_activities")
    at = models.DateTimeField(default=timezone.now)
    from_nodes = models.PositiveIntegerField()
    to_nodes = models.PositiveIntegerField()
    reason = models.CharField(max_length=60)
    message = models.TextField()
    blocked = models.BooleanField(default=False)
    metrics = models.JSONField(default=dict, blank=True)
    limiting_policy = models.CharField(max_length=60, blank=True)

    objects = PoolChildQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["pool", "-at"])]

    def __str__(self) -> str:
        return f"{self.pool_id} {self.from_nodes}->{self.to_nodes} {self.reason}"


class AuditEntry(models.Model):
    """Who did what to which object, when, with the state before and after (audit log)."""

    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    action = models.CharField(max_length=60)
    object_type = models.CharField(max_length=60)
    object_id = models.CharField(max_length=100)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.actor} {self.action} {self.object_type} {self.object_id}"
