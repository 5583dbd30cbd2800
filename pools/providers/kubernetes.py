"""`ClusterBackend` for a real Kubernetes cluster, through its API (the official `kubernetes`
client). Chosen by `EBCLOUD_CLUSTER=kubernetes`; the cluster is the one of `KUBECONFIG`
(`EBCLOUD_KUBECONFIG`, or the client's default), or the in-cluster service account.

What Kubernetes defines is done its way:
- a node is registered by its kubelet, never by us: `register_node` checks that the Node exists
  (and is Ready) and refuses with `NodeNotRegistered` while it does not, so the controller
  retries and, past its attempts, reports it;
- a GPU share (`ebcloud.io/gpu-milli`) is an extended resource that we advertise as Kubernetes
  documents it (a patch of the Node's status: 1000 per `nvidia.com/gpu` it has, capacity and
  allocatable each from its own count), at registration and again whenever the Node offers
  other than that: a kubelet that restarts zeroes the extended resources no device plugin
  reports, and a GPU that fails or leaves (the device plugin reports fewer, or none) takes its
  shares with it, so that kube-scheduler counts shares as it counts GPUs and never places a
  share where no GPU is;
- the pool's labels and taints are applied by server-side apply under our own field manager, so
  labels and taints that others set survive, and a label we no longer want is removed by the
  next apply (level-triggered: every call states the whole wanted set);
- cordon is `spec.unschedulable` (a merge patch, like `kubectl cordon`, outside our apply set);
  a Node that is gone (deleted by someone, or by the cloud's node controller) has nothing to
  cordon, so a drain goes on (to no pods, then the release) instead of failing on the 404;
- the state of every node is read with one list (`nodes_state`), once per lifecycle pass, to
  find labels, taints or cordons changed by others and put ours back;
- eviction goes through the Eviction API (policy/v1): a PodDisruptionBudget's refusal (429) is
  "not now", reported to the caller, never forced; so is any other refusal (500 for a pod under
  two budgets, 403, an API server out of reach), with the API's message, so that a drain waits
  and then honours its deadline instead of failing its pool's pass; a pod already terminating
  is listed as such and not evicted again; a plan asks beforehand how many of which pods
  the budgets let go (`disruption_budgets`, read as the API reads them);
- the pods a drain must move are those `kubectl drain` evicts: DaemonSet pods and mirror (static)
  pods stay, finished pods are skipped;
- every call is bounded (`request_timeout`: connecting, the TLS handshake included, and each
  read), so a hung API server or a silent link fails the call instead of stalling the pass that
  made it; any failure to read or write a Node (a refusal such as 403 or 500, a timeout, an API
  server out of reach) is a `ClusterRefused` with the API's message, which the controller turns
  into a Warning event and a retry with backoff for that node alone.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime

import urllib3
from django.conf import settings
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.utils.quantity import parse_quantity

from pools.core.disruption import NODE_OPT_OUTS, DisruptionBudget, disruption_budgets
from pools.core.podspec import GPU_RESOURCE, GPU_SHARE_RESOURCE
from pools.core.scheduling.nodes import MILLI
from pools.core.scheduling.taint_eviction import TIME_ADDED, carried_time_added
from pools.providers.base import (
    DRAIN_CORDON_ANNOTATION,
    ClusterRefused,
    EvictionRefused,
    NodeState,
    PodInfo,
    ProviderError,
)

FIELD_MANAGER = "ebcloud.io/node-pools"
# Who wrote a drain's cordon: the API server records the field manager of `spec.unschedulable`
# and hands the field to whoever changes it next (`kubectl uncordon`, then `kubectl cordon`),
# which the drain's annotation alone would outlive.
DRAIN_FIELD_MANAGER = "ebcloud.io/node-drain"
# The client's default field manager, which wrote a drain's cordon before it had one of its own.
EARLIER_DRAIN_FIELD_MANAGER = "OpenAPI-Generator"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
MANAGED_TAINTS_ANNOTATION = "ebcloud.io/managed-taints"  # (key, effect) of the taints we applied last
CHECKPOINTABLE_ANNOTATION = "ebcloud.io/checkpointable"


# What the client raises when the API server cannot be reached, refuses, or is not configured.
CLUSTER_UNREACHABLE = (ApiException, config.ConfigException, urllib3.exceptions.HTTPError)


class NodeNotRegistered(ProviderError):
    reason = "NodeNotRegistered"


def request_timeout(read: float = 0.0) -> tuple[float, float]:
    """(connect, read) seconds for one API call: `EBCLOUD_KUBE_TIMEOUT_SECONDS` for both unless
    `read` is given (a watch, silent between events for as long as the server keeps it open).
    Without it the client waits for ever on an API server that accepted and never answers."""
    seconds = float(settings.EBCLOUD_KUBE_TIMEOUT_SECONDS)
    return (seconds, float(read or seconds))


def refused(what: str, exc: Exception) -> ClusterRefused:
    """The `ClusterRefused` for a failed call: what was asked (verb, resource, name) and the answer."""
    return ClusterRefused(f"the API server did not {what}: {refusal_text(exc)}")


def api_client(kubeconfig: str = "") -> client.ApiClient:
    """A client for the configured cluster: a kubeconfig file, else the in-cluster account."""
    path = kubeconfig or settings.EBCLOUD_KUBECONFIG
    if path:
        return config.new_client_from_config(config_file=path)
    try:
        return config.new_client_from_config()
    except config.ConfigException:
        config.load_incluster_config()
        return client.ApiClient()


class KubernetesCluster:
    """The pools' nodes and pods in a real cluster (see the module docstring for the rules)."""

    def __init__(self, api: client.ApiClient | None = None):
        self.core = client.CoreV1Api(api or api_client())
        self._listed: dict[str, dict] = {}  # the Nodes of the last `nodes_state`, as JSON

    def register_node(self, *, name: str, now: datetime, gpus: int = 0) -> None:
        try:
            node = self.core.read_node(name, _request_timeout=request_timeout())
        except CLUSTER_UNREACHABLE as exc:
            if getattr(exc, "status", None) == 404:
                raise NodeNotRegistered(f"node {name} has not registered with the cluster yet") from exc
            raise refused(f"get nodes/{name}", exc) from exc
        ready = next((c.status for c in node.status.conditions or () if c.type == "Ready"), "Unknown")
        if ready != "True":
            raise NodeNotRegistered(f"node {name} registered but is not Ready (Ready={ready})")
        if gpus and not _gpus_allocatable(node.status.allocatable):
            raise NodeNotRegistered(f"node {name} is Ready but offers no GPU yet (nvidia.com/gpu allocatable): its GPU device plugin has not started")
        if not _shares_advertised(node.status.capacity, node.status.allocatable):
            self.advertise_gpu_shares(name=name, status={"capacity": node.status.capacity, "allocatable": node.status.allocatable})

    def advertise_gpu_shares(self, *, name: str, status: Mapping[str, Mapping[str, str] | None] | None = None) -> None:
        """The GPU-share resource in the Node's capacity and allocatable, 1000 per GPU of each
        (a merge patch of the status: other resources stay as the kubelet wrote them). A node
        whose GPUs are gone gets 0, so kube-scheduler places no share there until they return."""
        if status is None:
            listed = self._listed.get(name) or self._read(name)
            status = listed.get("status") or {}
        body = {"status": {side: {GPU_SHARE_RESOURCE: str(_shares_wanted(status.get(side)))} for side in ("capacity", "allocatable")}}
        try:
            self.core.patch_node_status(name, body, _request_timeout=request_timeout())
        except CLUSTER_UNREACHABLE as exc:
            raise refused(f"patch nodes/{name}/status (GPU shares)", exc) from exc

    def _read(self, name: str) -> dict:
        """The Node as JSON; `ClusterRefused` when it cannot be read (404 included: gone)."""
        try:
            return json.loads(self.core.read_node(name, _preload_content=False, _request_timeout=request_timeout()).data)
        except CLUSTER_UNREACHABLE as exc:
            raise refused(f"get nodes/{name}", exc) from exc

    def node_apply(self, *, name: str, labels: Mapping[str, str], taints: Sequence[Mapping[str, str]], applied_taints: Sequence[Mapping[str, str]] = ()) -> None:
        """Labels and taints in one server-side apply under our field manager.

        Labels are a map: our manager owns exactly the keys we apply, so another manager's labels
        stay, and a key we stop applying is removed. `spec.taints` is an atomic list in the API
        (one owner for the whole list), so the apply carries the taints others set too: ours are
        those recorded in our annotation at the last apply, the rest are kept as they are. The
        apply is conditional on the Node's resourceVersion: a concurrent change (409) is read
        again and retried. The Node as this pass's `nodes_state` listed it serves for the first
        try (no read of its own: one call per node relabelled). A taint written back keeps its
        `timeAdded` (the NoExecute clock of the node lifecycle controller's `unreachable` taint,
        say): the list is replaced whole, so a taint written without it would lose its clock."""
        wanted = [_taint(t) for t in taints]
        keys = {(t["key"], t["effect"]) for t in wanted}
        node = self._listed.pop(name, None)
        for _ in range(5):
            node = node or self._read(name)
            annotations = node["metadata"].get("annotations") or {}
            ours_before = recorded_taints(annotations) | {(t["key"], t["effect"]) for t in applied_taints}
            present = node.get("spec", {}).get("taints") or ()
            others = [
                _taint(t) for t in present
                if (t["key"], t["effect"]) not in ours_before and (t["key"], t["effect"]) not in keys
            ]  # fmt: skip
            body = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "resourceVersion": node["metadata"]["resourceVersion"],
                    "labels": dict(labels),
                    "annotations": {MANAGED_TAINTS_ANNOTATION: json.dumps(sorted(keys))},
                },
                "spec": {"taints": others + carried_time_added(present, wanted)},
            }
            try:
                self.core.patch_node(
                    name, body, field_manager=FIELD_MANAGER, force=True, _content_type="application/apply-patch+yaml", _request_timeout=request_timeout()
                )
                return
            except CLUSTER_UNREACHABLE as exc:
                if getattr(exc, "status", None) != 409:
                    raise refused(f"apply (patch) labels and taints of nodes/{name}", exc) from exc
                node = None
        raise ProviderError(f"node {name} kept changing while its labels and taints were applied; the next pass retries")

    def nodes_state(self, *, names: Sequence[str]) -> dict[str, NodeState]:
        """One list of every Node (one API call, however many nodes): a label selector on our
        pool label would hide exactly the nodes whose pool label someone removed, the drift
        this read is for. Nodes not in `names` are dropped here. Read as JSON: the client's
        model classes would cost more than the request at a thousand Nodes."""
        wanted = set(names)
        if not wanted:
            return {}
        try:
            items = json.loads(self.core.list_node(_preload_content=False, _request_timeout=request_timeout()).data).get("items") or ()
        except CLUSTER_UNREACHABLE as exc:
            raise refused("list nodes", exc) from exc
        self._listed = {node["metadata"]["name"]: node for node in items if node["metadata"]["name"] in wanted}
        return {
            node["metadata"]["name"]: NodeState(
                labels=dict(node["metadata"].get("labels") or {}),
                taints=tuple((t["key"], t.get("value") or "", t["effect"]) for t in node.get("spec", {}).get("taints") or ()),
                unschedulable=bool(node.get("spec", {}).get("unschedulable")),
                annotations={k: v for k, v in (node["metadata"].get("annotations") or {}).items() if k in NODE_OPT_OUTS},
                gpu_shares_advertised=_shares_advertised(node.get("status", {}).get("capacity"), node.get("status", {}).get("allocatable")),
                managed_taints=recorded_taints(node["metadata"].get("annotations") or {}),
                ready=next((c.get("status") for c in node.get("status", {}).get("conditions") or () if c.get("type") == "Ready"), None),
                gpus_allocatable=_gpus_allocatable(node.get("status", {}).get("allocatable")),
            )
            for node in items
            if node["metadata"]["name"] in wanted
        }

    def cordon(self, *, name: str, mark: bool = False) -> bool:
        """Like `kubectl cordon`; False when the Node is gone (404): nothing to cordon. With
        `mark`, read first and changed only if schedulable (`_marked`)."""
        return self._marked(name, cordon=True) if mark else self._cordon_patch(name, True)

    def uncordon(self, *, name: str, mark: bool = False) -> bool:
        """Like `kubectl uncordon`: a merge patch that removes `spec.unschedulable` (and the
        drain's mark). With `mark`, only the drain's own cordon (`_marked`)."""
        return self._marked(name, cordon=False) if mark else self._cordon_patch(name, None)

    def _cordon_patch(self, name: str, value: bool | None, resource_version: str = "", *, mark: bool = False) -> bool:
        """One merge patch of `spec.unschedulable` that sets the drain's mark with `mark` (written
        by the drain's field manager) and drops it otherwise; conditional on `resource_version`
        where given (409 raises `ApiException` for the caller to read again). False when the
        Node is gone (404)."""
        metadata: dict = {"annotations": {DRAIN_CORDON_ANNOTATION: "true" if mark else None}}
        if resource_version:
            metadata["resourceVersion"] = resource_version
        manager = {"field_manager": DRAIN_FIELD_MANAGER} if mark else {}
        try:
            self.core.patch_node(name, {"metadata": metadata, "spec": {"unschedulable": value}}, **manager, _request_timeout=request_timeout())
        except CLUSTER_UNREACHABLE as exc:
            status = getattr(exc, "status", None)
            if status == 404:
                return False
            if status == 409 and resource_version:
                raise
            raise refused(f"patch nodes/{name} ({'cordon' if value else 'uncordon'})", exc) from exc
        return True

    def _marked(self, name: str, *, cordon: bool) -> bool:
        """A drain's cordon, or its lifting, decided on the Node as read and written only if it is
        unchanged since (its resourceVersion: a change meanwhile, 409, is read again): a cordon
        someone else sets between the read and the write is never taken for ours."""
        for _ in range(5):
            try:
                node = json.loads(self.core.read_node(name, _preload_content=False, _request_timeout=request_timeout()).data)
            except CLUSTER_UNREACHABLE as exc:
                if getattr(exc, "status", None) == 404:
                    return not cordon  # gone: nothing to cordon, and no cordon stays
                raise refused(f"get nodes/{name}", exc) from exc
            cordoned = bool(node.get("spec", {}).get("unschedulable"))
            if cordon and cordoned:
                return True  # cordoned already, by a drain or by someone: kept as it is
            if not cordon and not _drains_own_cordon(node):
                return not cordoned  # someone else's cordon stays; no cordon, nothing to lift
            try:
                version = node["metadata"]["resourceVersion"]
                return self._cordon_patch(name, True if cordon else None, version, mark=cordon) or not cordon
            except ApiException:  # 409: changed since the read
                continue
        raise ProviderError(f"node {name} kept changing while it was {'cordoned' if cordon else 'uncordoned'}; the next pass retries")

    def evict_pod(self, *, namespace: str, name: str, reason: str) -> bool:
        """True when the pod is evicted (or already gone); False when a disruption budget
        refuses now (429), so the drain waits and asks again; `EvictionRefused` with the API's
        message for any other refusal (kube-apiserver answers 500 for a pod under more than one
        budget, 403 for a budget it cannot spend) or an API server out of reach: not evicted
        now either, and never a failure of the caller's pass."""
        eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
        try:
            self.core.create_namespaced_pod_eviction(name, namespace, eviction, _request_timeout=request_timeout())
        except CLUSTER_UNREACHABLE as exc:
            status = getattr(exc, "status", None)
            if status == 404:
                return True
            if status == 429:
                return False
            raise EvictionRefused(refusal_text(exc)) from exc
        return True

    def disruption_budgets(self, *, pods: Mapping[str, Mapping[str, str]]) -> list[DisruptionBudget]:
        """The PodDisruptionBudgets over these Running pods ("namespace/name" -> labels), each
        with the pods it guards and the evictions it allows now, read as the Eviction API
        reads them (`pools.core.disruption`): one list of the budgets, and one of the pods of
        each namespace that has one, for which of them are not Ready; nothing is evicted."""
        documents = self.budget_documents(namespaces=None)
        namespaces = {d["metadata"].get("namespace") for d in documents} & {key.split("/", 1)[0] for key in pods}
        unready = {key for namespace in sorted(namespaces) for key in self._unready_pods(namespace) if key in pods}
        return disruption_budgets(documents, pods, unready=unready)

    def _unready_pods(self, namespace: str) -> set[str]:
        """The Running pods of the namespace whose Ready condition is not True."""
        listed = self.core.list_namespaced_pod(namespace, field_selector="status.phase=Running", _preload_content=False, _request_timeout=request_timeout())
        unready = set()
        for item in json.loads(listed.data).get("items") or ():
            conditions = {c.get("type"): c.get("status") for c in (item.get("status") or {}).get("conditions") or ()}
            if conditions.get("Ready") != "True":
                unready.add(f"{namespace}/{item['metadata']['name']}")
        return unready

    def budget_documents(self, *, namespaces: Collection[str] | None) -> list[dict]:
        """The cluster's PodDisruptionBudgets in these namespaces (None: all), as documents with
        the status its disruption controller wrote, from one list."""
        policy = client.PolicyV1Api(self.core.api_client)
        listed = policy.list_pod_disruption_budget_for_all_namespaces(_preload_content=False, _request_timeout=request_timeout())
        documents = []
        for item in json.loads(listed.data).get("items") or ():
            metadata = {k: v for k, v in (item.get("metadata") or {}).items() if k != "managedFields"}
            if namespaces is None or metadata.get("namespace") in namespaces:
                documents.append({**item, "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": metadata})
        return documents

    def list_pods(self, *, node_name: str) -> list[PodInfo]:
        """The pods `kubectl drain` would move, each marked `terminating` once deleted (evicted
        by an earlier pass, say): the drain waits for those rather than evicting them again."""
        try:
            pods = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node_name}", _request_timeout=request_timeout()).items
        except CLUSTER_UNREACHABLE as exc:
            raise refused(f"list pods on node {node_name}", exc) from exc
        return [
            PodInfo(
                namespace=pod.metadata.namespace,
                name=pod.metadata.name,
                priority=pod.spec.priority or 0,
                phase=pod.status.phase or "Pending",
                checkpointable=(pod.metadata.annotations or {}).get(CHECKPOINTABLE_ANNOTATION) == "true",
                terminating=pod.metadata.deletion_timestamp is not None,
            )
            for pod in sorted(pods, key=lambda p: (p.metadata.namespace, p.metadata.name))
            if _drain_moves(pod)
        ]

    def remove_node(self, *, name: str, now: datetime | None = None) -> None:
        """Delete the Node (gone already: done); `ClusterRefused` when the API server does not.
        `now` is not needed: the cluster's pods keep their own times."""
        try:
            self.core.delete_node(name, _request_timeout=request_timeout())
        except CLUSTER_UNREACHABLE as exc:
            if getattr(exc, "status", None) != 404:
                raise refused(f"delete nodes/{name}", exc) from exc


