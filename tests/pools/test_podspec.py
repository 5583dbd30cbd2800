"""The Pod document (seed O3): Kubernetes-like fields, quantities, annotations, field-path errors."""

from __future__ import annotations

import pytest

from pools.core.errors import ValidationError
from pools.core.podspec import (
    admit,
    core_pod_from_spec,
    gpu_request,
    parse_pod,
    with_defaults,
)
from pools.core.priority import parse_priority_class
from pools.core.quantities import mib, milli, non_negative
from pools.core.scheduling.nodes import NodeState, Taint, filter_node
from pools.core.yaml_loading import load_all
from tests.conftest import EXAMPLES
from tests.pools.pod_document_cases import CASES, case_document
from tests.pools.pod_helpers import pod_document, train_pod_document

EXAMPLE_CLASSES = {c.name: c for c in map(parse_priority_class, load_all((EXAMPLES / "priorityclasses.yaml").read_text()))}


def paths(exc: ValidationError) -> set[str]:
    return {e.field for e in exc.errors}


def test_the_articles_pod_loads_with_affinity_and_toleration():
    spec = admit(parse_pod(train_pod_document()), EXAMPLE_CLASSES)
    assert (spec.namespace, spec.name, spec.priority) == ("algorithm", "bert-train-0", 100)
    assert (spec.priority_class_name, spec.preemption_policy) == ("training", "PreemptLowerPriority")
    assert (spec.cpu_milli, spec.memory_mib, spec.gpu_count, spec.gpu_milli) == (16000, 128 * 1024, 8, 1000)  # limits: {nvidia.com/gpu: 8}
    assert spec.checkpointable and spec.duration_seconds == 7200
    assert spec.tolerations == ({"key": "pool", "operator": "Equal", "value": "train", "effect": "NoSchedule"},)
    pod = core_pod_from_spec(spec)
    assert pod.priority == 100 and pod.may_preempt
    assert pod.affinity_terms[0][0].key == "pool" and pod.affinity_terms[0][0].values == ("train",)
    node = NodeState("n1", 128000, 1 << 20, 8, "A100_80G", labels={"pool": "train"}, taints=(Taint("pool", "train"),))
    assert filter_node(pod, node) is None


def test_the_articles_pod_without_its_toleration_is_kept_off_the_tainted_node():
    document = train_pod_document()
    del document["spec"]["tolerations"]
    pod = core_pod_from_spec(parse_pod(document))
    node = NodeState("n1", 128000, 1 << 20, 8, "A100_80G", labels={"pool": "train"}, taints=(Taint("pool", "train"),))
    assert filter_node(pod, node) == "node(s) had untolerated taint(s)"


@pytest.mark.parametrize(
    ("quantity", "expected"),
    [("4", 4000), (2, 2000), (0.5, 500), ("500m", 500), ("1.5", 1500), ("0.0001", 1), (".5", 500), ("1e3", 1_000_000), ("+4", 4000), ("100u", 1), ("2E0", 2000), ("1k", 1_000_000), ("1.", 1000)],
)
def test_cpu_quantities_are_milli_cpu_rounded_up_as_kubernetes_reads_them(quantity, expected):
    assert milli(non_negative(quantity)) == expected


@pytest.mark.parametrize(
    ("quantity", "expected"),
    [("64Gi", 65536), ("512Mi", 512), ("1G", 954), (1048576, 1), ("1Ki", 1), ("5e9", 4769), ("1Ei", 2**40), ("100m", 1), ("+1Gi", 1024)],
)
def test_memory_quantities_are_mib(quantity, expected):
    assert mib(non_negative(quantity)) == expected


@pytest.mark.parametrize("quantity", ["1.2.3", "1 Gi", " 4 ", "4 ", "1K", "1e", "e3", "abc", "", "١", "1_0", True, None, [], "Infinity", "NaN", "-1", -0.5])
def test_what_is_no_quantity_or_negative_is_refused(quantity):
    with pytest.raises(ValueError):
        non_negative(quantity)


def test_a_gpu_share_is_the_gpu_milli_resource_and_models_come_from_gpu_models():
    spec = parse_pod(pod_document("share", milli=250, models="A100_80G, H100_80G"))
    assert (spec.gpu_count, spec.gpu_milli, spec.gpu_models) == (1, 250, ("A100_80G", "H100_80G"))
    assert core_pod_from_spec(spec).is_sharing


