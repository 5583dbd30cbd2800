"""PodDisruptionBudgets of the simulated cluster (issue 22 item 2): the REST API's shapes, errors
and team isolation, the status the disruption controller would write, and the Eviction API's
spending of it by drains and repacks."""

from __future__ import annotations

import pytest

from pools.controllers.scheduler import scheduler_pass
from pools.core.documents import load_yaml
from pools.models import AuditEntry
from pools.models.pods import Pod, PodDisruptionBudget
from pools.providers import get_cluster_backend
from tests.conftest import EXAMPLES
from tests.pools.pod_helpers import T0, pool_with_nodes, submit

URL = "/api/v1/poddisruptionbudgets/"
EXAMPLE = EXAMPLES / "pods" / "nlp-pdb.yaml"


def budget(name="trainers", namespace="algorithm", **spec) -> dict:
    spec = spec or {"minAvailable": 2, "selector": {"matchLabels": {"app": "trainer"}}}
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def fields(response) -> set[str]:
    return {e["field"] for e in response.json()["errors"]}


@pytest.fixture
def trainers(actors):
    """Three Running trainers and one notebook of team algorithm, one GPU each."""
    pool_with_nodes(actors["lead"], nodes=2, node_labels={"pool": "train"})
    for name in ("t0", "t1", "t2"):
        submit(actors["member"], name, gpus=1, cpu="1", labels={"app": "trainer"})
    submit(actors["member"], "notebook", gpus=1, cpu="1", labels={"app": "notebook"})
    scheduler_pass(now=T0)
    assert Pod.objects.filter(phase=Pod.Phase.RUNNING).count() == 4


def status(api, role="member", name="trainers") -> dict:
    return api(role).get(f"{URL}algorithm/{name}/").json()["status"]


def test_a_member_creates_the_example_as_yaml_and_its_status_counts_the_pods(api, trainers):
    response = api("member").post(URL, EXAMPLE.read_bytes(), content_type="application/yaml")
    assert response.status_code == 201, response.content
    created = response.json()
    assert created["metadata"] | {"creationTimestamp": None} == {"name": "nlp-trainers", "namespace": "algorithm", "team": "algorithm", "generation": 1, "creationTimestamp": None}
    assert created["spec"] == load_yaml(EXAMPLE.read_text())["spec"]
    assert created["status"]["expectedPods"] == 0 and created["status"]["disruptionsAllowed"] == 0  # no pod has project=nlp
    assert api("member").post(URL, budget(), format="json").status_code == 201
    got = status(api)
    assert (got["observedGeneration"], got["expectedPods"], got["desiredHealthy"], got["currentHealthy"], got["disruptionsAllowed"]) == (1, 3, 2, 3, 1)
    assert got["conditions"][0] | {"message": ""} == {"type": "DisruptionAllowed", "status": "True", "reason": "SufficientPods", "message": ""}
    assert [b["metadata"]["name"] for b in api("lead").get(URL).json()] == ["nlp-trainers", "trainers"]
    assert AuditEntry.objects.filter(action="poddisruptionbudget.create").count() == 2


def test_another_teams_budget_does_not_exist_for_you(api, trainers):
    assert api("member").post(URL, budget(), format="json").status_code == 201
    assert api("other_lead").get(URL).json() == []
    assert api("other_lead").get(f"{URL}algorithm/trainers/").status_code == 404
    assert api("other_lead").delete(f"{URL}algorithm/trainers/").status_code == 404
    assert api("other_lead").put(f"{URL}algorithm/trainers/", budget(minAvailable=0, selector={}), format="json").status_code == 404
    response = api("other_lead").post(URL, budget(name="sneaky", minAvailable=3, selector={}), format="json")
    assert response.status_code == 404  # a budget in another team's namespace could hold its pods
    assert list(PodDisruptionBudget.objects.values_list("name", flat=True)) == ["trainers"]
    assert [b["metadata"]["name"] for b in api("finance").get(URL).json()] == ["trainers"]  # finance reads every team's
    assert api("finance").post(URL, budget(name="x"), format="json").status_code == 403


