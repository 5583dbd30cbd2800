"""The Pod document (seed O3): Kubernetes-like fields, quantities, annotations, field-path errors."""

from __future__ import annotations

import pytest

from pools.core.errors import ValidationError
from pools.core.podspec import core_pod_from_spec, cpu_milli, memory_mib, parse_pod
from pools.core.scheduling.nodes import NodeState, Taint, filter_node
from tests.pools.pod_helpers import pod_document, train_pod_document


def paths(exc: ValidationError) -> set[str]:
    return {e.field for e in exc.errors}


def test_the_articles_pod_loads_with_affinity_and_toleration():
    spec = parse_pod(train_pod_document())
    assert (spec.namespace, spec.name, spec.priority) == ("algorithm", "bert-train-0", 100)
    assert (spec.cpu_milli, spec.memory_mib, spec.gpu_count, spec.gpu_milli) == (16000, 128 * 1024, 4, 1000)
    assert spec.checkpointable and spec.duration_seconds == 7200
    assert spec.tolerations == ({"key": "pool", "operator": "Equal", "value": "train", "effect": "NoSchedule"},)
    pod = core_pod_from_spec(spec)
    assert pod.affinity_terms[0][0].key == "pool" and pod.affinity_terms[0][0].values == ("train",)
    node = NodeState("n1", 128000, 1 << 20, 8, "A100_80G", labels={"pool": "train"}, taints=(Taint("pool", "train"),))
    assert filter_node(pod, node) is None


def test_the_articles_pod_without_its_toleration_is_kept_off_the_tainted_node():
    document = train_pod_document()
    del document["spec"]["tolerations"]
    pod = core_pod_from_spec(parse_pod(document))
    node = NodeState("n1", 128000, 1 << 20, 8, "A100_80G", labels={"pool": "train"}, taints=(Taint("pool", "train"),))
    assert filter_node(pod, node) == "node(s) had untolerated taint {pool: train}"


@pytest.mark.parametrize(
    ("quantity", "milli"), [("4", 4000), (2, 2000), (0.5, 500), ("500m", 500), ("1.5", 1500), ("0.0001", 1)]
)
def test_cpu_quantities_are_milli_cpu(quantity, milli):
    assert cpu_milli(quantity) == milli


@pytest.mark.parametrize(
    ("quantity", "mib"), [("64Gi", 65536), ("512Mi", 512), ("1G", 954), (1048576, 1), ("1Ki", 1)]
)
def test_memory_quantities_are_mib(quantity, mib):
    assert memory_mib(quantity) == mib


def test_a_gpu_share_comes_from_the_milli_annotation_and_models_from_gpu_models():
    spec = parse_pod(pod_document("share", milli=250, models="A100_80G, H100_80G"))
    assert (spec.gpu_count, spec.gpu_milli, spec.gpu_models) == (1, 250, ("A100_80G", "H100_80G"))
    assert core_pod_from_spec(spec).is_sharing


def test_the_namespace_defaults_to_the_given_one():
    document = pod_document("p")
    del document["metadata"]["namespace"]
    assert parse_pod(document, default_namespace="inference").namespace == "inference"


def test_every_bad_field_is_reported_with_its_path():
    document = pod_document("Bad_Name", gpus=2, milli=300)
    document["kind"] = "Deployment"
    document["spec"]["priorityClassName"] = "high"
    document["spec"]["containers"][0]["resources"]["requests"].update({"cpu": "lots", "ephemeral-storage": "1Gi"})
    document["spec"]["tolerations"] = [{"key": "pool", "operator": "Maybe", "effect": "NoSchedule"}]
    terms = document["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    terms[0]["matchExpressions"].append({"key": "size", "operator": "Gt", "values": ["big"]})
    document["metadata"]["annotations"]["ebcloud.io/duration"] = "soon"
    with pytest.raises(ValidationError) as caught:
        parse_pod(document)
    base = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
    assert paths(caught.value) == {
        "kind",
        "metadata.name",
        "spec.priorityClassName",
        "spec.containers[0].resources.requests.cpu",
        "spec.containers[0].resources.requests.ephemeral-storage",
        "spec.tolerations[0].operator",
        f"{base}.matchExpressions[1].values",
        "metadata.annotations.ebcloud.io/gpu-milli",
        "metadata.annotations.ebcloud.io/duration",
    }


def test_a_pod_without_containers_is_rejected():
    document = pod_document("p")
    document["spec"]["containers"] = []
    with pytest.raises(ValidationError) as caught:
        parse_pod(document)
    assert paths(caught.value) == {"spec.containers"}


def test_exists_tolerations_and_empty_effects_are_kept_in_kubernetes_shape():
    document = pod_document("p", tolerate=None)
    document["spec"]["tolerations"] = [{"operator": "Exists"}, {"key": "pool", "operator": "Exists"}]
    spec = parse_pod(document)
    pod = core_pod_from_spec(spec)
    assert all(t.operator == "Exists" for t in pod.tolerations)
    assert spec.tolerations[0] == {"key": "", "operator": "Exists", "value": "", "effect": ""}
