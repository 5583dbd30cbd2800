"""The article's pod is a valid Kubernetes manifest: a real kube-apiserver takes
examples/priorityclasses.yaml and examples/pods/train-pod.yaml with `kubectl apply`, and its
Priority admission plugin gives the pod the priority our parser resolves for the same files; the
cluster's classes are mirrored as its admission resolves them, several defaults included."""

from __future__ import annotations

import json

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from pools.controllers.cluster_sync import priority_classes_sync
from pools.controllers.scheduler import scheduler_pass
from pools.core.documents import load_yaml
from pools.core.isolation import POLICY_NAME
from pools.core.podspec import admit, parse_pod
from pools.core.priority import default_class, parse_priority_class
from pools.core.yaml_loading import load_all
from pools.models import PriorityClass
from pools.models.pods import priority_classes_for
from pools.providers.kubernetes_pods import ClusterPods
from tests.conftest import EXAMPLES
from tests.k8s.helpers import pod, wait_for

CLASSES = EXAMPLES / "priorityclasses.yaml"
TRAIN_POD = EXAMPLES / "pods" / "train-pod.yaml"


def create_tolerating_conflict(create, *args) -> None:
    """The session's API server is shared: `algorithm` may exist already."""
    try:
        create(*args)
    except ApiException as exc:
        if exc.status != 409:
            raise


