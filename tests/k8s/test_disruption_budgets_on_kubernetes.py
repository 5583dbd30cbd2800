"""PodDisruptionBudgets and a real kube-apiserver (issue 22 item 2): the simulated cluster's are
validated as it validates policy/v1 (each document of tests/pools/test_disruption_spec.py is sent to
the API server, dry run, and to `parse_budget`: both accept it or both refuse it, on the same
fields); on a real cluster the product shows the cluster's own, to their namespace's team."""

from __future__ import annotations

import json
import re

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from pools.core.disruption_spec import parse_budget
from pools.core.errors import ValidationError
from pools.models import NamespaceTeam
from pools.models.pods import Pod
from tests.pools.test_disruption_spec import CASES, budget

# A 400: the document does not even decode, e.g. an int beyond an IntOrString's int32 ("json: cannot
# unmarshal number 2147483648 into Go struct field PodDisruptionBudgetSpec.spec.maxUnavailable of type int32").
UNDECODABLE = re.compile(r"Go struct field \w+\.(\S+) of type")


def refused_by_kubernetes(kube, namespace: str, document: dict) -> set[str] | None:
    """The fields kube-apiserver names when it refuses the document (invalid, 422, or not
    decodable, 400: both are refusals); None when it accepts it."""
    try:
        client.PolicyV1Api(kube).create_namespaced_pod_disruption_budget(namespace, document, dry_run="All")
    except ApiException as exc:
        body = json.loads(exc.body)
        if exc.status == 400:
            field = UNDECODABLE.search(body["message"])
            assert field, exc.body
            return {field.group(1)}
        assert exc.status == 422, exc.body
        return {re.sub(r"\[([^\]0-9][^\]]*)\]", r".\1", cause["field"]) for cause in body["details"]["causes"]}
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


@pytest.mark.django_db
def test_a_real_clusters_budgets_are_shown_to_their_namespaces_team_only(api, browser, actors, teams, kube, namespace, on_kubernetes):
    """On a real cluster the budgets are the cluster's own: the API lists them (with the status
    its disruption controller wrote) to the team whose namespace holds them, refuses to write
    them (409: kubectl's job), and the pod page names the one guarding a pod."""
    NamespaceTeam.objects.create(namespace=namespace, team=teams["algorithm"])
    policy = client.PolicyV1Api(kube)
    policy.create_namespaced_pod_disruption_budget(namespace, budget(minAvailable=1, selector={"matchLabels": {"app": "trainer"}}))
    policy.patch_namespaced_pod_disruption_budget_status("trainers", namespace, {"status": {  # as kube-controller-manager would
        "observedGeneration": 1, "disruptionsAllowed": 1, "currentHealthy": 2, "desiredHealthy": 1, "expectedPods": 2}})  # fmt: skip
    listed = api("lead").get(f"/api/v1/poddisruptionbudgets/?namespace={namespace}").json()
    assert [(b["metadata"]["name"], b["metadata"]["team"], b["status"]["disruptionsAllowed"]) for b in listed] == [("trainers", "algorithm", 1)]
    assert "managedFields" not in listed[0]["metadata"] and listed[0]["spec"]["minAvailable"] == 1
    assert api("lead").get(f"/api/v1/poddisruptionbudgets/{namespace}/trainers/").json()["status"]["currentHealthy"] == 2
    assert api("other_lead").get(f"/api/v1/poddisruptionbudgets/?namespace={namespace}").json() == []
    assert api("other_lead").get(f"/api/v1/poddisruptionbudgets/{namespace}/trainers/").status_code == 404
    assert api("finance").get(f"/api/v1/poddisruptionbudgets/{namespace}/trainers/").status_code == 200
    for method, url in (("post", "/api/v1/poddisruptionbudgets/"), ("put", f"/api/v1/poddisruptionbudgets/{namespace}/trainers/"),
                        ("delete", f"/api/v1/poddisruptionbudgets/{namespace}/trainers/")):  # fmt: skip
        response = getattr(api("lead"), method)(url, budget(), format="json")
        assert response.status_code == 409 and "kubectl" in response.json()["errors"][0]["message"]
    Pod.objects.create(namespace=namespace, name="t0", team=teams["algorithm"], labels={"app": "trainer"}, uid="u-t0")  # as mirrored
    assert "trainers: 1 of its pods may be evicted now" in browser("lead").get(f"/pods/{namespace}/t0/").content.decode()
