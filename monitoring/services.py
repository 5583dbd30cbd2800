"""Monitoring services (writes): join tokens, agent credentials, report ingest, commands.

The node an agent speaks for comes from its credential, never from the body (design §4, as
Kubernetes' NodeRestriction): a body naming another node is refused and logged.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.db.models import BooleanField, ExpressionWrapper, F
from django.utils import timezone

from monitoring import ingest_sql, selectors, tokens
from monitoring.models import (
    ROTATED,
    AgentCommand,
    AgentCredential,
    GpuErrorEvent,
    JoinToken,
    NodeAgentState,
    NodeReport,
    PoolSample,
    credential_in_grace,
    credential_works,
)
from monitoring.report_parse import Batch, Report, gpu_summary, node_gpu_errors
from pools import roles
from pools.core import repair
from pools.core.errors import ConflictError, FieldError, ValidationError
from pools.models import Node
from pools.selectors.queue import pool_queue_length
from pools.services.audit import audit_record
from pools.services.events import NORMAL, WARNING, event_record

logger = logging.getLogger("ebcloud.monitoring")

GONE_PHASES = (Node.Phase.TERMINATING, Node.Phase.TERMINATED)
ROTATION_GRACE = timedelta(minutes=10)  # how long a rotated-out credential works if the new one goes unused


class InvalidToken(Exception):
    """A join token or credential that does not authenticate: HTTP 401."""


# --- join tokens and credentials ------------------------------------------------------------


def join_token_create(*, user, node: Node, ttl_seconds: int | None = None, now: datetime | None = None) -> tuple[JoinToken, str]:
    """Mint a single-use join token bound to `node`; return the row and the token (shown once)."""
    if not roles.is_admin(user):
        raise PermissionDenied("only platform admins mint join tokens")
    if node.phase in GONE_PHASES:
        raise ConflictError(f"node {node.name} is {node.phase}; it cannot join")
    ttl = settings.EBCLOUD_JOIN_TOKEN_TTL_SECONDS if ttl_seconds is None else ttl_seconds
    if not 60 <= ttl <= settings.EBCLOUD_JOIN_TOKEN_MAX_TTL_SECONDS:
        raise ValidationError(f"must be between 60 and {settings.EBCLOUD_JOIN_TOKEN_MAX_TTL_SECONDS} seconds", field="ttlSeconds")
    now = now or timezone.now()
    for _ in range(5):  # 36^6 ids: a collision is rare, but possible
        token_id, secret = tokens.join_token_new()
        try:
            with transaction.atomic():
                row = JoinToken.objects.create(
                    token_id=token_id, secret_hash=tokens.digest(secret), node=node,
                    expires_at=now + timedelta(seconds=ttl), created_by=user, created_at=now,
                )
            break
        except IntegrityError:
            continue
    else:  # pragma: no cover
        raise ConflictError("could not pick a free join token id; try again")
    event_record(pool=node.pool, node=node, reason="JoinTokenCreated", actor=user, now=now,
                 message=f"Join token {token_id} for node {node.name}, valid until {row.expires_at:%Y-%m-%d %H:%M:%S} UTC")
    audit_record(actor=user, action="credential.join-token", obj=row, after={"node": node.name, "tokenId": token_id, "expiresAt": row.expires_at.isoformat()})
    return row, f"{token_id}.{secret}"


def _refuse_other_node(*, node: Node, named: str, where: str, now: datetime) -> None:
    message = f"Agent of node {node.name} named node {named!r} in {where}; refused"
    logger.warning(message)
    event_record(pool=node.pool, node=node, type=WARNING, reason="AgentNodeMismatch", message=message, now=now)
    raise PermissionDenied(f"this credential belongs to node {node.name}, not {named!r}")


def _credential_issue(*, node: Node, now: datetime, predecessor_in_grace: bool = False) -> tuple[AgentCredential, str]:
    secret = tokens.credential_new()
    row = AgentCredential.objects.create(node=node, key_prefix=secret[:12], key_hash=tokens.digest(secret), created_at=now,
                                         predecessor_in_grace=predecessor_in_grace)  # fmt: skip
    return row, secret


def _working(node: Node, now: datetime):
    """The node's credentials that authenticate at `now`: the active one, and one rotated out
    while its grace lasts."""
    return AgentCredential.objects.filter(credential_works(now), node=node)


def agent_join(*, token: str, node_name: str, now: datetime | None = None) -> tuple[AgentCredential, str, int]:
    """Exchange a join token for the node's credential. Returns (row, credential, acked_seq):
    the agent starts numbering its reports after `acked_seq`, so a re-joined node whose disk
    was wiped does not collide with reports already stored."""
    now = now or timezone.now()
    parsed = tokens.join_token_parse(token)
    row = JoinToken.objects.select_related("node__pool").filter(token_id=parsed[0]).first() if parsed else None
    if row is None or not tokens.same_digest(parsed[1], row.secret_hash):
        raise InvalidToken("invalid join token")
    node = row.node
    if node_name != node.name:
        _refuse_other_node(node=node, named=node_name, where="its join request", now=now)
    if row.used_at is not None or row.expires_at <= now:
        raise InvalidToken("join token already used" if row.used_at else "join token expired")
    if node.phase in GONE_PHASES:
        raise ConflictError(f"node {node.name} is {node.phase}; it cannot join")
    with transaction.atomic():
        # Single use, even with two agents racing: only one conditional UPDATE matches.
        if not JoinToken.objects.filter(pk=row.pk, used_at__isnull=True).update(used_at=now):
            raise InvalidToken("join token already used")
        replaced = list(_working(node, now).values_list("key_prefix", flat=True))
        _working(node, now).update(revoked_at=now, revoked_reason="Rejoined")
        credential, secret = _credential_issue(node=node, now=now)
        state, _ = NodeAgentState.objects.get_or_create(node=node)
        audit_record(actor=None, action="credential.issue", obj=credential, before={"node": node.name, "credentials": replaced},
                     after={"node": node.name, "credentials": [credential.key_prefix], "tokenId": row.token_id})  # fmt: skip
    event_record(pool=node.pool, node=node, reason="AgentJoined", now=now,
                 message=f"Node agent of {node.name} joined with token {row.token_id}; credential {credential.key_prefix}...")
    return credential, secret, state.acked_seq


def credential_authenticate(raw: str, now: datetime | None = None) -> AgentCredential | None:
    """The active credential (or one rotated out, in its grace) with its node and agent state
    (one query), or None."""
    if not raw.startswith(tokens.CREDENTIAL_PREFIX):
        return None
    now = now or timezone.now()
    credential = ingest_sql.credential_load(tokens.digest(raw), now)
    if credential is None or credential.node.phase == Node.Phase.TERMINATED:
        return None
    _first_use(credential, now)
    return credential


def _first_use(credential: AgentCredential, now: datetime) -> None:
    """The first request with a rotated-in credential ends the grace of the one it replaced."""
    if credential.predecessor_in_grace:
        with transaction.atomic():
            AgentCredential.objects.filter(credential_in_grace(now), node_id=credential.node_id).update(revoked_at=now)
            AgentCredential.objects.filter(pk=credential.pk).update(predecessor_in_grace=False)
        credential.predecessor_in_grace = False


def credential_authenticate_storing_next(raw: str, batch: Batch | None, now: datetime | None = None,
                                         ) -> tuple[AgentCredential | None, IngestResult | None]:
    """credential_authenticate, and when `batch` is the steady state's next report (one report,
    no Xids, no acks, the next sequence number after a gapless state, the same driver and CUDA),
    that report stored in the same round trip on PostgreSQL (ingest_sql.credential_load_storing_next):
    a steady agent costs one statement per report instead of two.

    (None, None): not an active credential. (credential, result): stored, with reports_ingest's
    answer. (credential, None): nothing stored; go on with reports_ingest (or refuse the batch)."""
    if not raw.startswith(tokens.CREDENTIAL_PREFIX):
        return None, None
    now = now or timezone.now()
    report = batch.reports[0] if batch is not None and len(batch.reports) == 1 else None
    if report is None or report.xids or batch.acks or (batch.oldest_seq or 1) > report.seq or len({g["index"] for g in report.gpus}) < len(report.gpus):
        return credential_authenticate(raw, now), None
    used, total, util = gpu_summary(report.gpus)
    credential, stored = ingest_sql.credential_load_storing_next(
        tokens.digest(raw), report=report, node_name=batch.node, now=now, terminated=Node.Phase.TERMINATED,
        values={"fb_used_mib": used, "fb_total_mib": total, "gpu_util_avg": util})
    if credential is None or credential.node.phase == Node.Phase.TERMINATED:
        return None, None
    _first_use(credential, now)
    if not stored:
        return credential, None
    node = credential.node
    commands = commands_deliver(node=node, now=now) if node.agent_state.commands_pending else []
    return credential, IngestResult(report.seq, 1, 0, [], commands)


def credential_rotate(*, credential: AgentCredential, node_name: str | None = None, now: datetime | None = None) -> tuple[AgentCredential, str]:
    """Replace the agent's credential with a new one, returned once (only its hash is stored).

    The old credential keeps working until the new one is first used, for at most
    ROTATION_GRACE (10 minutes) after the rotation: an agent whose answer was lost keeps
    reporting with the old one and can retry. A retry with the old credential within the grace
    gets another new credential (the first cannot be shown again) and the unused one it
    replaces is revoked. The grace is never extended: a stolen old credential works at most
    ROTATION_GRACE after the rotation, and not at all once the agent has used the new one."""
    now = now or timezone.now()
    node = credential.node
    if node_name is not None and node_name != node.name:
        _refuse_other_node(node=node, named=node_name, where="its credential rotation", now=now)
    with transaction.atomic():
        in_grace_now = ExpressionWrapper(credential_in_grace(now), output_field=BooleanField())
        old = AgentCredential.objects.select_for_update().filter(pk=credential.pk).annotate(in_grace=in_grace_now).values("revoked_at", "in_grace", "key_prefix").first()
        in_grace = old is not None and bool(old["in_grace"])
        if old is None or (old["revoked_at"] is not None and not in_grace):
            raise ConflictError("this credential was revoked meanwhile")
        if in_grace:  # a retry: the new credential it was given is unused (its first use ends the grace)
            unused = AgentCredential.objects.filter(node=node, revoked_at__isnull=True, predecessor_in_grace=True)
            replaced = list(unused.values_list("key_prefix", flat=True))
            if not unused.update(revoked_at=now, revoked_reason="RotationRetried"):
                raise ConflictError("this credential was replaced meanwhile")
        else:
            replaced = [old["key_prefix"]]
            AgentCredential.objects.filter(pk=credential.pk).update(revoked_at=now + ROTATION_GRACE, revoked_reason=ROTATED)
        new, secret = _credential_issue(node=node, now=now, predecessor_in_grace=True)
        audit_record(actor=None, action="credential.rotate", obj=new, before={"node": node.name, "credentials": replaced},
                     after={"node": node.name, "credentials": [new.key_prefix]})  # fmt: skip
    event_record(pool=node.pool, node=node, reason="AgentCredentialRotated", now=now,
                 message=f"Agent credential of {node.name} rotated: {replaced[0]}... -> {new.key_prefix}..."
                 + (f" (a retry with {old['key_prefix']}...)" if in_grace else ""))
    return new, secret


def credential_revoke_for_node(node: Node, *, reason: str = "NodeTerminated", actor=None, now: datetime | None = None) -> int:
    """Revoke the node's active credential (the lifecycle calls this when a node is released),
    and the one it rotated out if that is still in its grace; returns how many active ones were
    revoked. Idempotent."""
    now = now or timezone.now()
    with transaction.atomic():
        count = AgentCredential.objects.filter(node=node, revoked_at__isnull=True).update(revoked_at=now, revoked_reason=reason[:200])
        _working(node, now).update(revoked_at=now, revoked_reason=reason[:200])
    if count:
        event_record(pool=node.pool, node=node, reason="AgentCredentialRevoked", actor=actor, now=now,
                     message=f"Agent credential of {node.name} revoked ({reason})")
        audit_record(actor=actor, action="credential.revoke", obj=node, before={"node": node.name, "activeCredentials": count},
                     after={"node": node.name, "activeCredentials": 0, "reason": reason[:200]})  # fmt: skip
    return count


# --- reports ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class IngestResult:
    acked_seq: int
    stored: int
    duplicates: int
    rejected: list[int]
    commands: list[dict]


def _condition_update(conditions: list[dict], report: Report, now: datetime) -> tuple[list[dict], repair.NodeCondition | None, bool]:
    """Recompute CudaDriverMismatch from the report's versions. Returns (conditions, condition,
    changed) where condition is the new status (None: versions unparseable or missing)."""
    try:
        found = repair.cuda_driver_condition(report.driver_version, report.cuda_version)
    except ValueError:
        return conditions, None, False
    if found is None:
        found = repair.NodeCondition(repair.CUDA_DRIVER_MISMATCH, "False", "DriverSupportsCuda",
                                     f"driver {report.driver_version} runs CUDA {report.cuda_version}")
    others = [c for c in conditions if c.get("type") != found.type]
    old = next((c for c in conditions if c.get("type") == found.type), None)
    if old is None and found.status == "False":  # first report, all well: nothing to announce
        return [*others, {"type": found.type, "status": "False", "reason": found.reason, "message": found.message,
                          "lastTransitionTime": now.isoformat()}], found, False
    changed = old is None or old.get("status") != found.status or old.get("reason") != found.reason
    entry = {"type": found.type, "status": found.status, "reason": found.reason, "message": found.message,
             "lastTransitionTime": now.isoformat() if changed else old.get("lastTransitionTime")}
    return [*others, entry], found, changed


def reports_ingest(*, credential: AgentCredential, batch: Batch, now: datetime | None = None) -> IngestResult:
    """Store a batch of reports from the credential's node; idempotent per (node, seq).

    Reports at or below the node's highest contiguous sequence (`acked_seq`) are replays and are
    acknowledged without being stored again; reports up to `EBCLOUD_AGENT_SEQ_WINDOW` above it
    are stored in any order; beyond that they are refused (listed in `rejected`). `oldestSeq`,
    the oldest report still in the agent's buffer, lets the server skip a gap the agent will
    never fill (it dropped reports when its buffer was full).
    A fixed number of queries per batch, whatever its size: in the steady state one write
    (on PostgreSQL a single statement) plus the authentication (monitoring/ingest_sql.py).
    """
    now = now or timezone.now()
    node = credential.node
    if batch.node is not None and batch.node != node.name:
        _refuse_other_node(node=node, named=batch.node, where="its report batch", now=now)
    if errors := node_gpu_errors(batch, node.gpu_count):
        report_batch_refused(credential=credential, errors=errors, now=now)
        raise ValidationError(errors)
    try:
        state = node.agent_state
    except NodeAgentState.DoesNotExist:
        state, _ = NodeAgentState.objects.get_or_create(node=node)
    floor = max(state.acked_seq, (batch.oldest_seq or 1) - 1)
    limit = floor + settings.EBCLOUD_AGENT_SEQ_WINDOW
    rejected = sorted({r.seq for r in batch.reports if r.seq > limit})
    fresh: dict[int, Report] = {}
    for r in batch.reports:
        if floor < r.seq <= limit:
            fresh.setdefault(r.seq, r)
    if batch.clock_off and fresh:  # one event while it lasts (its message does not change); a replay says nothing new
        event_record(pool=node.pool, node=node, type=WARNING, reason="NodeClockOff", now=now,
                     message=f"{node.name}'s clock {batch.clock_off}: its report times are read on the control plane's clock; set the node's clock (NTP)")  # fmt: skip
    # Common case: no gap is open and every report is newer than any stored one, so none of
    # them can be stored yet (a racing duplicate is still caught by the unique constraint).
    no_gap = state.acked_seq == state.max_seq and floor >= state.max_seq
    if not fresh or (no_gap and min(fresh) > state.max_seq):
        existing: set[int] = set()
    else:
        existing = set(NodeReport.objects.filter(node=node, seq__gt=floor).order_by().values_list("seq", flat=True))
    new = [r for seq, r in sorted(fresh.items()) if seq not in existing]
    have = existing | {r.seq for r in new}
    acked = floor
    while acked + 1 in have:
        acked += 1
    updates: dict = {}
    latest = new[-1] if new and new[-1].seq > state.max_seq else None
    condition, condition_changed, transition = None, False, None
    if latest is not None:
        used, total, util = gpu_summary(latest.gpus)
        updates.update(max_seq=latest.seq, fb_used_mib=used, fb_total_mib=total, gpu_util_avg=util, last_report_at=latest.at)
        if (latest.driver_version, latest.cuda_version) != (state.driver_version, state.cuda_version):
            conditions, condition, condition_changed = _condition_update(list(state.conditions or []), latest, now)
            versions = dict(driver_version=latest.driver_version, cuda_version=latest.cuda_version, conditions=conditions)
            if condition_changed:
                transition = versions
            else:
                updates.update(versions)
    xids = [
        GpuErrorEvent(node=node, report_seq=r.seq, position=i, gpu_index=x.gpu_index, xid=x.xid, at=x.at,
                      kind=(c := repair.classify(x.xid)).kind, action=c.action, mnemonic=c.mnemonic[:80], received_at=now)
        for r in new for i, x in enumerate(r.xids)
    ]
    write = dict(node_id=node.pk, reports=new, now=now, acked=acked, latest_seq=latest.seq if latest else None, values=updates)
    inserted: set[tuple[int, int]] = set()
    if xids or transition:  # rare: the Xids must not be lost if the reports are stored
        with transaction.atomic():
            if transition:  # announced by the one request that moves the versions it read on
                condition_changed = bool(NodeAgentState.objects.filter(
                    pk=node.pk, driver_version=state.driver_version, cuda_version=state.cuda_version, max_seq__lt=latest.seq,
                ).update(**transition))  # fmt: skip
            ingest_sql.reports_write(**write)
            if xids:
                inserted = ingest_sql.xids_insert(xids)
    else:
        ingest_sql.reports_write(**write)
    # Events for what this request stored: a duplicate delivery racing this one stores nothing.
    for x in (x for x in xids if (x.report_seq, x.position) in inserted):
        cls = repair.classify(x.xid)
        gpu = "an unknown GPU" if x.gpu_index is None else f"GPU {x.gpu_index}"
        hint = {"application": "the application must restart; the node is left alone",
                "reset": "the GPU needs a reset (repair ladder)", "fatal": "the node must be replaced",
                "unknown": "no rule covers it; a person should look"}[cls.kind]
        event_record(pool=node.pool, node=node, type=NORMAL if cls.kind == "application" else WARNING,
                     reason="XidError", now=now, message=f"Xid {x.xid} ({cls.description}) on {gpu}: {hint}")
    if condition_changed and condition is not None:
        if condition.status == "False":
            event_record(pool=node.pool, node=node, reason="CudaDriverMismatchResolved", message=condition.message, now=now)
        else:
            event_record(pool=node.pool, node=node, type=WARNING, reason=repair.CUDA_DRIVER_MISMATCH,
                         message=f"{condition.reason}: {condition.message}", now=now)
    if batch.acks:
        commands_ack(node=node, acks=batch.acks, now=now)
    commands = commands_deliver(node=node, now=now) if state.commands_pending or batch.acks else []
    return IngestResult(max(acked, state.acked_seq), len(new), len(batch.reports) - len(new) - len(rejected), rejected, commands)


_REPORT_PREFIX = re.compile(r"^reports\[[0-9]+\]\.?")
REFUSED_SHOWN = 3  # errors named in the event's message


def report_batch_refused(*, credential: AgentCredential, errors: list[FieldError], now: datetime | None = None) -> None:
    """Record that a batch from this (authenticated) agent was refused as bad input: a Warning
    event `ReportRejected` on its node. The message names the bad fields without the report's
    position in its batch (`gpus[3].DCGM_FI_DEV_FB_USED: ...`), so the same fault in every
    batch aggregates into one event whose count grows, as Kubernetes' event recorder does.
    The agent keeps the refused reports in its dead-letter file."""
    node = credential.node
    problems = list(dict.fromkeys(str(FieldError(_REPORT_PREFIX.sub("", e.field), e.message)) for e in errors))
    shown = "; ".join(problems[:REFUSED_SHOWN]) + (f"; and {len(problems) - REFUSED_SHOWN} more" if len(problems) > REFUSED_SHOWN else "")
    message = f"Report batch from the agent of {node.name} refused: {shown}"[:1000]
    logger.warning(message)
    event_record(pool=node.pool, node=node, type=WARNING, reason="ReportRejected", message=message, now=now)


# --- commands ---------------------------------------------------------------------------------


def agent_command_enqueue(*, node: Node, action: str, gpu_index: int | None = None, reason: str = "", now: datetime | None = None) -> AgentCommand:
    """Queue a node-local action for the agent (GPU reset, reboot, cordon acknowledgement); it
    goes out in the next report response until the agent acknowledges it."""
    if action not in AgentCommand.Action.values:
        raise ValidationError(f"must be one of {', '.join(AgentCommand.Action.values)}", field="action")
    with transaction.atomic():
        command = AgentCommand.objects.create(node=node, action=action, gpu_index=gpu_index, reason=reason[:300], created_at=now or timezone.now())
        NodeAgentState.objects.get_or_create(node=node)
        NodeAgentState.objects.filter(pk=node.pk).update(commands_pending=F("commands_pending") + 1)
    return command


def commands_deliver(*, node: Node, now: datetime) -> list[dict]:
    pending = list(AgentCommand.objects.filter(node=node, status=AgentCommand.Status.PENDING).values("id", "action", "gpu_index", "reason", "delivered_at"))
    if any(c["delivered_at"] is None for c in pending):
        AgentCommand.objects.filter(pk__in=[c["id"] for c in pending], delivered_at__isnull=True).update(delivered_at=now)
    return [{"id": c["id"], "action": c["action"], "gpu": c["gpu_index"], "reason": c["reason"]} for c in pending]


def command_finish(*, command_id: int, node_id: int, status: str, message: str, now: datetime) -> bool:
    """End a Pending command (acknowledged by its agent, or given up on by the repair pass) and
    count it off the node's pending ones; False if it was no longer Pending (the other won)."""
    with transaction.atomic():
        done = AgentCommand.objects.filter(pk=command_id, node_id=node_id, status=AgentCommand.Status.PENDING).update(
            status=status, message=message[:500], finished_at=now)
        if done:
            NodeAgentState.objects.filter(pk=node_id, commands_pending__gt=0).update(commands_pending=F("commands_pending") - 1)
    return bool(done)