def _shares_wanted(resources: Mapping[str, str] | None) -> int:
    """1000 GPU shares per GPU of these resources (a Node's capacity or its allocatable): the
    kubelet's allocatable leaves out the GPUs its device plugin reports unhealthy."""
    return int(parse_quantity((resources or {}).get(GPU_RESOURCE) or 0)) * MILLI


def recorded_taints(annotations: Mapping[str, str]) -> frozenset[tuple[str, str]]:
    """The (key, effect) pairs our annotation records as the taints we applied last; none where
    anyone can have edited it into something else (not JSON, not a list of two strings each):
    the Node row's record then stands in (`node_apply`), and the apply writes it again."""
    try:
        recorded = json.loads(annotations.get(MANAGED_TAINTS_ANNOTATION) or "[]")
    except (ValueError, RecursionError):  # "[" nested 100,000 deep: a Node's annotation may hold 256 KiB
        return frozenset()
    if not isinstance(recorded, list) or not all(isinstance(k, list) and len(k) == 2 and all(isinstance(part, str) for part in k) for k in recorded):
        return frozenset()
    return frozenset((key, effect) for key, effect in recorded)


def _gpus_allocatable(allocatable: Mapping[str, str] | None) -> int | None:
    """The GPUs a Node offers to pods (None where no kubelet reported its allocatable yet)."""
    if allocatable is None:
        return None
    return int(parse_quantity(allocatable.get(GPU_RESOURCE) or 0))


