"""The pods and namespaces of a real cluster, read for the pod mirror (pools/controllers/pod_mirror.py):
a paginated list, a watch from a resourceVersion with bookmarks, and the translation of the
API's Pod JSON into the fields of the read model (`pools.models.Pod`).

The translation counts a pod's requests exactly as kube-scheduler v1.37 does (`pod_requests`),
since the mirror, the scheduler extender and the pending-pod hints must agree with the scheduler
that binds the pods. The responses are read as JSON without the client's model classes: a
mirror reads every pod of a cluster and a watch can deliver thousands of events a second.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.utils.quantity import parse_quantity
from kubernetes.watch.watch import iter_resp_lines

from pools.core.durations import parse_duration
from pools.core.podspec import (
    ANNOTATION_CHECKPOINTABLE,
    ANNOTATION_DURATION,
    ANNOTATION_GPU_MODELS,
    GPU_RESOURCE,
    GPU_SHARE_RESOURCE,
    MAX_DURATION_SECONDS,
    MAX_REQUEST,
    gpu_request,
)
from pools.core.priority import PREEMPT_LOWER_PRIORITY, SYSTEM_PREFIX
from pools.core.scheduling.nodes import MILLI
from pools.providers.kubernetes import api_client, request_timeout

TEAM_LABEL = "ebcloud.io/team"
PAGE_SIZE = 500
# The resources a pod may set at pod level (`IsSupportedPodLevelResource`, helpers.go).
POD_LEVEL_RESOURCES = frozenset({"cpu", "memory"})
HUGEPAGES_PREFIX = "hugepages-"


class WatchExpired(Exception):
    """410 Gone: the resourceVersion is older than the API server keeps; list again."""


class CursorAhead(WatchExpired):
    """The resourceVersion is ahead of the API server's (its etcd was restored from a backup, or
    the kubeconfig now names another cluster): a watch from it would wait in silence until the
    server caught up, missing every change meanwhile; list again."""


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED | MODIFIED | DELETED | BOOKMARK
    resource_version: str
    pod: dict[str, Any]  # the API's JSON (for BOOKMARK only metadata.resourceVersion)


class ClusterPods:
    """List and watch of the cluster's pods and namespaces, as JSON."""

    def __init__(self, api: client.ApiClient | None = None):
        self.api = api or api_client()
        self.core = client.CoreV1Api(self.api)

    def list(self) -> tuple[list[dict[str, Any]], str]:
        """Every pod of the cluster (pages of `PAGE_SIZE`, one consistent snapshot) and the
        resourceVersion to watch from. A continue token that expired between two pages (410:
        etcd compacted the snapshot meanwhile) is answered by one list of them all, as
        client-go's pager falls back to (`FullListIfExpired`); before, the mirror stopped."""
        pods, token = [], None
        while True:
            try:
                response = self.core.list_pod_for_all_namespaces(
                    limit=PAGE_SIZE, _continue=token, _preload_content=False, _request_timeout=request_timeout()
                )
            except ApiException as exc:
                if exc.status != 410 or token is None:
                    raise
                body = _loads(self.core.list_pod_for_all_namespaces(_preload_content=False, _request_timeout=request_timeout()).data)
                return list(body.get("items") or ()), body["metadata"]["resourceVersion"]
            body = _loads(response.data)
            pods.extend(body.get("items") or ())
            token = body["metadata"].get("continue")
            if not token:
                return pods, body["metadata"]["resourceVersion"]

    def priority_classes(self) -> list[dict[str, Any]]:
        """The cluster's PriorityClasses (scheduling.k8s.io/v1) but the built-in `system-`
        ones, as (name, value, preemptionPolicy, globalDefault, description) fields."""
        body = _loads(client.SchedulingV1Api(self.api).list_priority_class(_preload_content=False, _request_timeout=request_timeout()).data)
        return [
            {
                "name": item["metadata"]["name"],
                "value": int(item.get("value") or 0),
                "preemption_policy": item.get("preemptionPolicy") or PREEMPT_LOWER_PRIORITY,
                "global_default": bool(item.get("globalDefault")),
                "description": item.get("description") or "",
            }
            for item in body.get("items") or ()
            if not item["metadata"]["name"].startswith(SYSTEM_PREFIX)
        ]

    def watch(self, *, resource_version: str, timeout_seconds: int) -> Iterator[WatchEvent]:
        """The changes after `resource_version` until the server ends the watch (after
        `timeout_seconds`). Raises WatchExpired on 410 Gone, CursorAhead where the server has not
        reached `resource_version`; connection errors propagate (the
        caller watches again from the last resourceVersion it stored).

        A healthy watch is never silent for longer than `timeout_seconds` (the server ends it
        then), so a read that waits `EBCLOUD_KUBE_TIMEOUT_SECONDS` past that is a dead link (a
        partition: no FIN, no RST) and fails with a read timeout, as client-go's HTTP/2 health
        check drops such a connection."""
        self._reachable(resource_version)
        try:
            response = self.core.list_pod_for_all_namespaces(
                watch=True, resource_version=resource_version, allow_watch_bookmarks=True,
                timeout_seconds=timeout_seconds, _preload_content=False,
                _request_timeout=request_timeout(read=timeout_seconds + request_timeout()[1]),
            )  # fmt: skip
        except ApiException as exc:
            if exc.status == 410:
                raise WatchExpired(str(exc.reason)) from exc
            raise
        try:
            for line in iter_resp_lines(response):
                event = _loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    if obj.get("code") == 410:
                        raise WatchExpired(obj.get("message", "resourceVersion too old"))
                    raise ApiException(
                        status=obj.get("code"), reason=obj.get("message", "watch error")
                    )
                yield WatchEvent(
                    type=event["type"], resource_version=obj["metadata"]["resourceVersion"], pod=obj
                )
        finally:
            response.release_conn()

    def _reachable(self, resource_version: str) -> None:
        """Raise CursorAhead where the server has not reached `resource_version`: one list of at
        most one pod "not older than" it, which the server answers at once where it has, and
        with 504 `ResourceVersionTooLarge` after a few seconds where it has not (client-go's
        reflector lists again on that answer too). The mirror keeps its cursor across restarts,
        so a process that starts after a restore would otherwise resume into that silence."""
        try:
            response = self.core.list_pod_for_all_namespaces(
                limit=1, resource_version=resource_version, resource_version_match="NotOlderThan",
                _preload_content=False, _request_timeout=request_timeout(),
            )  # fmt: skip
            try:
                response.data  # read whole: a connection given back with its body unread garbles the next request on it  # noqa: B018
            finally:
                response.release_conn()
        except ApiException as exc:
            if exc.status == 504 and "ResourceVersionTooLarge" in str(exc.body or ""):
                raise CursorAhead(f"the API server has not reached resourceVersion {resource_version}: {_status_message(exc)}") from exc
            raise

    def namespace_teams(self) -> dict[str, str]:
        """Each namespace's `ebcloud.io/team` label (namespaces without one are left out)."""
        body = json.loads(self.core.list_namespace(_preload_content=False, _request_timeout=request_timeout()).data)
        return {
            item["metadata"]["name"]: labels[TEAM_LABEL]
            for item in body.get("items") or ()
            if TEAM_LABEL in (labels := item["metadata"].get("labels") or {})
        }

    def namespace_team(self, name: str, *, timeout: float | None = None) -> str:
        """The namespace's `ebcloud.io/team` label ("" without one, or without the namespace);
        `timeout` in seconds bounds the request (the scheduler extender's caller waits)."""
        try:
            namespace = json.loads(self.core.read_namespace(name, _preload_content=False, _request_timeout=timeout or request_timeout()).data)
        except ApiException as exc:
            if exc.status == 404:
                return ""
            raise
        return (namespace["metadata"].get("labels") or {}).get(TEAM_LABEL, "")