def test_shares_of_several_containers_add_up_to_at_most_one_gpu():
    """Extended resources add up over containers as kube-scheduler counts them (seed D1)."""
    document = pod_document("two", milli=300)
    document["spec"]["containers"].append({"name": "side", "image": "side:1", "resources": {"limits": {"ebcloud.io/gpu-milli": "200"}}})
    spec = parse_pod(document)
    assert (spec.gpu_count, spec.gpu_milli) == (1, 500)
    document["spec"]["containers"][1]["resources"]["limits"]["ebcloud.io/gpu-milli"] = "800"
    with pytest.raises(ValidationError) as caught:
        parse_pod(document)
    assert paths(caught.value) == {"spec.containers[1].resources.limits.ebcloud.io/gpu-milli"}
    assert "1100 thousandths" in str(caught.value)


def test_a_share_follows_the_extended_resource_rules_and_the_old_annotation_points_to_it():
    document = pod_document("p", milli=500)
    document["spec"]["containers"][0]["resources"] = {"requests": {"ebcloud.io/gpu-milli": "500"}}
    document["metadata"]["annotations"]["ebcloud.io/gpu-milli"] = "500"
    with pytest.raises(ValidationError) as caught:
        parse_pod(document)
    assert paths(caught.value) == {"spec.containers[0].resources.limits.ebcloud.io/gpu-milli", "metadata.annotations.ebcloud.io/gpu-milli"}
    assert "resources.limits.ebcloud.io/gpu-milli instead" in str(caught.value)


@pytest.mark.parametrize(
    ("gpus", "shares", "counted"),
    [(0, 0, (0, 0)), (4, 0, (4, 1000)), (0, 250, (1, 250)), (0, 1000, (1, 1000)), (0, 1500, (2, 1000)), (2, 300, (3, 1000))],
)
def test_a_real_clusters_request_is_never_counted_as_less_than_it_can_hold(gpus, shares, counted):
    """What the API refuses (more than one GPU in shares, or both) still comes from a real
    cluster's pods: counted as the whole GPUs it may occupy."""
    assert gpu_request(gpus, shares) == counted


def test_the_namespace_defaults_to_the_given_one():
    document = pod_document("p")
    del document["metadata"]["namespace"]
    assert parse_pod(document, default_namespace="inference").namespace == "inference"


