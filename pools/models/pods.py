"""Pods of the simulated cluster (design §3 Pod, seed O3, T2).

In the simulated cluster the control plane hosts pods: they are submitted by team members into
their team (like pools, the team comes from the submitter's membership, never from the body),
bound by the scheduler pass (`pools/controllers/scheduler.py`) and finish after their duration.
Requests, tolerations, nodeSelector and required node affinity are stored in Kubernetes'
shapes so that the API can return them as given; `pools.core.podspec.core_pod` turns a row into
the pure core's `scheduling.Pod`.
"""

from __future__ import annotations

from functools import reduce
from operator import or_

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models.functions import Now
from django.utils import timezone

from pools import roles
from pools.core import priority as rules
from pools.models.pools import Node, Team, TeamScopedQuerySet


class PriorityClass(models.Model):
    """A Kubernetes PriorityClass (scheduling.k8s.io/v1), managed by platform admins in the
    Django admin. The system classes are built in (`pools.core.priority.SYSTEM_CLASSES`), as
    kube-apiserver creates them itself; their `system-` names are reserved. Like Kubernetes,
    `value` and `preemption_policy` cannot change once created (pods already carry them)."""

    class Policy(models.TextChoices):
        PREEMPT_LOWER_PRIORITY = rules.PREEMPT_LOWER_PRIORITY, "PreemptLowerPriority"
        NEVER = rules.PREEMPT_NEVER, "Never (waits for room, preempts nobody)"

    name = models.CharField(max_length=253, unique=True, help_text="A DNS-1123 subdomain, such as training")
    value = models.IntegerField(help_text=f"Pod priority; higher runs first and may preempt lower (at most {rules.HIGHEST_USER_DEFINABLE_PRIORITY:,})")
    preemption_policy = models.CharField(max_length=20, choices=Policy.choices, default=Policy.PREEMPT_LOWER_PRIORITY)
    global_default = models.BooleanField(default=False, help_text="Applies to pods that name no class (at most one class)")
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-value", "name"]
        verbose_name_plural = "priority classes"
        constraints = [
            models.UniqueConstraint(fields=["global_default"], condition=models.Q(global_default=True), name="priorityclass_one_global_default"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.value})"

    def clean(self) -> None:
        fields = {"metadata.name": "name", "value": "value", "preemptionPolicy": "preemption_policy", "globalDefault": "global_default"}
        errors: dict[str, list[str]] = {}
        for error in rules.class_errors(name=self.name, value=self.value, preemption_policy=self.preemption_policy, global_default=self.global_default):
            errors.setdefault(fields.get(error.field, "__all__"), []).append(error.message)
        if self.global_default:
            other = PriorityClass.objects.filter(global_default=True).exclude(pk=self.pk).first()
            if other is not None:
                errors.setdefault("global_default", []).append(f"PriorityClass {other.name} is already marked as default. Only one default can exist")
        if errors:
            raise ValidationError(errors)

    def as_core(self) -> rules.PriorityClass:
        return rules.PriorityClass(self.name, self.value, self.preemption_policy, self.global_default, self.description)


def priority_classes_for(name: str) -> dict[str, rules.PriorityClass]:
    """The user classes a pod naming `name` (or none) may resolve to: that one and the default."""
    rows = PriorityClass.objects.filter(models.Q(name=name) | models.Q(global_default=True)) if name else PriorityClass.objects.filter(global_default=True)
    return {row.name: row.as_core() for row in rows}


class PodQuerySet(TeamScopedQuerySet):
    team_path = "team"

    def for_user(self, user):
        """Pods of a namespace mapped to no team are shown to admins only."""
        rows = super().for_user(user)
        return rows if roles.is_admin(user) else rows.exclude(team__isnull=True)

    def live(self):
        """Pods that exist in the cluster (a deleted pod's row stays for metering only)."""
        return self.filter(deleted_at__isnull=True)

    def named(self, keys):
        """The pods of these (namespace, name) pairs (none for none), in one query."""
        return self.filter(reduce(or_, (models.Q(namespace=namespace, name=name) for namespace, name in keys), models.Q(pk__in=[])))