def commands_ack(*, node: Node, acks, now: datetime) -> None:
    for ack in acks:
        status = AgentCommand.Status.SUCCEEDED if ack.ok else AgentCommand.Status.FAILED
        done = command_finish(command_id=ack.command_id, node_id=node.pk, status=status, message=ack.message, now=now)
        if done:
            command = AgentCommand.objects.get(pk=ack.command_id)
            event_record(pool=node.pool, node=node, type=NORMAL if ack.ok else WARNING,
                         reason="AgentCommandSucceeded" if ack.ok else "AgentCommandFailed", now=now,
                         message=f"{command.get_action_display()} on {node.name} {status.lower()}" + (f": {ack.message}" if ack.message else ""))


# --- watermarks -------------------------------------------------------------------------------


def pool_samples_rollup(*, now: datetime | None = None) -> int:
    """Write this minute's PoolSample for every live pool: the capacity water level, GPUs
    allocated to Running pods, queued pods, GPU memory used %, nodes by phase and by billing kind.
    Idempotent per (pool, minute): a second run in the same minute, from any worker, inserts
    nothing (unique constraint; the first sample of a minute stands). Returns the number of pools
    sampled."""
    minute = (now or timezone.now()).replace(second=0, microsecond=0)
    stats = selectors.pool_stats()
    allocated = selectors.allocated_gpus(pool_ids=[s.pool.pk for s in stats])
    rows = [
        PoolSample(pool=s.pool, minute=minute, capacity_gpus=s.capacity_gpus, gpu_memory_used_pct=s.gpu_memory_used_pct,
                   gpu_util_avg=s.gpu_util_avg, nodes_by_phase=s.nodes_by_phase, min_nodes=s.pool.min_nodes,
                   max_nodes=s.pool.max_nodes, allocated_gpus=allocated.get(s.pool.pk, 0.0),
                   pending_pods=pool_queue_length(s.pool), node_counts=s.pool.node_counts,
                   not_ready_nodes=s.not_ready_nodes)
        for s in stats
    ]
    PoolSample.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)