def test_every_bad_field_is_reported_with_its_path():
    document = pod_document("Bad_Name", gpus=2, milli=300)
    document["kind"] = "Deployment"
    document["spec"]["priorityClassName"] = "High Priority"
    document["spec"]["containers"][0]["resources"]["requests"].update({"cpu": "lots", "example.com/widget": "1"})
    document["spec"]["tolerations"] = [{"key": "pool", "operator": "Maybe", "effect": "NoSchedule"}]
    terms = document["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    terms[0]["matchExpressions"].append({"key": "size", "operator": "Gt", "values": ["big", "bigger"]})
    document["metadata"]["annotations"]["ebcloud.io/duration"] = "soon"
    with pytest.raises(ValidationError) as caught:
        parse_pod(document)
    base = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
    assert paths(caught.value) == {
        "kind",
        "metadata.name",
        "spec.priorityClassName",
        "spec.containers[0].resources.requests.cpu",
        "spec.containers[0].resources.requests.example.com/widget",
        "spec.tolerations[0].operator",
        f"{base}.matchExpressions[1].values",
        "spec.containers[0].resources.limits.ebcloud.io/gpu-milli",
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


# --- requests and limits follow Kubernetes (extended resources cannot be overcommitted) ---------

GPU = "nvidia.com/gpu"
RESOURCES = "spec.containers[0].resources"


def resources_pod(**resources) -> dict:
    document = pod_document("p")
    document["spec"]["containers"][0]["resources"] = resources
    return document


def refusal(document) -> dict[str, str]:
    with pytest.raises(ValidationError) as caught:
        parse_pod(document)
    return {e.field: e.message for e in caught.value.errors}


def test_a_gpu_limit_alone_sets_the_request_as_in_kubernetes():
    spec = parse_pod(resources_pod(limits={GPU: 8}))
    assert spec.gpu_count == 8
    assert parse_pod(resources_pod(limits={GPU: "2"})).gpu_count == 2


def test_a_gpu_request_equal_to_its_limit_is_accepted():
    assert parse_pod(resources_pod(requests={GPU: 4}, limits={GPU: "4"})).gpu_count == 4


def test_a_gpu_request_other_than_its_limit_is_refused_at_the_request():
    errors = refusal(resources_pod(requests={GPU: 4}, limits={GPU: 8}))
    assert errors == {f"{RESOURCES}.requests.{GPU}": f"must be equal to {GPU} limit of 8"}
    assert f"{RESOURCES}.requests.{GPU}" in refusal(resources_pod(requests={GPU: 8}, limits={GPU: 4}))


def test_a_gpu_request_without_a_limit_is_refused_as_kubernetes_does():
    """kube-apiserver: `Limit must be set for non overcommitable resources`."""
    errors = refusal(resources_pod(requests={GPU: 1}))
    assert list(errors) == [f"{RESOURCES}.limits.{GPU}"]
    assert errors[f"{RESOURCES}.limits.{GPU}"].startswith("Limit must be set for non overcommitable resources")


def test_cpu_and_memory_limits_set_missing_requests_and_cap_given_ones():
    spec = parse_pod(resources_pod(requests={"cpu": "2"}, limits={"cpu": "4", "memory": "8Gi", GPU: 1}))
    assert (spec.cpu_milli, spec.memory_mib, spec.gpu_count) == (2000, 8192, 1)  # overcommit allowed below the limit
    errors = refusal(resources_pod(requests={"cpu": "8", "memory": "1Gi"}, limits={"cpu": "4", "memory": "512Mi"}))
    assert errors == {f"{RESOURCES}.requests.cpu": "must be less than or equal to cpu limit of 4",
                      f"{RESOURCES}.requests.memory": "must be less than or equal to memory limit of 512Mi"}


@pytest.mark.parametrize("limit", [-1, 1.5, "1500m", "lots", True, 10**30, "١", " 1"])
def test_bad_gpu_limits_are_refused_at_the_limit(limit):
    assert f"{RESOURCES}.limits.{GPU}" in refusal(resources_pod(limits={GPU: limit}))


def test_unknown_resources_in_limits_are_named():
    assert f"{RESOURCES}.limits.example.com/fpga" in refusal(resources_pod(limits={"example.com/fpga": 1}))


def test_limits_sum_over_containers_like_requests():
    document = resources_pod(limits={GPU: 2})
    document["spec"]["containers"].append({"name": "side", "image": "side:1", "resources": {"requests": {GPU: 1}, "limits": {GPU: 1}}})
    assert parse_pod(document).gpu_count == 3


def test_the_stored_document_shows_the_defaulted_requests():
    document = resources_pod(requests={"cpu": "2"}, limits={GPU: 8, "cpu": "4"})
    stored = with_defaults(document)
    assert stored["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "2", GPU: 8}, "limits": {GPU: 8, "cpu": "4"}}
    assert document["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "2"}  # the input is not changed
    assert parse_pod(stored).gpu_count == 8


# --- free text: annotations and the containers' strings ----------------------------------------


@pytest.mark.parametrize("text", ["\x1b]0;PWNED\x07", "a\x00b", "bell\x07", "csi\x9b31m", "del\x7f"])
def test_control_characters_in_annotations_and_container_strings_are_refused(text):
    document = pod_document("p", duration="1h")
    document["metadata"]["annotations"]["note"] = text
    document["spec"]["containers"][0].update(image=text, command=["sh", "-c", text], env=[{"name": "X", "value": text}])
    errors = refusal(document)
    assert {"metadata.annotations.note", "spec.containers[0].image", "spec.containers[0].command[2]",
            "spec.containers[0].env[0].value"} <= set(errors)
    assert "control characters" in errors["metadata.annotations.note"]


def test_newlines_and_tabs_are_fine_in_free_text():
    document = pod_document("p")
    document["metadata"]["annotations"]["note"] = "line one\n\tline two"
    document["spec"]["containers"][0]["command"] = ["sh", "-c", "echo a\necho b"]
    assert parse_pod(document).name == "p"


# --- judged as kube-apiserver judges (the same cases go to a real one in tests/k8s) ----------


@pytest.mark.parametrize(("case", "change", "refused"), CASES, ids=[case for case, _, _ in CASES])
def test_we_take_and_refuse_the_pods_kube_apiserver_takes_and_refuses(case, change, refused):
    try:
        parse_pod(case_document(change), default_namespace="algorithm")
    except ValidationError:
        assert refused, case
    else:
        assert not refused, case


def test_a_node_name_field_places_the_pod_on_that_node_only():
    document = case_document(lambda d: d["spec"].update(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]}}}))  # fmt: skip
    pod = core_pod_from_spec(parse_pod(document, default_namespace="algorithm"))
    nodes = [NodeState(name, 16000, 1 << 17, 8, "A100_80G") for name in ("n1", "n2")]
    assert [filter_node(pod, node) for node in nodes] == ["node(s) didn't match Pod's node affinity/selector", None]