# ---------------------------------------------------------------------------------------------
# The API's Pod JSON -> the read model's fields


def pod_fields(pod: Mapping[str, Any], *, now: datetime) -> dict[str, Any]:
    """The read model's fields of one pod (all but `team` and `node`, which the mirror resolves:
    `node_name` names the Node it is bound to).

    The API server takes a pod asking for any amount (`nvidia.com/gpu: 40000`) or to run for any
    time; the read model's columns do not hold every such number. What is past the most the
    product's own API lets a pod ask (`MAX_REQUEST`, `MAX_DURATION_SECONDS`) is recorded as that
    most, which no node has either: the pod stays as Pending as it would, and one such pod does
    not fail the mirror's every write."""
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    annotations = meta.get("annotations") or {}
    requests = pod_requests(spec)
    whole = min(math.ceil(requests.get(GPU_RESOURCE, 0)), MAX_REQUEST[GPU_RESOURCE])
    shares = min(math.ceil(requests.get(GPU_SHARE_RESOURCE, 0)), (MAX_REQUEST[GPU_RESOURCE] - whole) * MILLI)
    gpus, gpu_milli = gpu_request(whole, shares)
    scheduled = next(
        (c for c in status.get("conditions") or () if c.get("type") == "PodScheduled"), {}
    )
    phase = status.get("phase") or "Pending"
    if phase not in ("Pending", "Running", "Succeeded", "Failed"):
        phase = (
            "Pending" if not spec.get("nodeName") else "Running"
        )  # Unknown: the node stopped reporting
    unschedulable = phase == "Pending" and scheduled.get("status") == "False"
    return {
        "uid": meta["uid"],
        "namespace": meta["namespace"],
        "name": meta["name"],
        "labels": dict(meta.get("labels") or {}),
        "priority": int(spec.get("priority") or 0),
        "preemption_policy": spec.get("preemptionPolicy") or PREEMPT_LOWER_PRIORITY,
        "checkpointable": annotations.get(ANNOTATION_CHECKPOINTABLE, "").lower() == "true",
        "cpu_milli": min(math.ceil(requests.get("cpu", 0) * 1000), MAX_REQUEST["cpu"]),
        "memory_mib": min(math.ceil(requests.get("memory", 0) / 2**20), MAX_REQUEST["memory"]),
        "gpu_count": gpus,
        "gpu_milli": gpu_milli,
        "gpu_shares": shares,
        "gpu_models": [
            m.strip() for m in annotations.get(ANNOTATION_GPU_MODELS, "").split(",") if m.strip()
        ],
        "tolerations": list(spec.get("tolerations") or ()),
        "node_selector": dict(spec.get("nodeSelector") or {}),
        "affinity": {"nodeAffinity": node_affinity}
        if (node_affinity := (spec.get("affinity") or {}).get("nodeAffinity"))
        else {},
        "duration_seconds": _duration(annotations),
        "document": {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": _metadata_shown(meta),
            "spec": spec,
        },
        "phase": phase,
        "reason": scheduled.get("reason", "")
        if unschedulable
        else (status.get("reason") or ("Scheduled" if spec.get("nodeName") else "")),
        "explanation": scheduled.get("message", "") if unschedulable else "",
        "node_name": spec.get("nodeName") or "",
        "nominated_node_name": (status.get("nominatedNodeName") or "") if phase == "Pending" else "",
        "submitted_at": _time(meta.get("creationTimestamp")) or now,
        "started_at": _time(status.get("startTime")) if phase != "Pending" else None,
        "finished_at": _finished_at(status, now) if phase in ("Succeeded", "Failed") else None,
    }


