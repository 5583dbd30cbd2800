"""A real cluster's pod requests (`kubernetes_pods.pod_requests`), counted as kube-scheduler v1.37
counts them: `PodRequests` of k8s.io/component-helpers/resource/helpers.go, after the API
server's defaulting. The expected values are worked out by hand from that Go source."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from pools.providers.kubernetes_pods import pod_fields, pod_requests

GIB = 2**30


def container(name: str = "c", *, requests=None, limits=None, sidecar: bool = False) -> dict:
    resources = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "resources": resources, **({"restartPolicy": "Always"} if sidecar else {})}


def counted(spec: dict) -> dict[str, Decimal]:
    return pod_requests(spec)


def test_regular_containers_add_up_and_an_init_container_is_a_floor():
    spec = {
        "containers": [container("a", requests={"cpu": "1"}), container("b", requests={"cpu": "2", "memory": "1Gi"})],
        "initContainers": [container("i1", requests={"cpu": "4"}), container("i2", requests={"memory": "512Mi", "ephemeral-storage": "1Gi"})],
    }  # fmt: skip
    assert counted(spec) == {"cpu": 4, "memory": GIB, "ephemeral-storage": GIB}


def test_a_sidecar_is_added_to_the_containers_not_maxed_against_them():
    spec = {
        "initContainers": [container("side", limits={"nvidia.com/gpu": "1", "cpu": "2"}, sidecar=True)],
        "containers": [container("main", limits={"nvidia.com/gpu": "1", "cpu": "4"})],
    }
    assert counted(spec) == {"nvidia.com/gpu": 2, "cpu": 6}


def test_several_sidecars_all_add_up():
    spec = {
        "initContainers": [
            container("s1", requests={"cpu": "1", "memory": "1Gi"}, sidecar=True),
            container("s2", requests={"cpu": "500m", "memory": "2Gi"}, sidecar=True),
            container("s3", limits={"ebcloud.io/gpu-milli": "250"}, sidecar=True),
        ],
        "containers": [container("main", requests={"cpu": "4", "memory": "4Gi"}, limits={"ebcloud.io/gpu-milli": "500"})],
    }  # fmt: skip
    assert counted(spec) == {"cpu": Decimal("5.5"), "memory": 7 * GIB, "ebcloud.io/gpu-milli": 750}


def test_a_regular_init_container_after_a_sidecar_needs_the_sidecar_beside_it():
    spec = {
        "initContainers": [
            container("side", requests={"cpu": "1", "memory": "1Gi"}, sidecar=True),
            container("migrate", requests={"cpu": "10", "memory": "1Gi"}),
        ],
        "containers": [container("main", requests={"cpu": "2", "memory": "8Gi"})],
    }
    # cpu: max(2 + 1, 1 + 10) = 11; memory: max(8 + 1, 1 + 1) = 9Gi
    assert counted(spec) == {"cpu": 11, "memory": 9 * GIB}


def test_an_init_container_between_sidecars_counts_only_those_started_before_it():
    def spec(main_cpu: str) -> dict:
        return {
            "initContainers": [
                container("s1", requests={"cpu": "1"}, sidecar=True),
                container("init", requests={"cpu": "5"}),
                container("s2", requests={"cpu": "2"}, sidecar=True),
            ],
            "containers": [container("main", requests={"cpu": main_cpu})],
        }

    assert counted(spec("1")) == {"cpu": 6}  # the init step: s1 + init = 6 > 1 + 1 + 2 (not s1 + s2 + init = 8)
    assert counted(spec("4")) == {"cpu": 7}  # the running pod: 4 + 1 + 2 = 7 > 6


def test_an_init_container_before_any_sidecar_runs_alone():
    spec = {
        "initContainers": [container("init", requests={"cpu": "3"}), container("side", requests={"cpu": "2"}, sidecar=True)],
        "containers": [container("main", requests={"cpu": "1"})],
    }  # fmt: skip
    assert counted(spec) == {"cpu": 3}
    spec["initContainers"][0]["resources"]["requests"]["cpu"] = "3500m"
    assert counted(spec) == {"cpu": Decimal("3.5")}


def test_an_init_container_with_another_restart_policy_is_no_sidecar():
    spec = {
        "initContainers": [{**container("init", requests={"cpu": "2"}), "restartPolicy": "Never"}],
        "containers": [container("main", requests={"cpu": "1"})],
    }
    assert counted(spec) == {"cpu": 2}


def test_a_container_limit_without_a_request_is_its_request_and_a_request_beside_a_limit_wins():
    spec = {
        "containers": [
            container("a", limits={"nvidia.com/gpu": "2", "cpu": "4", "memory": "8Gi"}),
            container("b", requests={"cpu": "1"}, limits={"cpu": "3", "memory": "1Gi"}),
        ]
    }
    assert counted(spec) == {"nvidia.com/gpu": 2, "cpu": 5, "memory": 9 * GIB}


def test_pod_level_requests_replace_the_containers_cpu_and_memory():
    spec = {
        "resources": {"requests": {"cpu": "8", "memory": "64Gi"}},
        "containers": [container("main", requests={"cpu": "1", "memory": "1Gi"}, limits={"nvidia.com/gpu": "1"})],
    }
    assert counted(spec) == {"cpu": 8, "memory": 64 * GIB, "nvidia.com/gpu": 1}


def test_pod_level_requests_replace_only_the_resources_they_name():
    spec = {
        "resources": {"requests": {"cpu": "8"}},
        "initContainers": [container("side", requests={"cpu": "1", "memory": "1Gi"}, limits={"nvidia.com/gpu": "1"}, sidecar=True)],
        "containers": [container("main", requests={"cpu": "2", "memory": "2Gi"}, limits={"nvidia.com/gpu": "1"})],
    }  # fmt: skip
    assert counted(spec) == {"cpu": 8, "memory": 3 * GIB, "nvidia.com/gpu": 2}


def test_a_pod_level_limit_without_a_request_defaults_as_the_api_server_does():
    spec = {
        "resources": {"limits": {"cpu": "8", "memory": "16Gi"}},
        "containers": [container("main", requests={"memory": "1Gi"}, limits={"nvidia.com/gpu": "1"})],
    }
    # cpu: no container asks, the pod-level limit is the request; memory: the containers' 1Gi
    assert counted(spec) == {"cpu": 8, "memory": GIB, "nvidia.com/gpu": 1}
    spec["resources"]["requests"] = {"memory": "4Gi"}
    assert counted(spec) == {"cpu": 8, "memory": 4 * GIB, "nvidia.com/gpu": 1}


def test_pod_level_hugepages_are_pod_level_and_other_resources_are_not():
    spec = {
        "resources": {"requests": {"hugepages-2Mi": "2Gi", "nvidia.com/gpu": "4"}, "limits": {"hugepages-1Gi": "2Gi"}},
        "containers": [container("main", requests={"cpu": "1"}, limits={"nvidia.com/gpu": "1", "memory": "1Gi", "hugepages-1Gi": "1Gi"})],
    }  # fmt: skip
    # A hugepages limit is its request even where a container asks for hugepages (they are not
    # overcommitted). The API server refuses nvidia.com/gpu at pod level; were it there, the
    # containers' count stands.
    assert counted(spec) == {"cpu": 1, "memory": GIB, "nvidia.com/gpu": 1, "hugepages-2Mi": 2 * GIB, "hugepages-1Gi": 2 * GIB}


def test_the_overhead_is_added_after_the_pod_level_requests():
    spec = {
        "resources": {"requests": {"cpu": "8"}},
        "overhead": {"cpu": "250m", "memory": "120Mi"},
        "initContainers": [container("side", requests={"memory": "1Gi"}, sidecar=True)],
        "containers": [container("main", requests={"cpu": "1", "memory": "1Gi"})],
    }
    assert counted(spec) == {"cpu": Decimal("8.25"), "memory": 2 * GIB + 120 * 2**20}


def test_a_pod_without_resources_asks_nothing():
    assert counted({"containers": [{"name": "main"}], "initContainers": [{"name": "s", "restartPolicy": "Always"}]}) == {}


def test_the_mirrored_fields_count_a_sidecars_gpu():
    pod = {
        "metadata": {"uid": "u1", "namespace": "ns", "name": "p"},
        "spec": {
            "resources": {"requests": {"cpu": "8", "memory": "64Gi"}},
            "initContainers": [container("side", limits={"nvidia.com/gpu": "1", "cpu": "2"}, sidecar=True)],
            "containers": [container("main", limits={"nvidia.com/gpu": "1", "cpu": "4"})],
        },
    }
    fields = pod_fields(pod, now=datetime(2026, 1, 1, tzinfo=UTC))
    assert (fields["gpu_count"], fields["cpu_milli"], fields["memory_mib"]) == (2, 8000, 65536)


@pytest.mark.parametrize("quantity", ["1", 1, "1000m"])
def test_quantities_of_any_spelling_count_the_same(quantity):
    spec = {"initContainers": [container("s", requests={"cpu": quantity}, sidecar=True)], "containers": [container("m", requests={"cpu": quantity})]}
    assert counted(spec) == {"cpu": 2}