def _shares_advertised(capacity: Mapping[str, str] | None, allocatable: Mapping[str, str] | None) -> bool:
    """Whether capacity and allocatable each offer exactly 1000 GPU shares per GPU of their own
    (none, or 0, where there is no GPU: shares left behind by GPUs that are gone are wrong too,
    kube-scheduler would place share pods on a node without a GPU). Compared as quantities: the
    API server writes 8000 as `8k`."""
    return all(
        parse_quantity((side or {}).get(GPU_SHARE_RESOURCE) or 0) == _shares_wanted(side) for side in (capacity, allocatable)
    )


def _taint(taint: Mapping[str, str]) -> dict[str, str]:
    out = {"key": taint["key"], "effect": taint["effect"]}
    if taint.get("value"):
        out["value"] = taint["value"]
    if taint.get(TIME_ADDED):
        out[TIME_ADDED] = taint[TIME_ADDED]
    return out


def refusal_text(exc: Exception) -> str:
    """What the API server said (its Status message and code), or why it could not be asked."""
    if isinstance(exc, ApiException):
        try:
            message = json.loads(exc.body or "{}").get("message") or exc.reason
        except (TypeError, ValueError, AttributeError):
            message = exc.reason
        return f"{message} ({exc.status})"
    return f"{type(exc).__name__}: {exc}"[:300]