def pod_requests(spec: Mapping[str, Any]) -> dict[str, Decimal]:
    """The pod's effective requests, counted as kube-scheduler's NodeResourcesFit filter counts
    them: `PodRequests` of k8s.io/component-helpers/resource/helpers.go (v1.37), with pod-level
    resources on (PodLevelResources, on by default since 1.34) and the spec's own values (a pod
    being scheduled has no resized status to count).

    Three steps, in the helper's order:
    1. the containers' aggregate (`_aggregate_container_requests`: sidecars are added to the
       regular containers, init containers are a floor);
    2. the pod-level requests (`spec.resources`, only cpu, memory and hugepages-*) replace that
       aggregate for the resources they name (`applyPodLevelResources`);
    3. the pod overhead (`spec.overhead`, set by the RuntimeClass admission) is added on top.
    A stored pod has been defaulted by the API server; the defaults it adds are applied here too
    (`_container_requests`, `_pod_level_requests`), so a spec read elsewhere counts the same."""
    total = _aggregate_container_requests(spec)
    total.update(_pod_level_requests(spec.get("resources") or {}, containers=total))
    for key, amount in (spec.get("overhead") or {}).items():
        total[key] = total.get(key, Decimal(0)) + parse_quantity(amount)
    return total


def _aggregate_container_requests(spec: Mapping[str, Any]) -> dict[str, Decimal]:
    """`aggregateContainerResourcesByFn` of helpers.go, the KEP-753 formula for sidecars.

    Regular containers run together: their requests add up. A sidecar (an init container with
    `restartPolicy: Always`) starts in the init sequence and keeps running beside them, so its
    request is added to that sum too. A regular init container runs alone after the sidecars
    declared before it have started: it needs their sum plus its own request, and the pod needs
    the largest such value of the init sequence (each sidecar's own step counts as the sum of the
    sidecars so far). The pod's request of a resource is the larger of the running sum and that
    init peak."""
    total: dict[str, Decimal] = {}
    for container in spec.get("containers") or ():
        _add(total, _container_requests(container))
    sidecars: dict[str, Decimal] = {}  # the sidecars started so far
    peak: dict[str, Decimal] = {}  # the most any step of the init sequence needs
    for container in spec.get("initContainers") or ():
        own = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            step = sidecars
        else:
            step = dict(sidecars)
            _add(step, own)
        for key, amount in step.items():
            if key not in peak or amount > peak[key]:
                peak[key] = amount
    for key, amount in peak.items():
        if key not in total or amount > total[key]:
            total[key] = amount
    return total


