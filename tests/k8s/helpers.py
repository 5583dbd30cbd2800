"""Small builders the tests against the real API server share."""

from __future__ import annotations

import time

from kubernetes import client


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


def wait_for(predicate, *, timeout: float = 30, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")