def _drain_moves(pod: client.V1Pod) -> bool:
    """Whether `kubectl drain` would evict this pod: not finished, not a mirror pod, not a
    DaemonSet's (its controller would put it back on the node at once)."""
    if pod.status.phase in ("Succeeded", "Failed"):
        return False
    if MIRROR_ANNOTATION in (pod.metadata.annotations or {}):
        return False
    return not any(ref.kind == "DaemonSet" and ref.controller for ref in pod.metadata.owner_references or ())


def _drains_own_cordon(node: Mapping) -> bool:
    """The Node's cordon is a drain's: marked, and `spec.unschedulable` held by the drain's field
    manager alone. Anyone who set it since (`kubectl uncordon`, then `kubectl cordon`) holds the
    field, though the mark stays, and so does one who declared it too (server-side apply of the
    same value); a cordon set without the mark drops it. Where the API server has merged the drain's
    entry into `ancient-changes` (it keeps ten), nobody can tell whose the cordon is: it stays.
    An earlier release wrote the mark and the cordon in one patch by the client's default
    manager: that entry holds both (a script's cordon by the same default manager after someone
    lifted a drain's of this release holds the cordon only, and stays theirs; after lifting an
    earlier release's, the entry that holds the mark takes the script's cordon too, and nothing
    on the Node tells the two apart)."""
    metadata = node.get("metadata", {})
    if (metadata.get("annotations") or {}).get(DRAIN_CORDON_ANNOTATION) != "true":
        return False
    holders = [entry for entry in metadata.get("managedFields") or () if "f:unschedulable" in _fields(entry, "f:spec")]
    if len(holders) != 1:
        return False
    holder = holders[0]
    if holder.get("manager") == DRAIN_FIELD_MANAGER:
        return True
    marked = f"f:{DRAIN_CORDON_ANNOTATION}" in _fields(holder, "f:metadata").get("f:annotations", {})
    return holder.get("manager") == EARLIER_DRAIN_FIELD_MANAGER and marked


def _fields(entry: Mapping, part: str) -> Mapping:
    """One part (`f:spec`, `f:metadata`) of the fields a managedFields entry holds."""
    return (entry.get("fieldsV1") or {}).get(part) or {}
