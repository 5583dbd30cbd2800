"""Writes of the pod mirror: the read model (`pools.models.Pod`) follows a real cluster's pods.

Every write is keyed by the pod's `metadata.uid` and states the pod as the cluster last showed
it, so applying a change twice (a watch that resumes from an older resourceVersion after the
API server restarted, a relist after 410 Gone) leaves the same rows and records no second
event. A deleted pod keeps its row (`deleted_at`) for the hours it ran; a new pod with the same
namespace and name is a new row. The events of our nodes are written on transitions only:
`Scheduled` when kube-scheduler bound the pod to one of our nodes, `Completed` when it
succeeded there. The cluster's PriorityClasses are mirrored too (`priority_classes_replace`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction

from pools.core.priority import PriorityClass as CorePriorityClass
from pools.core.priority import default_class
from pools.models import Node, Pod, PoolEvent, PriorityClass, Team, WatchCursor
from pools.selectors.namespaces import namespace_teams
from pools.services.events import NORMAL

PODS = "pods"
_ROW_FIELDS = (
    "labels", "priority", "preemption_policy", "checkpointable", "cpu_milli", "memory_mib", "gpu_count", "gpu_milli", "gpu_shares",
    "gpu_models", "tolerations", "node_selector", "affinity", "duration_seconds", "document", "phase", "reason", "explanation",
    "nominated_node_name", "submitted_at", "started_at", "finished_at",
)  # fmt: skip
_UPDATED = (*_ROW_FIELDS, "team", "node", "gpu_indices", "hints", "deleted_at", "pending_since")
_REASON_LENGTH = Pod._meta.get_field("reason").max_length


@dataclass
class ApplyStats:
    """What applying changes did to the read model (and the events it wrote)."""

    created: int = 0
    updated: int = 0
    deleted: int = 0
    unchanged: int = 0
    events: int = 0

    def add(self, other: ApplyStats) -> None:
        self.created += other.created
        self.updated += other.updated
        self.deleted += other.deleted
        self.unchanged += other.unchanged
        self.events += other.events


class TeamOf:
    """A namespace's team, by `namespace_owner`'s rule: the admins' mapping first, then the team
    named like it (a team's own namespace, which has no mapping until a pod is submitted through
    the product: pods made with kubectl there are the team's, and billed to it), then the
    namespace's `ebcloud.io/team` label (`label_of` reads it from the cluster; asked once per
    namespace); None when none names a team."""

    def __init__(self, label_of: Callable[[str], str], labels: Mapping[str, str] | None = None):
        self.by_slug = dict(Team.objects.values_list("slug", "pk"))
        self.owned = {namespace: self.by_slug[slug] for namespace, slug in namespace_teams().items()}  # mappings and own namespaces
        self.labels = dict(labels or {})
        self.label_of = label_of

    def __call__(self, namespace: str) -> int | None:
        if namespace in self.owned:
            return self.owned[namespace]
        if namespace not in self.labels:
            self.labels[namespace] = self.label_of(namespace)
        return self.by_slug.get(self.labels[namespace])


def pods_apply(
    changes: Sequence[tuple[str, Mapping[str, Any]]],
    *,
    team_of: Callable[[str], int | None],
    now: datetime,
) -> ApplyStats:
    """Apply watch events (type, `kubernetes_pods.pod_fields`) in their order, in one
    transaction and a fixed number of statements per batch."""
    stats = ApplyStats()
    if not changes:
        return stats
    uids = {fields["uid"] for _, fields in changes}
    teams = {namespace: team_of(namespace) for namespace in {fields["namespace"] for _, fields in changes}}  # may ask the API: outside the transaction
    with transaction.atomic():
        rows = {pod.uid: pod for pod in Pod.objects.filter(uid__in=uids).select_for_update()}
        keys = {
            (f["namespace"], f["name"])
            for t, f in changes
            if f["uid"] not in rows and t != "DELETED"
        }
        predecessors = _live_by_key(keys)
        nodes = dict(
            Node.objects.filter(name__in={f["node_name"] for _, f in changes if f["node_name"]})
            .exclude(phase=Node.Phase.TERMINATED)
            .values_list("name", "pk")
        )
        nodes_by_id = Node.objects.select_related("pool").in_bulk(set(nodes.values()))
        new: dict[str, Pod] = {}
        events: list[PoolEvent] = []
        changed: dict[int, Pod] = {}
        for kind, fields in changes:
            uid = fields["uid"]
            pod = rows.get(uid) or new.get(uid)
            if kind == "DELETED":
                if pod is not None and pod.deleted_at is None:
                    _mark_deleted(pod, fields, now)
                    stats.deleted += 1
                    if pod.pk:
                        changed[pod.pk] = pod
                continue
            if pod is None:
                old = predecessors.pop((fields["namespace"], fields["name"]), None)
                if old is not None:  # the same name, a new pod: the old one was deleted meanwhile
                    _mark_deleted(old, {}, now)
                    changed[old.pk] = old
                pod = new[uid] = Pod(uid=uid, namespace=fields["namespace"], name=fields["name"])
            before = (pod.node_id, pod.phase)
            if not _set(pod, fields, teams[fields["namespace"]], nodes.get(fields["node_name"]), now):
                stats.unchanged += 1
                continue
            if pod.pk:
                changed[pod.pk] = pod
                stats.updated += 1
            events.extend(_transitions(pod, before, nodes_by_id, now))
        Pod.objects.bulk_update(list(changed.values()), _UPDATED, batch_size=200)
        Pod.objects.bulk_create(list(new.values()), batch_size=200)
        PoolEvent.objects.bulk_create(events)
    stats.events = len(events)
    stats.created = len(new)
    return stats


def pods_replace(
    listed: Iterable[Mapping[str, Any]], *, team_of: Callable[[str], int | None], now: datetime
) -> ApplyStats:
    """A relist: every listed pod applied as it is, and every mirrored pod the list no longer
    has marked deleted (it was deleted while nobody watched)."""
    listed = list(listed)
    stats = ApplyStats()
    for start in range(0, len(listed), 500):
        part = pods_apply(
            [("ADDED", f) for f in listed[start : start + 500]], team_of=team_of, now=now
        )
        stats.add(part)
    seen = {f["uid"] for f in listed}
    with transaction.atomic():
        gone = [pk for pk, uid in Pod.objects.live().exclude(uid="").select_for_update().values_list("pk", "uid") if uid not in seen]
        stats.deleted += _mark_deleted_many(gone, now)
    return stats


def pod_teams_refresh(*, team_of: Callable[[str], int | None]) -> int:
    """Give the mirrored pods of every namespace the team it maps to now (after a mapping or a
    namespace label changed): one read of the (namespace, team) pairs, one UPDATE per pair that
    is wrong. The number of pods moved."""
    mirrored = Pod.objects.live().exclude(uid="")
    moved = 0
    for namespace, team in list(mirrored.order_by().values_list("namespace", "team_id").distinct()):
        wanted = team_of(namespace)
        if wanted != team:
            rows = mirrored.filter(namespace=namespace)
            moved += rows.filter(team__isnull=True).update(team_id=wanted) if team is None else rows.filter(team_id=team).update(team_id=wanted)
    return moved


def cursor_get(resource: str = PODS) -> WatchCursor:
    return WatchCursor.objects.get_or_create(resource=resource)[0]


def cursor_save(
    resource_version: str, *, now: datetime, listed: bool = False, resource: str = PODS
) -> None:
    values = {"resource_version": resource_version, "updated_at": now}
    if listed:
        values["listed_at"] = now
    WatchCursor.objects.update_or_create(resource=resource, defaults=values)


def _live_by_key(keys: set[tuple[str, str]]) -> dict[tuple[str, str], Pod]:
    """The live rows of these (namespace, name) keys, in one plain query (an OR of hundreds of
    pairs costs more to build than to run)."""
    if not keys:
        return {}
    rows = Pod.objects.live().filter(namespace__in={ns for ns, _ in keys}, name__in={name for _, name in keys}).select_for_update()
    return {(p.namespace, p.name): p for p in rows if (p.namespace, p.name) in keys}


def _set(pod: Pod, fields: Mapping[str, Any], team_id: int | None, node_id: int | None, now: datetime) -> bool:
    """Make the row state the pod as given; False when it already did. A reason is free text
    (a kubelet's `OutOf<resource>`, whatever a status writer sets): its start is kept.

    A new row waits from the pod's creation (an evicted pod comes back as a new pod, with a new
    uid and creationTimestamp: a new row); a row seen Pending again after it ran, from `now`."""
    wanted = {name: fields[name] for name in _ROW_FIELDS}
    wanted["reason"] = wanted["reason"][:_REASON_LENGTH]
    wanted["team_id"], wanted["node_id"] = team_id, node_id
    if not pod.pk:
        wanted["pending_since"] = fields["submitted_at"]
    elif fields["phase"] == Pod.Phase.PENDING and pod.phase != Pod.Phase.PENDING:
        wanted["pending_since"] = now
    if fields["phase"] != "Pending":
        wanted["hints"] = []
    if (
        pod.pk
        and all(getattr(pod, name) == value for name, value in wanted.items())
        and pod.deleted_at is None
    ):
        return False
    for name, value in wanted.items():
        setattr(pod, name, value)
    pod.deleted_at = None
    return True


def _mark_deleted(pod: Pod, fields: Mapping[str, Any], now: datetime) -> None:
    """A pod deleted from the cluster: its row stays for the hours it ran, ended now if it was
    still running, and leaves every list."""
    if fields:
        for name in ("phase", "finished_at", "started_at"):
            setattr(pod, name, fields[name])
    if pod.phase in (Pod.Phase.PENDING, Pod.Phase.RUNNING):
        if pod.phase == Pod.Phase.RUNNING and pod.finished_at is None:
            pod.finished_at = now
        pod.phase, pod.reason = Pod.Phase.FAILED, "Deleted"
    pod.deleted_at = now
    pod.hints = []


def _mark_deleted_many(pks: list[int], now: datetime) -> int:
    """`_mark_deleted` for many rows, in three UPDATEs per 10,000 rows."""
    marked = 0
    for start in range(0, len(pks), 10_000):
        rows = Pod.objects.filter(pk__in=pks[start : start + 10_000])
        rows.filter(phase=Pod.Phase.RUNNING, finished_at__isnull=True).update(finished_at=now)
        rows.filter(phase__in=(Pod.Phase.PENDING, Pod.Phase.RUNNING)).update(phase=Pod.Phase.FAILED, reason="Deleted")
        marked += rows.update(deleted_at=now, hints=[])
    return marked


def _transitions(
    pod: Pod, before: tuple[int | None, str], nodes: Mapping[int, Node], now: datetime
) -> list[PoolEvent]:
    node_before, phase_before = before
    node = nodes.get(pod.node_id) if pod.node_id else None
    if node is None:
        return []
    events = []
    if node_before != pod.node_id:
        events.append(
            _event(
                node,
                "Scheduled",
                f"Successfully assigned {pod.key} to {node.name}",
                pod.submitted_at if pod.started_at is None else pod.started_at,
                now,
            )
        )
    if pod.phase == Pod.Phase.SUCCEEDED and phase_before != Pod.Phase.SUCCEEDED:
        events.append(
            _event(
                node, "Completed", f"Pod {pod.key} succeeded on {node.name}", pod.finished_at, now
            )
        )
    return events


def _event(node: Node, reason: str, message: str, at: datetime | None, now: datetime) -> PoolEvent:
    at = at or now
    return PoolEvent(
        pool=node.pool,
        node=node,
        type=NORMAL,
        reason=reason,
        message=message,
        first_timestamp=at,
        last_timestamp=at,
    )


def priority_classes_replace(classes: Sequence[Mapping[str, Any]]) -> list[str]:
    """Make the PriorityClass rows what the cluster has (`ClusterPods.priority_classes`): on a
    real cluster the classes are the cluster's objects, as its pods are. One transaction;
    returns the names added, changed or removed.

    A class is added by INSERT ... ON CONFLICT (name) DO UPDATE: two scheduler passes that
    mirror a new class at once both insert it (the row lock of `select_for_update` covers only
    rows that exist), and the second then updates the row the first committed instead of
    failing on the unique name, which would cost its pass the pending pods' hints.

    The cluster may hold several `globalDefault` classes: kube-apiserver's admission check reads
    a cache that can lag, so two created at once may both be accepted. Its Priority plugin then
    gives pods that name no class the default of lowest value, and the rows (one default at
    most, a constraint) mark that one only: `_default_of`."""
    default = _default_of(classes)
    wanted = {c["name"]: {**c, "global_default": c["name"] == default} for c in classes}
    fields = ("value", "preemption_policy", "global_default", "description")
    changed = []
    with transaction.atomic():
        rows = {row.name: row for row in PriorityClass.objects.select_for_update()}
        gone = [name for name in rows if name not in wanted]
        PriorityClass.objects.filter(name__in=gone).delete()
        PriorityClass.objects.filter(global_default=True).exclude(name=default).update(global_default=False)
        for name, fields_of in sorted(wanted.items(), key=lambda kv: kv[1]["global_default"]):  # the default last: one at a time
            row = rows.get(name)
            if row is None:
                PriorityClass.objects.bulk_create(
                    [PriorityClass(name=name, **{f: fields_of[f] for f in fields})], update_conflicts=True, unique_fields=["name"], update_fields=list(fields)
                )
            elif any(getattr(row, f) != fields_of[f] for f in fields):
                PriorityClass.objects.filter(pk=row.pk).update(**{f: fields_of[f] for f in fields})
            else:
                continue
            changed.append(name)
    return sorted(changed + gone)


def _default_of(classes: Sequence[Mapping[str, Any]]) -> str:
    """The name of the class that is the cluster's default ("" when none is), as kube-apiserver
    resolves several `globalDefault` ones (its Priority plugin's `getDefaultPriorityClass`):
    the lowest value (`pools.core.priority.default_class`). Of equal values Kubernetes takes the
    first its cache lists, which is no fixed order; the rows take the first name, so that
    every pass marks the same one."""
    found = default_class({
        c["name"]: CorePriorityClass(name=c["name"], value=c["value"], preemption_policy=c["preemption_policy"], global_default=True)
        for c in classes if c["global_default"]
    })  # fmt: skip
    return found.name if found else ""
