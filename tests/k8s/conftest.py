"""A real kube-apiserver (+ etcd + kube-scheduler) for the tests of this folder, started once per
session from the binaries k8s/build.sh built (`.ci/run` and `make test` build them first)."""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client, config

from tests.k8s.helpers import plane_running


@pytest.fixture(scope="session")
def control_plane():
    yield from plane_running()


@pytest.fixture(scope="session")
def kube(control_plane) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(control_plane.kubeconfig))


@pytest.fixture
def core(kube) -> client.CoreV1Api:
    return client.CoreV1Api(kube)


@pytest.fixture
def unique() -> str:
    """A short suffix that keeps one test's nodes and namespaces apart from another's."""
    return uuid.uuid4().hex[:6]


@pytest.fixture
def namespace(core, unique) -> str:
    name = f"t-{unique}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    # kube-controller-manager is not running: no service account is made for the namespace.
    core.create_namespaced_service_account(name, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="default")))
    return name


@pytest.fixture
def on_kubernetes(settings, control_plane):
    """The product's cluster backend is the test's API server."""
    settings.EBCLOUD_CLUSTER_BACKEND = "kubernetes"
    settings.EBCLOUD_KUBECONFIG = str(control_plane.kubeconfig)
