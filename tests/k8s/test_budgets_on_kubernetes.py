"""The simulated cluster's PodDisruptionBudgets are validated as a real kube-apiserver validates
policy/v1 (issue 22 item 2): each document of tests/pools/test_budget_spec.py is sent to the API
server (dry run) and to `parse_budget`; both accept it or both refuse it, on the same fields."""

from __future__ import annotations

import json
import re

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from pools.core.budget_spec import parse_budget
from pools.core.errors import ValidationError
from tests.pools.test_budget_spec import CASES, budget


def refused_by_kubernetes(kube, namespace: str, document: dict) -> set[str] | None:
    """The fields kube-apiserver names when it refuses the document; None when it accepts it."""
    try:
        client.PolicyV1Api(kube).create_namespaced_pod_disruption_budget(namespace, document, dry_run="All")
    except ApiException as exc:
        assert exc.status == 422, exc.body
        return {re.sub(r"\[([^\]0-9][^\]]*)\]", r".\1", cause["field"]) for cause in json.loads(exc.body)["details"]["causes"]}
    return None


def refused_by_us(document: dict) -> set[str] | None:
    try:
        parse_budget(document, default_namespace="algorithm")
    except ValidationError as exc:
        return {error.field for error in exc.errors}
    return None


@pytest.mark.parametrize(("spec", "refused"), CASES)
def test_we_refuse_a_budget_when_kube_apiserver_does_and_name_its_fields(kube, namespace, spec, refused):
    theirs, ours = refused_by_kubernetes(kube, namespace, budget(**spec)), refused_by_us(budget(**spec))
    assert (theirs is None) == (ours is None), (theirs, ours)
    for field in theirs or ():  # theirs may stop at the map (spec.selector.matchLabels); ours names the key
        assert any(mine == field or mine.startswith(field + ".") for mine in ours), (field, ours)
