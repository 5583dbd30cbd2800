"""deploy/rbac.yaml is enough and no more: the control plane, running as the ServiceAccount it
creates, brings a pool's nodes up with their labels and taints, keeps them as the spec says,
mirrors the pods, keeps the team-isolation admission policy, drains a node through the Eviction API and deletes its Node; what the role
does not grant (creating pods, reading secrets) is refused."""

from __future__ import annotations

from datetime import timedelta

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from pools.controllers.cluster_sync import admission_policy_sync, priority_classes_sync
from pools.controllers.lifecycle import reconcile_all
from pools.controllers.pod_mirror import PodMirror
from pools.core.isolation import POLICY_NAME
from pools.models import GpuNodePool, Node, Pod
from pools.providers.fake_kubelet import FakeKubelet
from pools.providers.kubernetes import KubernetesCluster
from pools.providers.kubernetes_pods import ClusterPods
from pools.services import pools as pool_services
from tests.conftest import ROOT
from tests.k8s.helpers import pod
from tests.pools.lifecycle_helpers import T0, TICK, approved_pool

pytestmark = pytest.mark.django_db


@pytest.fixture
def as_controller(settings, control_plane):
    """The product's settings with the ServiceAccount's kubeconfig; the machines' kubelets keep
    the admin's (a kubelet has its own credentials)."""
    applied = control_plane.kubectl("apply", "-f", str(ROOT / "deploy" / "rbac.yaml"))
    assert applied.returncode == 0, applied.stderr
    kubeconfig = control_plane.service_account_kubeconfig("ebcloud-system", "ebcloud-controller")
    settings.EBCLOUD_CLUSTER_BACKEND = "kubernetes"
    settings.EBCLOUD_KUBECONFIG = str(kubeconfig)
    settings.EBCLOUD_SIM_KUBELET_KUBECONFIG = str(control_plane.kubeconfig)
    return config.new_client_from_config(config_file=str(kubeconfig))


def test_the_clusterrole_grants_what_the_control_plane_does_and_no_more(as_controller, kube, actors, train_document, core, namespace, unique):
    train_document["metadata"]["name"] = f"rbac-{unique}"
    train_document["spec"]["nodeCount"] = {"min": 1, "max": 2}
    pool = approved_pool(actors, train_document)
    now = T0
    while GpuNodePool.objects.get(pk=pool.pk).phase != "Ready":
        assert all(not r.error for r in reconcile_all(now=now)), [r.error for r in reconcile_all(now=now) if r.error]
        now += TICK
        assert now < T0 + timedelta(hours=1), GpuNodePool.objects.get(pk=pool.pk).pending_reason
    node = Node.objects.get(pool=pool, phase="Ready")
    assert core.read_node(node.name).metadata.labels["ebcloud.io/pool"] == pool.name

    # A label removed by someone else comes back (list + patch).
    core.patch_node(node.name, {"metadata": {"labels": {"gpu-class": None}}})
    reconcile_all(now=now)
    assert core.read_node(node.name).metadata.labels["gpu-class"] == "a100"

    # The mirror reads pods and namespaces.
    core.create_namespaced_pod(namespace, pod(namespace, "worker", node=node.name))
    mirror = PodMirror(ClusterPods(as_controller), clock=lambda: now)
    mirror.relist()
    assert Pod.objects.live().filter(namespace=namespace, name="worker").exists()
    # The repack plan reads the disruption budgets (one list).
    assert KubernetesCluster(as_controller).disruption_budgets(pods={f"{namespace}/worker": {}}) == []

    # The team-isolation policy and its binding are applied (created, then kept).
    try:
        assert admission_policy_sync() == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
        assert admission_policy_sync() == []
        priority_classes_sync()  # lists the cluster's PriorityClasses
        with pytest.raises(ApiException) as refused:
            client.AdmissionregistrationV1Api(as_controller).delete_validating_admission_policy(POLICY_NAME)
        assert refused.value.status == 403
    finally:
        admin = client.AdmissionregistrationV1Api(kube)
        admin.delete_validating_admission_policy_binding(POLICY_NAME)
        admin.delete_validating_admission_policy(POLICY_NAME)

    # A drain cordons, evicts and deletes the Node once the machine is released.
    pool_services.pool_delete(user=actors["lead"], pool=GpuNodePool.objects.get(pk=pool.pk), now=now)
    kubelet = FakeKubelet(kube)  # confirms the evicted pod's deletion, as the node's kubelet would
    for _ in range(20):
        assert all(not r.error for r in reconcile_all(now=now))
        kubelet.sync_pods(node_name=node.name, now=now)
        now += TICK
    assert Node.objects.get(pk=node.pk).phase == "Terminated"
    with pytest.raises(ApiException) as gone:
        core.read_node(node.name)
    assert gone.value.status == 404

    # What the role does not grant is refused.
    restricted = client.CoreV1Api(as_controller)
    for call in (
        lambda: restricted.create_namespaced_pod(namespace, pod(namespace, "not-ours")),
        lambda: restricted.list_secret_for_all_namespaces(),
        lambda: restricted.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=f"fake-{unique}"))),
    ):
        with pytest.raises(ApiException) as refused:
            call()
        assert refused.value.status == 403