@pytest.mark.parametrize(("label", "fits"), [("5", True), ("4", False), ("+5", True), ("1_0", False), ("99999999999999999999", False), ("٥", False)])
def test_gt_compares_integers_as_go_parses_them(label, fits):
    document = case_document(lambda d: d["spec"].update(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["4"]}]}]}}}))  # fmt: skip
    pod = core_pod_from_spec(parse_pod(document, default_namespace="algorithm"))
    assert (filter_node(pod, NodeState("n1", 16000, 1 << 17, 8, "A100_80G", labels={"gen": label})) is None) == fits


@pytest.mark.parametrize(("field", "value"), [
    ("spec.containers[0].resources.requests.cpu", {"cpu": "2200000"}),
    ("spec.containers[0].resources.requests.cpu", {"cpu": "9" * 30}),
    ("spec.containers[0].resources.requests.memory", {"memory": "9999999999Ti"}),
])  # fmt: skip
def test_requests_beyond_what_the_product_stores_are_refused_on_the_field(field, value):
    with pytest.raises(ValidationError) as caught:
        parse_pod(case_document(lambda d: d["spec"]["containers"][0]["resources"]["requests"].update(value)), default_namespace="algorithm")
    assert paths(caught.value) == {field}


def test_a_run_time_beyond_ten_years_is_refused():
    with pytest.raises(ValidationError) as caught:
        parse_pod(case_document(lambda d: d["metadata"].update(annotations={"ebcloud.io/duration": "99999999999999h"})), default_namespace="algorithm")
    assert paths(caught.value) == {"metadata.annotations.ebcloud.io/duration"}


def test_a_toleration_keeps_its_seconds_and_a_non_string_effect_is_refused():
    spec = parse_pod(case_document(lambda d: d["spec"].update(tolerations=[{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}])),
                     default_namespace="algorithm")  # fmt: skip
    assert spec.tolerations == ({"key": "k", "operator": "Exists", "value": "", "effect": "NoExecute", "tolerationSeconds": 60},)
    for effect in ({}, [], 0):
        with pytest.raises(ValidationError) as caught:
            parse_pod(case_document(lambda d, effect=effect: d["spec"].update(tolerations=[{"key": "a", "operator": "Exists", "effect": effect}])), default_namespace="algorithm")
        assert paths(caught.value) == {"spec.tolerations[0].effect"}


def test_preferred_terms_reach_the_scheduler_with_their_weights():
    document = case_document(lambda d: d["spec"].update(affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 50, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}},
        {"weight": 5, "preference": {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}}]}}))  # fmt: skip
    pod = core_pod_from_spec(parse_pod(document, default_namespace="algorithm"))
    assert [(weight, [(r.key, r.operator, r.values, r.field) for r in term]) for weight, term in pod.preferred_terms] == [
        (50, [("zone", "In", ("b",), False)]), (5, [("metadata.name", "NotIn", ("n1",), True)])]  # fmt: skip
    assert pod.affinity_terms == ()


def test_preferred_terms_stored_before_they_were_validated_are_skipped_not_fatal():
    from pools.core.pod_placement_spec import preferred_terms

    stored = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": "a\x00b"}, "junk", {"weight": "high", "preference": {}},
        {"weight": 2, "preference": {"matchExpressions": [{"key": "zone", "operator": "Like"}]}},
        {"weight": 3, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}}]}}  # fmt: skip
    assert [weight for weight, _ in preferred_terms(stored)] == [3]