class Pod(models.Model):
    class Phase(models.TextChoices):
        PENDING = "Pending", "Pending"
        RUNNING = "Running", "Running"
        SUCCEEDED = "Succeeded", "Succeeded"
        FAILED = "Failed", "Failed"
        EVICTED = "Evicted", "Evicted"

    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.PROTECT, related_name="pods", help_text="Empty: a cluster namespace mapped to no team")
    uid = models.CharField(max_length=36, blank=True, help_text="metadata.uid in a real cluster (empty in the simulated one)")
    labels = models.JSONField(default=dict, blank=True)
    priority = models.IntegerField(default=0, help_text="As admitted from the pod's PriorityClass")
    preemption_policy = models.CharField(max_length=20, choices=PriorityClass.Policy.choices, default=PriorityClass.Policy.PREEMPT_LOWER_PRIORITY)
    checkpointable = models.BooleanField(default=False)
    cpu_milli = models.PositiveIntegerField(default=0)
    memory_mib = models.PositiveIntegerField(default=0)
    gpu_count = models.PositiveSmallIntegerField(default=0)
    gpu_milli = models.PositiveIntegerField(default=0, help_text="Share of one GPU in 1/1000 (1000 = whole GPUs)")
    gpu_shares = models.PositiveIntegerField(
        default=0, db_default=0,
        help_text="Thousandths of a GPU asked as ebcloud.io/gpu-milli, which kube-scheduler counts apart from nvidia.com/gpu",
    )  # fmt: skip
    gpu_models = models.JSONField(default=list, blank=True, help_text="Allowed GPU models (gpuSpec); empty = any")
    tolerations = models.JSONField(default=list, blank=True)
    node_selector = models.JSONField(default=dict, blank=True)
    affinity = models.JSONField(default=dict, blank=True, help_text="Kubernetes affinity (nodeAffinity)")
    duration_seconds = models.PositiveIntegerField(null=True, blank=True, help_text="Runs this long once started; empty = until deleted")
    document = models.JSONField(default=dict, blank=True, help_text="The Pod document as submitted")
    # Status.
    phase = models.CharField(max_length=10, choices=Phase.choices, default=Phase.PENDING)
    reason = models.CharField(max_length=40, blank=True, help_text="Unschedulable, Preempted, NodeLost, Completed, ...")
    node = models.ForeignKey(Node, null=True, blank=True, on_delete=models.SET_NULL, related_name="pods")
    nominated_node_name = models.CharField(
        max_length=253, blank=True, default="", db_default="",
        help_text="A Pending pod's status.nominatedNodeName in a real cluster: where kube-scheduler's preemption makes room for it",
    )  # fmt: skip
    gpu_indices = models.JSONField(default=list, blank=True)
    explanation = models.TextField(blank=True, help_text="The scheduler's last message (kube-scheduler style)")
    hints = models.JSONField(default=list, blank=True)
    submitted_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    submitted_at = models.DateTimeField(default=timezone.now)
    pending_since = models.DateTimeField(
        default=timezone.now, db_default=Now(),
        help_text="Waiting to be scheduled since: set when created Pending and again each time it is put back to Pending "
                  "(evicted, preempted, its node lost), as its owner would create it anew; how long it has waited counts from here",
    )  # fmt: skip
    started_at = models.DateTimeField(null=True, blank=True)
    placed_at = models.DateTimeField(null=True, blank=True, help_text="On its node since (moved there while running); empty: since it started")
    finished_at = models.DateTimeField(null=True, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True, help_text="Deleted from the cluster: kept only for the hours it ran")

    objects = PodQuerySet.as_manager()

    class Meta:
        ordering = ["namespace", "name"]
        constraints = [
            models.UniqueConstraint(fields=["namespace", "name"], condition=models.Q(deleted_at__isnull=True), name="pod_unique_namespace_name"),
        ]
        indexes = [
            models.Index(fields=["phase", "priority"]), models.Index(fields=["team", "phase"]), models.Index(fields=["uid"]),
            # The scheduler extender reads which pods run on which node on every change (pools/selectors/extender_state.py):
            # answered from this index alone, without reading the rows.
            models.Index(fields=["phase", "deleted_at", "node", "id"], name="pod_phase_deleted_node"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def annotations(self) -> dict:
        return (self.document or {}).get("metadata", {}).get("annotations") or {}

    @property
    def controller_kind(self) -> str:
        """The kind of the pod's controller, from its ownerReference with `controller: true`
        (ReplicaSet, Job, StatefulSet, DaemonSet, a custom resource's kind...), as a real
        cluster's pod mirror keeps it; "" for none. The scale-down reads it: a DaemonSet's pod
        goes with its node, and a real cluster's pod with no controller would not come back."""
        references = (self.document or {}).get("metadata", {}).get("ownerReferences") or ()
        return next((str(ref.get("kind") or "") for ref in references if isinstance(ref, dict) and ref.get("controller") is True), "")


class PodPlacement(models.Model):
    """A part of a pod's run on a node it has left: moved elsewhere while running (a repack),
    evicted, preempted or requeued from a lost node. The pod's row says only where it is now
    (`Pod.node`, since `Pod.placed_at` or else `started_at`): metering charges each of these
    parts to the node it ran on, so time on a node the pod left is not that node's idle."""

    pod = models.ForeignKey(Pod, on_delete=models.CASCADE, related_name="placements")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField()

    class Meta:
        ordering = ["started_at", "id"]
        indexes = [models.Index(fields=["ended_at", "started_at"], name="podplacement_ended_started")]

    def __str__(self) -> str:
        return f"{self.pod_id} on {self.node_id}: {self.started_at:%Y-%m-%d %H:%M} .. {self.ended_at:%Y-%m-%d %H:%M}"


class PodDisruptionBudget(models.Model):
    """A PodDisruptionBudget (policy/v1) of the simulated cluster: how many of the pods its
    selector picks in its namespace may be evicted at once (the repack's moves and a drain's
    evictions). Its status is not stored: the selector `pools.selectors.disruption_budgets` counts it from
    the pods on every read, as the disruption controller would, so it is never stale.
    `generation` counts spec changes, like metadata.generation."""

    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="disruption_budgets")
    labels = models.JSONField(default=dict, blank=True)
    document = models.JSONField(default=dict, help_text="The document as accepted: metadata (name, namespace, labels, annotations) and spec")
    generation = models.PositiveIntegerField(default=1)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    objects = TeamScopedQuerySet.as_manager()

    class Meta:
        ordering = ["namespace", "name"]
        constraints = [models.UniqueConstraint(fields=["namespace", "name"], name="pdb_unique_namespace_name")]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def spec(self) -> dict:
        return self.document.get("spec") or {}


class FragmentationSampleQuerySet(TeamScopedQuerySet):
    team_path = "pool__team"


class FragmentationSample(models.Model):
    """One point of the fragmentation trend (seed C3: the weekly report): per pool, or for the
    whole cluster when `pool` is empty (visible to admins and finance only)."""

    pool = models.ForeignKey("pools.GpuNodePool", null=True, blank=True, on_delete=models.CASCADE, related_name="fragmentation_samples")
    taken_at = models.DateTimeField(default=timezone.now)
    total_gpus = models.FloatField()
    allocated_gpus = models.FloatField()
    unallocated_pct = models.FloatField()
    fragmentation_gpus = models.FloatField(help_text="Idle GPU the observed pod shapes cannot use")
    underused_nodes = models.PositiveIntegerField(help_text="Nodes allocated < 50%")
    freeable_nodes = models.PositiveIntegerField(default=0, help_text="Nodes the repack plan would free")
    gpu_hours_saved_per_week = models.PositiveIntegerField(default=0)

    objects = FragmentationSampleQuerySet.as_manager()

    class Meta:
        ordering = ["taken_at", "id"]
        indexes = [models.Index(fields=["pool", "taken_at"])]

    def __str__(self) -> str:
        return f"{self.pool or 'cluster'} at {self.taken_at:%Y-%m-%d %H:%M}: {self.unallocated_pct:.1f}% unallocated"