def _container_requests(container: Mapping[str, Any]) -> dict[str, Decimal]:
    """A container's requests, a limit without a request counting as that request: the API
    server's `SetDefaults_Pod` (pkg/apis/core/v1/defaults.go) sets it so before the scheduler
    sees the pod. For an extended resource such as `nvidia.com/gpu` or `ebcloud.io/gpu-milli` the
    limit is the only way to ask (the API server refuses a request without, or unequal to, it)."""
    resources = container.get("resources") or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {key: parse_quantity(amount) for key, amount in merged.items()}


def _pod_level_requests(
    resources: Mapping[str, Any], *, containers: Mapping[str, Decimal]
) -> dict[str, Decimal]:
    """The pod-level requests that replace the containers' aggregate (`applyPodLevelResources`
    of helpers.go): only the resources `IsSupportedPodLevelResource` names (cpu, memory,
    hugepages-*); the API server refuses others at pod level.

    A pod-level limit without a request is completed as the API server's defaulting does
    (`defaultPodLevelRequests`, pkg/api/pod/util.go): cpu or memory that a container requests
    default to the containers' aggregate (here: leave it), anything else to the limit."""
    requests = {
        key: parse_quantity(amount)
        for key, amount in (resources.get("requests") or {}).items()
        if _pod_level(key)
    }
    for key, limit in (resources.get("limits") or {}).items():
        if key in requests or not _pod_level(key):
            continue
        if key in containers and not key.startswith(HUGEPAGES_PREFIX):
            continue  # defaulted to the aggregate, which `pod_requests` already holds
        requests[key] = parse_quantity(limit)
    return requests


def _pod_level(key: str) -> bool:
    return key in POD_LEVEL_RESOURCES or key.startswith(HUGEPAGES_PREFIX)


def _add(total: dict[str, Decimal], more: Mapping[str, Decimal]) -> None:
    for key, amount in more.items():
        total[key] = total.get(key, Decimal(0)) + amount


def _duration(annotations: Mapping[str, str]) -> int | None:
    try:
        return (
            min(parse_duration(annotations[ANNOTATION_DURATION]), MAX_DURATION_SECONDS)
            if ANNOTATION_DURATION in annotations
            else None
        )
    except ValueError:
        return None  # a free-text annotation the product cannot read: the pod runs until it ends


def _metadata_shown(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata kept in the pod's document: what the pages show, the annotations the
    scale-down asks (safe-to-evict, a mirror pod's `kubernetes.io/config.mirror`) and the
    ownerReferences, which say whether a controller would recreate the pod and whether it is a
    DaemonSet's (`Pod.controller_kind`)."""
    return {
        k: meta[k]
        for k in ("name", "namespace", "uid", "labels", "annotations", "ownerReferences")
        if meta.get(k)
    }


def _finished_at(status: Mapping[str, Any], now: datetime) -> datetime:
    """When the last container ended; `now` when the kubelet reported no end (the moment the
    mirror saw the pod finished)."""
    ends = [
        _time(terminated.get("finishedAt"))
        for item in status.get("containerStatuses") or ()
        if (terminated := (item.get("state") or {}).get("terminated"))
    ]
    ends = [end for end in ends if end is not None]
    return max(ends) if ends else now


def _time(text: str | None) -> datetime | None:
    """The time the API server gives; None for none, or for one Python cannot hold (a status
    writer may set the year 0000, which Go's time keeps)."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
    except (ValueError, OverflowError):
        return None


def _status_message(exc: ApiException) -> str:
    """The message of the API server's Status in an error's body, else its reason."""
    try:
        return str(json.loads(exc.body).get("message") or exc.reason)
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason)


def _loads(data: bytes | str) -> Any:
    """The API server's JSON, each NUL character (U+0000, which a Go string may hold: in an
    annotation, a container's args, a status reason) read as U+FFFD, for PostgreSQL's text and
    jsonb hold none and would refuse the mirror's whole batch. JSON spells NUL `\\u0000`, so
    text without that is read as it is."""
    body = json.loads(data)
    return _without_nul(body) if (b"\\u0000" if isinstance(data, bytes) else "\\u0000") in data else body


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {_without_nul(key): _without_nul(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_without_nul(item) for item in value]
    return value