def test_bad_budgets_are_400_with_field_paths_and_nothing_is_written(api, actors):
    response = api("member").post(URL, budget(minAvailable=1, maxUnavailable="150%", selector={"matchExpressions": [{"key": "app", "operator": "In"}]}), format="json")
    assert response.status_code == 400
    assert fields(response) == {"spec", "spec.maxUnavailable", "spec.selector.matchExpressions[0].values"}
    assert api("member").post(URL, b"kind: [", content_type="application/yaml").status_code == 400
    assert api("member").post(URL, b"[]", content_type="application/json").status_code == 400
    assert not PodDisruptionBudget.objects.exists() and not AuditEntry.objects.filter(action__startswith="poddisruptionbudget").exists()
    assert api("member").post(URL, budget(), format="json").status_code == 201
    assert api("lead").post(URL, budget(), format="json").status_code == 409


def test_a_replaced_spec_is_a_new_generation_and_a_deleted_budget_is_gone(api, trainers):
    assert api("member").post(URL, budget(), format="json").status_code == 201
    response = api("lead").put(f"{URL}algorithm/trainers/", budget(maxUnavailable=2, selector={"matchLabels": {"app": "trainer"}}), format="json")
    assert response.status_code == 200, response.content
    assert response.json()["metadata"]["generation"] == 2 and response.json()["status"]["disruptionsAllowed"] == 2
    same = api("lead").put(f"{URL}algorithm/trainers/", response.json(), format="json")  # get, edit nothing, put back
    assert same.status_code == 200 and same.json()["metadata"]["generation"] == 2
    renamed = api("lead").put(f"{URL}algorithm/trainers/", budget(name="other"), format="json")
    assert renamed.status_code == 400 and fields(renamed) == {"metadata.name"}
    assert api("finance").delete(f"{URL}algorithm/trainers/").status_code == 403
    assert api("member").delete(f"{URL}algorithm/trainers/").status_code == 204
    assert api("member").get(f"{URL}algorithm/trainers/").status_code == 404


def test_each_eviction_spends_one_disruption_and_the_rest_are_refused(api, trainers):
    """The Eviction API's counting: with 3 healthy and at least 2 to stay, one trainer may go;
    the notebook, under no budget, always may."""
    assert api("member").post(URL, budget(), format="json").status_code == 201
    cluster = get_cluster_backend()
    asked = [("algorithm", "t0"), ("algorithm", "t1"), ("algorithm", "notebook"), ("algorithm", "t2")]
    assert cluster.evict_pods(pods=asked, reason="drain") == {("algorithm", "t0"), ("algorithm", "notebook")}
    assert Pod.objects.get(name="t0").phase == Pod.Phase.PENDING and Pod.objects.get(name="t1").phase == Pod.Phase.RUNNING
    got = status(api)
    assert (got["expectedPods"], got["currentHealthy"], got["disruptionsAllowed"]) == (3, 2, 0)  # t0 waits Pending: still expected
    assert got["conditions"][0]["status"] == "False"
    assert cluster.evict_pod(namespace="algorithm", name="t1", reason="drain") is False
    scheduler_pass(now=T0)  # t0 runs again: one may go again
    assert status(api)["disruptionsAllowed"] == 1
    assert cluster.evict_pod(namespace="algorithm", name="t1", reason="drain") is True


def test_a_pod_two_budgets_select_may_not_be_evicted(api, trainers):
    assert api("member").post(URL, budget(), format="json").status_code == 201
    assert api("member").post(URL, budget(name="everything", minAvailable=0, selector={}), format="json").status_code == 201
    cluster = get_cluster_backend()
    assert cluster.evict_pods(pods=[("algorithm", "t0"), ("algorithm", "notebook")], reason="drain") == {("algorithm", "notebook")}


