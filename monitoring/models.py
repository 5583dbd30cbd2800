"""The data plane's nouns (design §3, seed D1, T3): how agents join, what they report.

- `JoinToken`: a short-lived, single-use bootstrap token (`id.secret`, like Kubernetes
  bootstrap tokens), bound to the node it was minted for; only the secret's hash is stored.
- `AgentCredential`: the per-node credential a join token is exchanged for; random, stored as
  a hash, returned once; one active credential per node (and, for a few minutes after a
  rotation, the one it replaced: monitoring.services.credential_rotate).
- `NodeAgentState`: one row per node: the highest contiguous report sequence stored
  (`acked_seq`), versions, the latest GPU summary (the per-GPU detail is in the latest
  NodeReport) and the node's conditions (Kubernetes-shaped dicts, e.g. `CudaDriverMismatch`).
- `NodeReport`: one heartbeat with its metrics; unique per (node, seq) so a replay is a no-op.
- `GpuErrorEvent`: an Xid the agent saw, with the repair ladder's classification.
- `AgentCommand`: a node-local action (GPU reset, reboot, cordon acknowledgement) handed to the
  agent in a report response and acknowledged by it (D1: the agent executes local operations).
- `PoolSample`: the per-minute rollup behind the pool's capacity water-level charts.
- `AlertEpisode`: one lasting firing of a pool's capacity alert rule (monitoring/alerts.py), so a
  condition that lasts is told once, and told when a silence ends while it still holds.
- `AlertSilence`: a lead's "don't tell us about this rule of this pool until ...".
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Case, F, Q, When
from django.utils import timezone

from pools.models import GpuNodePool, Node, PoolChildQuerySet, TeamScopedQuerySet


class NodeChildQuerySet(TeamScopedQuerySet):
    team_path = "node__pool__team"


class JoinToken(models.Model):
    token_id = models.CharField(max_length=6, unique=True, help_text="The public part before the dot")
    secret_hash = models.CharField(max_length=64, help_text="SHA-256 of the secret, hex")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="join_tokens")
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    objects = NodeChildQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"join token {self.token_id} for {self.node.name}"

    @property
    def state(self) -> str:
        if self.used_at:
            return "used"
        return "expired" if self.expires_at <= timezone.now() else "valid"


ROTATED = "Rotated"  # revoked_reason of a credential rotated out: it works until its revoked_at (the grace)


def credential_in_grace(now) -> Q:
    """The credentials rotated out whose grace lasts at `now` (monitoring.services.credential_rotate):
    they work until their revoked_at, which the successor's first use brings forward to then."""
    return Q(revoked_reason=ROTATED, revoked_at__gt=now)


def credential_works(now) -> Q:
    """The credentials that authenticate at `now`: the active one, and one rotated out while
    its grace lasts."""
    return Q(revoked_at__isnull=True) | credential_in_grace(now)


def credential_grace_until(now) -> Case:
    """An annotation for the node page: when a credential in its grace at `now` stops working
    (its revoked_at), None for one active or no longer working. The same condition as
    credential_works, so the page never says a credential works when it does not."""
    return Case(When(credential_in_grace(now), then=F("revoked_at")), default=None, output_field=models.DateTimeField())


class AgentCredential(models.Model):
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="agent_credentials")
    key_prefix = models.CharField(max_length=12, help_text="First characters, to recognise a credential in logs")
    key_hash = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the credential, hex")
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_reason = models.CharField(max_length=200, blank=True)
    predecessor_in_grace = models.BooleanField(
        default=False, db_default=False, help_text="The credential this one rotated out still works until this one is first used")

    objects = NodeChildQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["node"], condition=Q(revoked_at__isnull=True), name="agentcredential_one_active_per_node")
        ]

    def __str__(self) -> str:
        return f"credential {self.key_prefix}... of {self.node.name}"


class NodeAgentState(models.Model):
    node = models.OneToOneField(Node, on_delete=models.CASCADE, primary_key=True, related_name="agent_state")
    acked_seq = models.PositiveBigIntegerField(default=0, help_text="Highest sequence number stored with no gap below it")
    max_seq = models.PositiveBigIntegerField(default=0)
    driver_version = models.CharField(max_length=40, blank=True)
    cuda_version = models.CharField(max_length=20, blank=True)
    conditions = models.JSONField(default=list, blank=True, help_text="Kubernetes-style NodeConditions")
    fb_used_mib = models.PositiveBigIntegerField(default=0)
    fb_total_mib = models.PositiveBigIntegerField(default=0)
    gpu_util_avg = models.FloatField(null=True, blank=True)
    last_report_at = models.DateTimeField(null=True, blank=True)
    commands_pending = models.PositiveIntegerField(default=0, help_text="Commands not yet acknowledged; 0 spares the ingest a query")

    objects = NodeChildQuerySet.as_manager()

    def __str__(self) -> str:
        return f"agent state of {self.node_id}"


class NodeReport(models.Model):
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="reports")
    seq = models.PositiveBigIntegerField()
    at = models.DateTimeField(help_text="When the agent took the report (agent clock)")
    received_at = models.DateTimeField(default=timezone.now)
    driver_version = models.CharField(max_length=40, blank=True)
    cuda_version = models.CharField(max_length=20, blank=True)
    gpus = models.JSONField(default=list, blank=True)

    objects = NodeChildQuerySet.as_manager()

    class Meta:
        ordering = ["node_id", "seq"]  # by id: ordering by "node" would join pools_node
        constraints = [models.UniqueConstraint(fields=["node", "seq"], name="nodereport_unique_node_seq")]

    def __str__(self) -> str:
        return f"report {self.seq} of {self.node_id}"


