"""The disruption budget pages: a lead lists the team's budgets with how many pods each lets go
now, adds one by YAML paste (a bad one is a 400 naming the field, nothing written) and deletes
it; another team's budgets are not there; finance reads, never writes."""

from __future__ import annotations

from pools.models.pods import PodDisruptionBudget
from pools.services.disruption_budgets import budget_create
from tests.pools.pod_helpers import labelled_pods_running

GOOD = """apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: nlp-trainers}
spec:
  maxUnavailable: 1
  selector: {matchLabels: {project: nlp}}
"""


def test_a_lead_adds_a_budget_by_yaml_and_sees_how_many_pods_may_go(browser, actors):
    labelled_pods_running(actors, ("nlp-0", "nlp-1"), {"project": "nlp"})
    lead = browser("lead")
    assert "Disruption budgets" in lead.get("/pods/").content.decode()
    empty = lead.get("/disruption-budgets/").content.decode()
    assert "No disruption budgets yet: every running pod may be evicted at any time." in empty
    form = lead.get("/disruption-budgets/new/").content.decode()
    assert "PodDisruptionBudget YAML" in form and "maxUnavailable: 1" in form  # the example to start from
    response = lead.post("/disruption-budgets/new/", {"document": GOOD})
    assert response.status_code == 302 and response["Location"] == "/disruption-budgets/"
    page = lead.get("/disruption-budgets/").content.decode()
    assert "Disruption budget algorithm/nlp-trainers added." in page
    assert "<code>project=nlp</code>" in page and "2 healthy, at least 1 must stay: 1 may be evicted now" in page
    assert 'aria-label="Delete algorithm/nlp-trainers"' in page
    assert "nlp-trainers: 2 healthy" in lead.get("/pods/algorithm/nlp-0/").content.decode()
    response = lead.post("/disruption-budgets/algorithm/nlp-trainers/delete/")
    assert response.status_code == 302 and not PodDisruptionBudget.objects.exists()


def test_a_bad_budget_is_a_400_naming_the_field_and_nothing_is_written(browser, actors):
    response = browser("member").post("/disruption-budgets/new/", {"document": GOOD.replace("maxUnavailable: 1", "maxUnavailable: 150%")})
    assert response.status_code == 400
    assert "<code>spec.maxUnavailable</code>: must not be greater than 100%" in response.content.decode()
    response = browser("member").post("/disruption-budgets/new/", {"document": "kind: ["})
    assert response.status_code == 400 and "malformed YAML" in response.content.decode()
    assert not PodDisruptionBudget.objects.exists()


def test_a_budget_for_another_teams_namespace_is_not_found_and_the_pasted_yaml_stays(browser, actors):
    """The namespace stays unrevealed (404), but the form comes back with the document: it was
    the generic 404 page, the paste lost (found by a QA sweep)."""
    pasted = GOOD.replace("metadata: {name: nlp-trainers}", "metadata: {name: nlp-trainers, namespace: inference}")
    response = browser("lead").post("/disruption-budgets/new/", {"document": pasted})
    assert response.status_code == 404
    page = response.content.decode()
    assert "namespace: inference" in page and "not found" in page and "PodDisruptionBudget YAML" in page
    assert not PodDisruptionBudget.objects.exists()


def test_another_teams_budgets_are_not_there_and_finance_only_reads(browser, actors):
    budget_create(user=actors["member"], document={"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "trainers"}, "spec": {"minAvailable": 1}})
    assert "<td>no pod</td>" in browser("lead").get("/disruption-budgets/").content.decode()  # no selector: it selects nothing
    other = browser("other_lead").get("/disruption-budgets/").content.decode()
    assert "trainers" not in other
    assert browser("other_lead").post("/disruption-budgets/algorithm/trainers/delete/").status_code == 404
    finance = browser("finance")
    page = finance.get("/disruption-budgets/").content.decode()
    assert "trainers" in page and "Delete" not in page and "Add a disruption budget" not in page
    assert finance.get("/disruption-budgets/new/").status_code == 403
    assert finance.post("/disruption-budgets/algorithm/trainers/delete/").status_code == 403
    assert PodDisruptionBudget.objects.count() == 1