def test_kubectl_applies_the_examples_and_the_pod_gets_the_priority_our_parser_resolves(control_plane, core):
    create_tolerating_conflict(core.create_namespace, client.V1Namespace(metadata=client.V1ObjectMeta(name="algorithm")))
    # kube-controller-manager is not running: no service account is made for the namespace.
    create_tolerating_conflict(core.create_namespaced_service_account, "algorithm",
                               client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="default")))  # fmt: skip
    control_plane.kubectl("delete", "pod", "bert-train-0", "-n", "algorithm", "--ignore-not-found", "--wait=false")
    try:
        applied = control_plane.kubectl("apply", "-f", str(CLASSES))
        assert applied.returncode == 0, applied.stderr
        applied = control_plane.kubectl("apply", "-f", str(TRAIN_POD))
        assert applied.returncode == 0, applied.stderr
        shown = control_plane.kubectl("get", "pod", "bert-train-0", "-n", "algorithm", "-o", "json")
        assert shown.returncode == 0, shown.stderr
        spec = json.loads(shown.stdout)["spec"]
        assert (spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == ("training", 100, "PreemptLowerPriority")

        ours = {c.name: c for c in map(parse_priority_class, load_all(CLASSES.read_text()))}
        resolved = admit(parse_pod(load_yaml(TRAIN_POD.read_text())), ours)
        assert (resolved.priority_class_name, resolved.priority, resolved.preemption_policy) == (
            spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"])  # fmt: skip
    finally:
        control_plane.kubectl("delete", "pod", "bert-train-0", "-n", "algorithm", "--ignore-not-found", "--wait=false")


def test_the_api_server_refuses_a_priority_of_the_pods_own_as_we_do(control_plane, namespace):
    """The problem this fixes: `spec.priority: 100` with no class is refused by kube-apiserver."""
    document = load_yaml(TRAIN_POD.read_text())
    document["metadata"]["namespace"] = namespace
    del document["spec"]["priorityClassName"]
    document["spec"]["priority"] = 100
    refused = control_plane.kubectl("create", "-f", "-", input=json.dumps(document))
    assert refused.returncode != 0
    assert "the integer value of priority (100) must not be provided in pod spec; priority admission controller computed 0" in refused.stderr


def test_the_read_models_priority_classes_follow_the_clusters(kube, unique, db):
    """On a real cluster PriorityClasses are the cluster's objects: created, changed (deleted
    and made again: value is immutable) and deleted there, the rows follow; system classes
    stay built in."""
    scheduling = client.SchedulingV1Api(kube)
    name = f"batch-{unique}"

    def make(value: int, policy: str) -> None:
        scheduling.create_priority_class(client.V1PriorityClass(metadata=client.V1ObjectMeta(name=name), value=value, preemption_policy=policy, description="batch jobs"))

    make(50, "Never")
    try:
        assert name in priority_classes_sync(ClusterPods(kube))
        row = PriorityClass.objects.get(name=name)
        assert (row.value, row.preemption_policy, row.description) == (50, "Never", "batch jobs")
        assert not PriorityClass.objects.filter(name__startswith="system-").exists()
        assert priority_classes_sync(ClusterPods(kube)) == []
        scheduling.delete_priority_class(name)
        make(70, "PreemptLowerPriority")
        assert priority_classes_sync(ClusterPods(kube)) == [name]
        assert PriorityClass.objects.get(name=name).value == 70
    finally:
        scheduling.delete_priority_class(name)
    assert name in priority_classes_sync(ClusterPods(kube)) and not PriorityClass.objects.filter(name=name).exists()


def test_two_default_classes_in_the_cluster_are_mirrored_as_its_admission_resolves_them_and_the_pass_goes_on(
    control_plane, kube, core, namespace, unique, on_kubernetes, db, caplog
):
    """kube-apiserver refuses a second globalDefault class by a check of its cache, which two
    classes created at once can both pass (Kubernetes' `getDefaultPriorityClass` says so, and
    then takes the one of lowest value). The race is made at will here: the second class is
    written into etcd past admission. The read model allows one default; every scheduler pass
    failed on the unique constraint (no hints, no classes mirrored): the rows now mark the
    default the API server gives pods, and the pass raises and logs nothing."""
    scheduling = client.SchedulingV1Api(kube)
    first, second = f"dflt-a-{unique}", f"dflt-b-{unique}"
    scheduling.create_priority_class(client.V1PriorityClass(metadata=client.V1ObjectMeta(name=first), value=20, global_default=True))
    try:
        control_plane.etcd_put(f"/registry/priorityclasses/{second}", {
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "value": 10, "globalDefault": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "metadata": {"name": second, "uid": f"00000000-0000-4000-8000-000000{unique}", "creationTimestamp": "2026-12-01T00:00:00Z"},
        })  # fmt: skip

        def admitted():  # a pod that names no class, as the Priority plugin admits it once its cache holds both
            spec = core.create_namespaced_pod(namespace, pod(namespace, "no-class"), dry_run="All").spec
            return spec if spec.priority_class_name == second else None

        wait_for(lambda: {c.metadata.name for c in scheduling.list_priority_class().items if c.global_default} >= {first, second}, timeout=30, what="both defaults listed")
        spec = wait_for(admitted, timeout=30, what="the default of lower value admitted")
        assert spec.priority == 10

        with caplog.at_level("ERROR", logger="ebcloud.scheduler"):  # a failed sync is logged as an error (a slow API server may warn)
            scheduler_pass()
        assert [r.getMessage() for r in caplog.records if r.name == "ebcloud.scheduler" and r.levelname == "ERROR"] == []
        rows = dict(PriorityClass.objects.filter(name__in=[first, second]).values_list("name", "global_default"))
        assert rows == {first: False, second: True}
        ours = default_class(priority_classes_for(""))
        assert (ours.name, ours.value) == (spec.priority_class_name, spec.priority)  # our hints resolve it as the cluster does
    finally:
        admission = client.AdmissionregistrationV1Api(kube)  # the pass applied the team-isolation policy: the API server is shared
        deletes = [(scheduling.delete_priority_class, name) for name in (second, first)]
        deletes += [(admission.delete_validating_admission_policy_binding, POLICY_NAME), (admission.delete_validating_admission_policy, POLICY_NAME)]
        for delete, name in deletes:
            try:
                delete(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
    priority_classes_sync(ClusterPods(kube))
    assert not PriorityClass.objects.filter(name__in=[first, second]).exists()


def test_a_nul_character_in_a_class_s_description_is_read_as_a_replacement_character(kube, unique, db):
    """The API server keeps a description with U+0000 in it; PostgreSQL's text refuses it, and
    every sync of the classes failed while that class existed."""
    scheduling = client.SchedulingV1Api(kube)
    name = f"nul-{unique}"
    scheduling.create_priority_class(client.V1PriorityClass(metadata=client.V1ObjectMeta(name=name), value=10, description="a\x00b"))
    try:
        assert name in priority_classes_sync(ClusterPods(kube))
        assert PriorityClass.objects.get(name=name).description == "a\ufffdb"
    finally:
        scheduling.delete_priority_class(name)