def test_the_repack_plan_and_its_apply_spend_no_more_than_the_budget_allows(api, actors):
    """Two nodes, a trainer on each: either node drains onto the other, but with at least 2 of
    the 2 trainers to stay, neither may move; with maxUnavailable 1 one may."""
    pool = pool_with_nodes(actors["lead"], nodes=2, node_labels={"pool": "train"})
    for name in ("p0", "p1"):
        submit(actors["member"], name, gpus=1, cpu="1", labels={"app": "trainer"})
    scheduler_pass(now=T0)
    Pod.objects.filter(name="p1").update(node=pool.nodes.get(name="train-pool-a-1"), gpu_indices=[0])
    plan_url = "/api/v1/pools/train-pool-a/fragmentation/"
    assert api("member").post(URL, budget(), format="json").status_code == 201
    plan = api("member").get(f"{plan_url}?plan=1").json()["plan"]
    assert plan["moves"] == [] and plan["freedNodes"] == []
    assert set(plan["skipped"].values()) == {f"the disruption budget algorithm/trainers keeps pod algorithm/{name} in place" for name in ("p0", "p1")}
    assert api("lead").post(f"{plan_url}apply/", {"maxNodes": 2}, format="json").json().get("applied") is None
    assert api("member").put(f"{URL}algorithm/trainers/", budget(maxUnavailable=1, selector={"matchLabels": {"app": "trainer"}}), format="json").status_code == 200
    plan = api("member").get(f"{plan_url}?plan=1").json()["plan"]
    assert len(plan["moves"]) == 1 and len(plan["freedNodes"]) == 1
    applied = api("lead").post(f"{plan_url}apply/", {"maxNodes": 2}, format="json").json()["applied"]
    assert len(applied) == 1
    assert len({p.node_id for p in Pod.objects.filter(phase=Pod.Phase.RUNNING)}) == 1


def test_the_pod_page_names_the_budget_that_guards_the_pod(api, browser, trainers):
    page = browser("member").get("/pods/algorithm/t0/").content.decode()
    assert "none: a drain or a repack may move it at any time" in page
    assert api("member").post(URL, budget(), format="json").status_code == 201
    page = browser("member").get("/pods/algorithm/t0/").content.decode()
    assert "trainers: 3 healthy, at least 2 must stay: 1 may be evicted now" in page
    assert "none: a drain" in browser("member").get("/pods/algorithm/notebook/").content.decode()


@pytest.mark.parametrize(("min_available", "policy", "lets_it_go"), [
    (2, "IfHealthyBudget", True),   # 2 healthy trainers left, 2 must stay: healthy, so the unready one may go
    (3, "IfHealthyBudget", False),  # 2 healthy, 3 must stay: not healthy, so it stays
    (3, "AlwaysAllow", True),
])  # fmt: skip
def test_a_pod_on_a_node_gone_unknown_is_unready_and_goes_as_the_policy_says(api, actors, trainers, min_available, policy, lets_it_go):
    """The node lifecycle controller marks the pods of an Unknown node not Ready: the budget no
    longer counts them healthy, and unhealthyPodEvictionPolicy decides whether one may be evicted
    without spending a disruption (a repair's drain of the node then proceeds or waits)."""
    from pools.models import Node

    lost = Pod.objects.get(name="t0")
    Pod.objects.filter(name__in=("t1", "t2")).update(node=Node.objects.exclude(pk=lost.node_id).get())  # only t0 is on the lost node
    Node.objects.filter(pk=lost.node_id).update(phase=Node.Phase.UNKNOWN)
    document = budget(minAvailable=min_available, selector={"matchLabels": {"app": "trainer"}}, unhealthyPodEvictionPolicy=policy)
    assert api("lead").post(URL, document, format="json").status_code == 201
    status = api("lead").get(f"{URL}algorithm/trainers/").json()["status"]
    assert (status["currentHealthy"], status["disruptionsAllowed"]) == (2, 0)
    evicted = get_cluster_backend().evict_pods(pods=[("algorithm", "t0")], reason="repair")
    assert (evicted == {("algorithm", "t0")}) == lets_it_go
