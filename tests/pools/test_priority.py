"""PriorityClass and pod priority as Kubernetes has them: the pure rules (the Priority admission
plugin's resolution, PriorityClass validation) and preemptionPolicy Never in the preemption core."""

from __future__ import annotations

import pytest

from pools.core.errors import ValidationError
from pools.core.priority import (
    SYSTEM_CLASSES,
    Admitted,
    PriorityClass,
    admit_priority,
    admitted_spec,
    class_errors,
    parse_priority_class,
)
from pools.core.scheduling.explain import explain
from pools.core.scheduling.nodes import NodeState, Pod
from pools.core.scheduling.preempt import preempt
from pools.core.yaml_loading import load_all
from tests.conftest import EXAMPLES

TRAINING = PriorityClass("training", 100)
BATCH = PriorityClass("batch", 10, "Never")
DEFAULT = PriorityClass("everyday", 5, global_default=True)


def admitted(class_name="", priority=None, policy=None, classes=(TRAINING, BATCH)) -> Admitted:
    return admit_priority(class_name=class_name, priority=priority, preemption_policy=policy, classes={c.name: c for c in classes})


def refusal(**kwargs) -> tuple[str, str]:
    with pytest.raises(ValidationError) as caught:
        admitted(**kwargs)
    [error] = caught.value.errors
    return error.field, error.message


def test_a_named_class_gives_its_value_and_policy():
    assert admitted("training") == Admitted(100, "PreemptLowerPriority", "training")
    assert admitted("batch") == Admitted(10, "Never", "batch")


def test_no_name_takes_the_global_default_class_else_zero():
    assert admitted() == Admitted(0, "PreemptLowerPriority", "")
    assert admitted(classes=(TRAINING, DEFAULT)) == Admitted(5, "PreemptLowerPriority", "everyday")


def test_of_several_defaults_the_lowest_value_wins_as_in_kubernetes():
    other = PriorityClass("other-default", 3, global_default=True)
    assert admitted(classes=(DEFAULT, other)).class_name == "other-default"


def test_the_system_classes_are_built_in():
    assert admitted("system-cluster-critical").priority == 2_000_000_000
    assert admitted("system-node-critical").priority == 2_000_001_000
    assert set(SYSTEM_CLASSES) == {"system-cluster-critical", "system-node-critical"}


def test_an_unknown_class_is_refused_in_kubernetes_words():
    assert refusal(class_name="urgent") == ("spec.priorityClassName", "no PriorityClass with name urgent was found")


def test_a_priority_of_the_pods_own_is_refused_unless_it_equals_the_class_value():
    assert refusal(class_name="training", priority=1000) == (
        "spec.priority",
        "the integer value of priority (1000) must not be provided in pod spec; priority admission controller computed 100 from the given PriorityClass name",
    )
    assert refusal(priority=100)[0] == "spec.priority"  # no class: 0
    assert admitted("training", priority=100).priority == 100
    assert admitted(priority=0).priority == 0


def test_a_preemption_policy_of_the_pods_own_must_equal_the_class_policy():
    field, message = refusal(class_name="batch", policy="PreemptLowerPriority")
    assert field == "spec.preemptionPolicy" and message.startswith("the string value of PreemptionPolicy (PreemptLowerPriority) must not be provided")
    assert refusal(policy="Never")[0] == "spec.preemptionPolicy"  # no class: PreemptLowerPriority
    assert admitted("batch", policy="Never").preemption_policy == "Never"


def test_the_stored_spec_shows_the_class_and_the_resolved_values():
    spec = admitted_spec({"priorityClassName": "training", "containers": []}, admitted("training"))
    assert spec == {"priorityClassName": "training", "priority": 100, "preemptionPolicy": "PreemptLowerPriority", "containers": []}
    with_default = admitted_spec({"containers": []}, admitted(classes=(DEFAULT,)))
    assert with_default["priorityClassName"] == "everyday" and with_default["priority"] == 5
    assert "priorityClassName" not in admitted_spec({}, admitted())


@pytest.mark.parametrize(
    ("fields", "path", "words"),
    [
        ({"name": "Training"}, "metadata.name", "DNS-1123 subdomain"),
        ({"name": "system-mine"}, "metadata.name", "reserved for system use only"),
        ({"value": 1_000_000_001}, "value", "maximum allowed value of a user defined priority is 1000000000"),
        ({"value": -(2**31) - 1}, "value", "at least"),
        ({"value": "high"}, "value", "integer"),
        ({"preemption_policy": "Sometimes"}, "preemptionPolicy", "supported values: PreemptLowerPriority, Never"),
        ({"global_default": "yes"}, "globalDefault", "true or false"),
    ],
)
def test_a_user_class_is_validated_as_kube_apiserver_does(fields, path, words):
    errors = class_errors(**{"name": "training", "value": 100, **fields})
    assert [e.field for e in errors] == [path] and words in errors[0].message


def test_the_examples_priority_classes_parse():
    classes = [parse_priority_class(d) for d in load_all((EXAMPLES / "priorityclasses.yaml").read_text())]
    assert [(c.name, c.value, c.preemption_policy, c.global_default) for c in classes] == [
        ("training", 100, "PreemptLowerPriority", False),
        ("batch", 10, "Never", False),
    ]


def test_a_bad_priority_class_document_names_every_field():
    with pytest.raises(ValidationError) as caught:
        parse_priority_class({"apiVersion": "v1", "kind": "PriorityClass", "metadata": {"name": "x"}, "value": 2**40, "extra": 1})
    assert {e.field for e in caught.value.errors} == {"apiVersion", "value", "extra"}


# --- preemptionPolicy: Never in the preemption core --------------------------------------------


def full_node() -> NodeState:
    node = NodeState("n1", 128000, 1 << 20, 8, "A100_80G")
    node.bind(Pod("ns/low", gpu_count=8, priority=10, checkpointable=True), tuple(range(8)))
    return node


def test_a_pod_whose_class_says_never_preempts_nobody():
    urgent = Pod("ns/urgent", gpu_count=8, priority=1000, preemption_policy="Never")
    assert not urgent.may_preempt
    assert preempt(urgent, [full_node()]) is None


def test_the_same_pod_with_preempt_lower_priority_evicts_the_low_one():
    urgent = Pod("ns/urgent", gpu_count=8, priority=1000)
    plan = preempt(urgent, [full_node()])
    assert plan is not None and plan.victim_names == ("ns/low",)


def test_a_never_pod_can_itself_be_preempted_by_a_higher_one():
    node = NodeState("n1", 128000, 1 << 20, 8, "A100_80G")
    node.bind(Pod("ns/batch", gpu_count=8, priority=10, preemption_policy="Never"), tuple(range(8)))
    plan = preempt(Pod("ns/train", gpu_count=8, priority=100), [node])
    assert plan is not None and plan.victim_names == ("ns/batch",)


def test_a_never_pods_hint_does_not_advise_preempting():
    urgent, patient = Pod("ns/urgent", gpu_count=8, priority=100), Pod("ns/patient", gpu_count=8, priority=100, preemption_policy="Never")
    assert "preempt lower-priority pods" in explain(urgent, [full_node()]).hints[0]
    hint = explain(patient, [full_node()]).hints[0]
    assert "preempt lower-priority pods" not in hint and "preemptionPolicy is Never" in hint
