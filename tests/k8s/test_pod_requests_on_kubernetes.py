"""The pod mirror counts a pod's requests as the real kube-scheduler v1.37 does, for the cases
where counting by hand goes wrong: sidecar init containers (added to the containers, a regular
init container after them runs beside them) and pod-level requests (which replace the
containers' cpu and memory).

kube-scheduler's own count is observed on fake kubelets' nodes: a node whose capacity is the
mirrored count takes the pod, and a node one unit short of it in cpu, memory or GPUs is refused
with kube-scheduler's "Insufficient <resource>". A count too low fails the first, a count too
high the others."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from kubernetes import client

from pools.controllers.pod_mirror import PodMirror
from pools.models import Pod
from pools.providers.fake_kubelet import FakeKubelet
from pools.providers.kubernetes_pods import ClusterPods
from tests.k8s.helpers import SCHEDULER_WAIT, verdict

pytestmark = pytest.mark.django_db(transaction=True)
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
SIDECARS = {
    "initContainers": [
        {"name": "side", "image": "x", "restartPolicy": "Always",
         "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "2", "memory": "1Gi"}}},
        {"name": "migrate", "image": "x", "resources": {"requests": {"cpu": "7", "memory": "1Gi"}}},
    ],
    "containers": [{"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "4", "memory": "2Gi"}}}],
}  # fmt: skip
CASES = {
    # gpu 1 + 1; cpu max(4 + 2, 2 + 7) = 9; memory max(2 + 1, 1 + 1) = 3Gi
    "sidecars": (SIDECARS, (9_000, 3_072, 2)),
    # the same containers under pod-level requests: they set cpu and memory, the GPUs stay
    "pod-level": ({**SIDECARS, "resources": {"requests": {"cpu": "12", "memory": "8Gi"}}}, (12_000, 8_192, 2)),
}


def settled(core: client.CoreV1Api, namespace: str, name: str, short: str | None, timeout: float = SCHEDULER_WAIT):
    """kube-scheduler's verdict once it has seen the node whole: its first try may come before
    the fake kubelet's status (capacity, Ready) and taint updates reach its cache, and a node
    update sends a refused pod back to the queue. Bound, or refused for `short` alone; after
    `timeout`, the last verdict (which the caller's assertion shows)."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        last = verdict(core, namespace, name) or last
        if last and (last[0] == "bound" or (short and f"Insufficient {short}" in last[1] and last[1].count("Insufficient") == 1)):
            return last
        time.sleep(0.2)
    return last or ("none", "no verdict")


@pytest.mark.parametrize("case", CASES)
def test_kube_scheduler_fits_a_pod_on_exactly_the_requests_the_mirror_counts(kube, core, namespace, unique, case):
    spec, expected = CASES[case]
    taint = {"key": f"pod-requests-{unique}", "value": "yes", "effect": "NoSchedule"}  # no other test's pod lands here

    def body(name: str, node: str) -> dict:
        return {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {**spec, "automountServiceAccountToken": False, "nodeSelector": {"kubernetes.io/hostname": node},
                     "tolerations": [{"key": taint["key"], "operator": "Exists", "effect": "NoSchedule"}]},
        }  # fmt: skip

    core.create_namespaced_pod(namespace, body("probe", "nowhere"))
    mirror = PodMirror(ClusterPods(kube), clock=lambda: NOW)
    mirror.relist()
    row = Pod.objects.get(namespace=namespace, name="probe")
    counted = (row.cpu_milli, row.memory_mib, row.gpu_count)
    assert counted == expected
    cpu, memory, gpus = counted
    nodes = {  # the node's (cpu milli, memory MiB, GPUs), the resource kube-scheduler must find short
        "fit": ((cpu, memory, gpus), None),
        "cpu": ((cpu - 1, memory, gpus), "cpu"),
        "memory": ((cpu, memory - 1, gpus), "memory"),
        "gpu": ((cpu, memory, gpus - 1), "nvidia.com/gpu"),
    }
    kubelet, names = FakeKubelet(kube), {}
    try:
        for key, ((node_cpu, node_memory, node_gpus), _) in nodes.items():
            names[key] = name = f"req-{unique}-{case}-{key}"
            core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name, labels={"kubernetes.io/hostname": name}),
                                           spec=client.V1NodeSpec(taints=[client.V1Taint(**taint)])))  # fmt: skip
            kubelet.join(name=name, cpu_milli=node_cpu, memory_mib=node_memory, gpus=node_gpus, now=NOW)
            core.create_namespaced_pod(namespace, body(f"on-{key}", name))
        for key, (_, short) in nodes.items():
            kind, detail = settled(core, namespace, f"on-{key}", short)
            if short is None:
                assert (kind, detail) == ("bound", names[key]), detail
            else:
                assert kind == "pending" and f"1 Insufficient {short}" in detail, detail
                assert detail.count("Insufficient") == 1, detail  # short of that resource only
    finally:
        for name in names.values():
            core.delete_node(name)
        for item in core.list_namespaced_pod(namespace).items:
            core.delete_namespaced_pod(item.metadata.name, namespace, grace_period_seconds=0)