class GpuErrorEvent(models.Model):
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpu_errors")
    report_seq = models.PositiveBigIntegerField()
    position = models.PositiveSmallIntegerField(help_text="Index of the Xid within its report")
    gpu_index = models.PositiveSmallIntegerField(null=True, blank=True)
    xid = models.PositiveIntegerField()
    at = models.DateTimeField()
    kind = models.CharField(max_length=12, help_text="application | reset | fatal | unknown: the Xid's repair class")
    action = models.CharField(max_length=12, help_text="First rung of the repair ladder")
    mnemonic = models.CharField(max_length=80, blank=True)
    received_at = models.DateTimeField(default=timezone.now)

    objects = NodeChildQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["node", "-at"])]
        constraints = [
            models.UniqueConstraint(fields=["node", "report_seq", "position"], name="gpuerrorevent_unique_in_report")
        ]

    def __str__(self) -> str:
        return f"Xid {self.xid} on {self.node_id} GPU {self.gpu_index}"


class AgentCommand(models.Model):
    class Action(models.TextChoices):
        RESET_GPU = "reset_gpu", "Reset GPU"
        REBOOT = "reboot", "Reboot"
        CORDON_ACK = "cordon_ack", "Acknowledge cordon"

    class Status(models.TextChoices):
        PENDING = "Pending", "Pending"
        SUCCEEDED = "Succeeded", "Succeeded"
        FAILED = "Failed", "Failed"

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="agent_commands")
    action = models.CharField(max_length=12, choices=Action.choices)
    gpu_index = models.PositiveSmallIntegerField(null=True, blank=True)
    reason = models.CharField(max_length=300, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    message = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = NodeChildQuerySet.as_manager()

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["node", "status"])]

    def __str__(self) -> str:
        return f"{self.action} on {self.node_id} ({self.status})"


class PoolSample(models.Model):
    pool = models.ForeignKey(GpuNodePool, on_delete=models.CASCADE, related_name="samples")
    minute = models.DateTimeField(help_text="Start of the minute (UTC)")
    capacity_gpus = models.PositiveIntegerField()
    allocated_gpus = models.FloatField(null=True, blank=True, help_text="GPUs requested by Running pods (a share counts milli/1000)")
    gpu_memory_used_pct = models.FloatField(null=True, blank=True)
    gpu_util_avg = models.FloatField(null=True, blank=True)
    pending_pods = models.PositiveIntegerField(null=True, blank=True, help_text="Pending pods that would fit the pool (queued_pods)")
    not_ready_nodes = models.PositiveIntegerField(null=True, blank=True, help_text="Joined nodes not ready: heartbeat lost (Unknown) or Repairing")
    nodes_by_phase = models.JSONField(default=dict)
    node_counts = models.JSONField(default=dict, blank=True, help_text="Desired/current/ready nodes per billing kind")
    min_nodes = models.PositiveIntegerField()
    max_nodes = models.PositiveIntegerField()

    objects = PoolChildQuerySet.as_manager()

    class Meta:
        ordering = ["pool", "minute"]
        constraints = [models.UniqueConstraint(fields=["pool", "minute"], name="poolsample_unique_pool_minute")]

    def __str__(self) -> str:
        return f"{self.pool_id} at {self.minute:%Y-%m-%d %H:%M}"


ALERT_RULE_CHOICES = [
    ("HighGpuAllocation", "GPU allocation high"),
    ("LowGpuUtilization", "GPU utilisation low"),
    ("PodsPendingTooLong", "Pods waiting too long"),
    ("NodesNotReady", "Nodes not ready"),
]  # pools.core.alerting.RULES, as database choices


class AlertEpisode(models.Model):
    """A rule holding for a pool, from the evaluation that first saw it to the last that did.
    The episode's start is part of its notification key, so one lasting condition tells once.
    At most one episode per (pool, rule) is open (`ended_at` empty): an evaluation that finds
    the open one not seen for monitoring.alerts.EPISODE_GAP ends it before opening the next,
    and of two workers opening one at once the database lets one through."""

    pool = models.ForeignKey(GpuNodePool, on_delete=models.CASCADE, related_name="alert_episodes")
    rule = models.CharField(max_length=30, choices=ALERT_RULE_CHOICES)
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField(help_text="The latest evaluation that found the rule holding")
    notified_at = models.DateTimeField(null=True, blank=True, help_text="When the team was told (empty while silenced)")
    ended_at = models.DateTimeField(null=True, blank=True, help_text="When it was last seen holding; set when the rule next holds after the gap that ended it (empty until then)")

    objects = PoolChildQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at"]
        constraints = [
            models.UniqueConstraint(fields=["pool", "rule", "started_at"], name="alertepisode_unique_start"),
            models.UniqueConstraint(fields=["pool", "rule"], condition=Q(ended_at__isnull=True), name="alertepisode_one_open"),
        ]
        indexes = [models.Index(fields=["last_seen_at"])]

    def __str__(self) -> str:
        return f"{self.rule} on {self.pool_id} since {self.started_at:%Y-%m-%d %H:%M}"


class AlertSilence(models.Model):
    """While `until` is ahead, the rule still records its events on the pool but tells nobody."""

    pool = models.ForeignKey(GpuNodePool, on_delete=models.CASCADE, related_name="alert_silences")
    rule = models.CharField(max_length=30, choices=ALERT_RULE_CHOICES)
    until = models.DateTimeField()
    reason = models.CharField(max_length=300)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    objects = PoolChildQuerySet.as_manager()

    class Meta:
        ordering = ["-until", "-id"]
        indexes = [models.Index(fields=["until"])]

    def __str__(self) -> str:
        return f"{self.rule} on {self.pool_id} silenced until {self.until:%Y-%m-%d %H:%M}"
