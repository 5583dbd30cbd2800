"""The kubelet of a simulated machine in a real cluster (KWOK's idea): it registers the Node with
its capacity (`cpu`, `memory`, `nvidia.com/gpu`, `pods`) and a Ready condition, "runs" the pods
kube-scheduler binds to it (phase Running, then Succeeded when their `ebcloud.io/duration` has
passed), and confirms the deletion of pods that are being deleted (an eviction's grace period:
there is no container to stop). Nothing of a node agent or of the product runs here: only what a
kubelet writes to the API server, so the control plane sees what it would see from real nodes.

Used by the simulated cloud when `EBCLOUD_CLUSTER=kubernetes` (its machines join that
cluster at the kubelet-join step) and by the tests against a real kube-apiserver."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.conf import settings
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from pools.core.durations import parse_duration
from pools.core.scheduling.nodes import MAX_PODS
from pools.providers.kubernetes import api_client

DURATION_ANNOTATION = "ebcloud.io/duration"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


class FakeKubelet:
    def __init__(self, api: client.ApiClient | None = None):
        # A kubelet has its own credentials (the node's), not the control plane's.
        self.core = client.CoreV1Api(api or api_client(settings.EBCLOUD_SIM_KUBELET_KUBECONFIG))

    def join(self, *, name: str, cpu_milli: int, memory_mib: int, gpus: int, labels: dict[str, str] | None = None, now: datetime) -> None:
        """Register the Node (idempotent: a node that exists is only marked Ready again)."""
        node = client.V1Node(metadata=client.V1ObjectMeta(name=name, labels={"kubernetes.io/hostname": name, **(labels or {})}))
        try:
            self.core.create_node(node)
        except ApiException as exc:
            if exc.status != 409:
                raise
        capacity = {"cpu": f"{cpu_milli}m", "memory": f"{memory_mib}Mi", "pods": str(MAX_PODS), "nvidia.com/gpu": str(gpus)}
        status = {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
                "lastHeartbeatTime": _rfc3339(now), "lastTransitionTime": _rfc3339(now),
            }],
        }  # fmt: skip
        self.core.patch_node_status(name, {"status": status})
        # The node lifecycle controller lifts the not-ready taint once the node reports Ready.
        taints = self.core.read_node(name).spec.taints or ()
        if any(t.key == NOT_READY_TAINT for t in taints):
            kept = [{"key": t.key, "value": t.value, "effect": t.effect} for t in taints if t.key != NOT_READY_TAINT]
            self.core.patch_node(name, {"spec": {"taints": kept or None}})

    def sync_pods(self, *, node_name: str, now: datetime) -> dict[str, int]:
        """One kubelet sync of the node's pods; returns how many it started, finished, removed."""
        done = {"started": 0, "succeeded": 0, "removed": 0}
        for pod in self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node_name}").items:
            meta = pod.metadata
            if meta.deletion_timestamp is not None:
                self._delete_now(meta.namespace, meta.name)
                done["removed"] += 1
            elif pod.status.phase == "Pending":
                self.core.patch_namespaced_pod_status(meta.name, meta.namespace, {"status": {
                    "phase": "Running", "startTime": _rfc3339(now),
                    "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": _rfc3339(now)}],
                }})  # fmt: skip
                done["started"] += 1
            elif pod.status.phase == "Running" and (ended := _end(pod)) is not None and ended <= now:
                terminated = {"exitCode": 0, "reason": "Completed", "startedAt": _rfc3339(pod.status.start_time), "finishedAt": _rfc3339(ended)}
                self.core.patch_namespaced_pod_status(meta.name, meta.namespace, {"status": {
                    "phase": "Succeeded",
                    "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": _rfc3339(ended)}],
                    "containerStatuses": [
                        {"name": c.name, "image": c.image, "imageID": "", "ready": False, "restartCount": 0, "state": {"terminated": terminated}}
                        for c in pod.spec.containers
                    ],
                }})  # fmt: skip
                done["succeeded"] += 1
        return done

    def _delete_now(self, namespace: str, name: str) -> None:
        try:
            self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise


def _end(pod: client.V1Pod) -> datetime | None:
    """When the pod's simulated run ends (`ebcloud.io/duration` after it started); None: never."""
    text = (pod.metadata.annotations or {}).get(DURATION_ANNOTATION)
    started = pod.status.start_time
    if not text or started is None:
        return None
    try:
        return started + timedelta(seconds=parse_duration(text))
    except ValueError:
        return None


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