def node_reports_prune(*, now: datetime | None = None, max_rows: int = 50_000) -> int:
    """Delete raw reports received more than EBCLOUD_AGENT_REPORT_RETENTION_HOURS ago, at most
    `max_rows` per call. Rows are inserted in time order, so the cutoff is found by a binary
    search over the primary key (a few index lookups, no index on `received_at` to slow the
    ingest). Returns the number deleted."""
    cutoff = (now or timezone.now()) - timedelta(hours=settings.EBCLOUD_AGENT_REPORT_RETENTION_HOURS)
    first = NodeReport.objects.order_by("pk").values_list("pk", "received_at").first()
    if first is None or first[1] >= cutoff:
        return 0
    low, high = first[0], first[0] + max_rows  # delete ids in [first, boundary)
    newest_old = NodeReport.objects.filter(pk__lt=high).order_by("-pk").values_list("pk", "received_at").first()
    if newest_old[1] < cutoff:
        boundary = newest_old[0] + 1
    else:
        while low < high:  # smallest pk whose row is not older than the cutoff
            mid = (low + high) // 2
            row = NodeReport.objects.filter(pk__gte=mid).order_by("pk").values_list("pk", "received_at").first()
            if row is None or row[1] >= cutoff:
                high = mid
            else:
                low = row[0] + 1
        boundary = low
    deleted, _ = NodeReport.objects.filter(pk__lt=boundary).delete()
    return deleted
