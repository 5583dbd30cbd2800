"""A PodDisruptionBudget document validated as kube-apiserver validates policy/v1 (issue 22 item 2);
the agreement with a real API server is checked in tests/k8s/test_disruption_budgets_on_kubernetes.py,
over the same documents (`CASES`)."""

from __future__ import annotations

import pytest

from pools.core.disruption_spec import parse_budget
from pools.core.errors import ValidationError


def budget(**spec) -> dict:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "trainers"}, "spec": spec}


TRAINERS = {"matchLabels": {"app": "trainer"}}

# (spec, the fields it is refused on; none: accepted)
CASES = [
    ({"minAvailable": 1, "selector": TRAINERS}, set()),
    ({"maxUnavailable": "25%", "selector": TRAINERS}, set()),
    ({"minAvailable": "100%", "selector": {}}, set()),
    ({"minAvailable": 0}, set()),  # no selector: it selects nothing, and is valid
    ({"selector": TRAINERS}, set()),  # neither bound: valid, and allows no eviction
    ({"maxUnavailable": 1, "selector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, "unhealthyPodEvictionPolicy": "AlwaysAllow"}, set()),
    ({"minAvailable": 1, "maxUnavailable": 1, "selector": TRAINERS}, {"spec"}),
    ({"minAvailable": -1, "selector": TRAINERS}, {"spec.minAvailable"}),
    ({"maxUnavailable": 2**31 - 1, "selector": TRAINERS}, set()),  # the IntOrString's int is an int32
    ({"maxUnavailable": 2**31, "selector": TRAINERS}, {"spec.maxUnavailable"}),
    ({"maxUnavailable": 2**70, "selector": TRAINERS}, {"spec.maxUnavailable"}),
    ({"minAvailable": 2**70, "selector": TRAINERS}, {"spec.minAvailable"}),
    ({"minAvailable": "9" * 5000 + "%", "selector": TRAINERS}, {"spec.minAvailable"}),  # was a 500 (int() of 5000 digits)
    ({"minAvailable": "0100%", "selector": TRAINERS}, set()),
    ({"maxUnavailable": "101%", "selector": TRAINERS}, {"spec.maxUnavailable"}),
    ({"maxUnavailable": "five", "selector": TRAINERS}, {"spec.maxUnavailable"}),
    ({"minAvailable": "3", "selector": TRAINERS}, {"spec.minAvailable"}),  # a string must be a percent
    ({"minAvailable": 1, "selector": {"matchExpressions": [{"key": "app", "operator": "In"}]}}, {"spec.selector.matchExpressions[0].values"}),
    ({"minAvailable": 1, "selector": {"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["a"]}]}}, {"spec.selector.matchExpressions[0].values"}),
    ({"minAvailable": 1, "selector": {"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]}}, {"spec.selector.matchExpressions[0].operator"}),
    ({"minAvailable": 1, "selector": {"matchExpressions": [{"key": "bad key", "operator": "Exists"}]}}, {"spec.selector.matchExpressions[0].key"}),
    ({"minAvailable": 1, "selector": {"matchLabels": {"app": "not a value"}}}, {"spec.selector.matchLabels.app"}),
    ({"minAvailable": 1, "selector": TRAINERS, "unhealthyPodEvictionPolicy": "Never"}, {"spec.unhealthyPodEvictionPolicy"}),
]


@pytest.mark.parametrize(("spec", "refused"), CASES)
def test_a_budget_is_accepted_or_refused_as_kube_apiserver_does(spec, refused):
    if not refused:
        parsed = parse_budget(budget(**spec), default_namespace="algorithm")
        assert (parsed.namespace, parsed.name) == ("algorithm", "trainers")
        assert parsed.spec_document() == spec
        return
    with pytest.raises(ValidationError) as caught:
        parse_budget(budget(**spec), default_namespace="algorithm")
    assert {error.field for error in caught.value.errors} == refused


def test_every_bad_field_of_the_document_is_named():
    document = {"apiVersion": "policy/v1beta1", "kind": "Pod", "metadata": {"name": "Trainers", "namespace": "Algo", "labels": {"a": 1}}, "spec": {"minAvailable": True, "extra": 1}}
    with pytest.raises(ValidationError) as caught:
        parse_budget(document)
    assert {e.field for e in caught.value.errors} == {"apiVersion", "kind", "metadata.name", "metadata.namespace", "metadata.labels.a", "spec.minAvailable", "spec.extra"}


@pytest.mark.parametrize("document", [None, [], "budget", {"apiVersion": "policy/v1"}, budget(selector=[]), budget(selector={"matchExpressions": {}})])
def test_a_malformed_document_is_refused_not_crashed_on(document):
    with pytest.raises(ValidationError):
        parse_budget(document, default_namespace="algorithm")


@pytest.mark.parametrize(("annotations", "refused"), [
    ({"Example.COM/Foo": "x"}, set()),  # kube-apiserver checks annotation keys lower-cased
    ({"bad key!": "x"}, {"metadata.annotations.bad key!"}),
    ({"note": "x\x00"}, {"metadata.annotations.note"}),  # PostgreSQL cannot store NUL: it was a 500 there
    ({"note": "\x1b]0;PWNED\x07"}, {"metadata.annotations.note"}),
    ({"a": "x" * 150_000, "b": "y" * 150_000}, {"metadata.annotations"}),
    ({"a": 1}, {"metadata.annotations.a"}),
])  # fmt: skip
def test_a_budgets_annotations_are_checked_as_a_pods_are(annotations, refused):
    document = budget(minAvailable=1, selector=TRAINERS)
    document["metadata"]["annotations"] = annotations
    try:
        parse_budget(document, default_namespace="algorithm")
    except ValidationError as exc:
        assert {error.field for error in exc.errors} == refused
    else:
        assert not refused
