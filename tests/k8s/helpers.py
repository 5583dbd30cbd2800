"""Small builders the tests against the real API server share."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.k8s.control_plane import ControlPlane, binaries_dir, missing_binaries


def plane_running() -> Iterator[ControlPlane]:
    """A started control plane for a fixture to yield, stopped after (a missing binary fails
    the test with what to run)."""
    if missing := missing_binaries():
        pytest.fail(f"{', '.join(missing)} missing in {binaries_dir()}: run k8s/build.sh (make test does)", pytrace=False)
    plane = ControlPlane().start()
    try:
        yield plane
    finally:
        plane.stop()


def pod(
    namespace: str,
    name: str,
    *,
    node: str | None = None,
    labels=None,
    annotations=None,
    owner=None,
    gpus: int = 1,
    **spec,
) -> client.V1Pod:
    container = client.V1Container(
        name="main",
        image="registry.invalid/train:1",
        resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": str(gpus)}),
    )
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=name,
            namespace=namespace,
            labels=labels,
            annotations=annotations,
            owner_references=owner,
        ),
        spec=client.V1PodSpec(
            containers=[container], node_name=node, automount_service_account_token=False, **spec
        ),
    )

# Seconds to wait for kube-scheduler's verdict on a pod. It comes within a second or two, but CI's
# two cores also run the other database's suite, and a verdict 30 s late has been seen there; a
# wait that is met returns at once, so only a failing test waits this long.
SCHEDULER_WAIT = 90


def wait_for(predicate, *, timeout: float = 30, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def pod_create_admitted(core: client.CoreV1Api, namespace: str, body):
    """Create the pod once the Priority admission plugin knows its PriorityClass: the plugin
    reads classes from an informer's cache, so one created a moment ago may still be "not
    found" (a 403) for a short while under load."""

    def admitted():
        try:
            return core.create_namespaced_pod(namespace, body)
        except client.exceptions.ApiException as exc:
            if exc.status == 403 and "no PriorityClass with name" in (exc.body or ""):
                return None
            raise

    return wait_for(admitted, timeout=10, what="the pod's PriorityClass in the admission plugin's cache")


def verdict(core: client.CoreV1Api, namespace: str, name: str):
    """What kube-scheduler made of the pod: ("bound", its node), ("pending", the scheduler's
    message), or None while it has not decided."""
    pod = core.read_namespaced_pod(name, namespace)
    if pod.spec.node_name:
        return ("bound", pod.spec.node_name)
    refused = next((c for c in pod.status.conditions or () if c.type == "PodScheduled" and c.status == "False"), None)
    return ("pending", refused.message) if refused is not None else None


def pod_gone(core: client.CoreV1Api, namespace: str, name: str) -> bool:
    """Whether the pod is deleted or being deleted (a preemption victim, an evicted pod)."""
    try:
        return core.read_namespaced_pod(name, namespace).metadata.deletion_timestamp is not None
    except client.exceptions.ApiException as exc:
        if exc.status == 404:
            return True
        raise
