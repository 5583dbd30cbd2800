"""REST API /api/v1/pods/ and /api/v1/pools/{name}/fragmentation/: shapes, errors, authorization."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from pools.controllers.scheduler import scheduler_pass
from pools.core.documents import dump_yaml
from pools.models import PoolEvent
from pools.models.pods import Pod
from tests.pools.pod_helpers import (
    T0,
    TRAIN_POD,
    pod_document,
    pool_with_nodes,
    submit,
    train_pod_document,
)


@pytest.fixture
def train_pool(actors):
    return pool_with_nodes(actors["lead"], node_labels={"pool": "train"})


def fields(response) -> dict[str, str]:
    return {e["field"]: e["message"] for e in response.json()["errors"]}


def test_a_member_submits_the_articles_pod_as_yaml_and_it_gets_scheduled(api, train_pool):
    response = api("member").post("/api/v1/pods/", TRAIN_POD.read_bytes(), content_type="application/yaml")
    assert response.status_code == 201, response.content
    data = response.json()
    assert data["metadata"]["team"] == "algorithm" and data["status"]["phase"] == "Pending"
    scheduler_pass(now=T0)
    data = api("member").get("/api/v1/pods/algorithm/bert-train-0/").json()
    assert (data["status"]["phase"], data["status"]["nodeName"], data["status"]["pool"]) == ("Running", "train-pool-a-0", "train-pool-a")
    assert data["status"]["conditions"][0]["status"] == "True"
    assert data["spec"]["tolerations"][0]["value"] == "train"


def test_a_pending_pod_says_why_in_status_message_and_hints(api, actors):
    pool_with_nodes(actors["lead"])  # nodes lack pool=train
    assert api("lead").post("/api/v1/pods/", train_pod_document(), format="json").status_code == 201
    scheduler_pass(now=T0)
    status = api("lead").get("/api/v1/pods/algorithm/bert-train-0/").json()["status"]
    assert status["phase"] == "Pending" and status["reason"] == "Unschedulable"
    assert status["message"] == "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    assert any("nodeLabels: {pool: train}" in h for h in status["hints"])
    assert status["conditions"][0] == {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": status["message"]}


def test_invalid_pods_get_400_with_field_paths(api, actors):
    document = pod_document("Bad", gpus=2, milli=100)
    response = api("member").post("/api/v1/pods/", document, format="json")
    assert response.status_code == 400
    assert set(fields(response)) == {"metadata.name", "spec.containers[0].resources.limits.ebcloud.io/gpu-milli"}
    assert not Pod.objects.exists()


def test_malformed_yaml_is_400(api, actors):
    response = api("member").post("/api/v1/pods/", b"kind: [", content_type="application/yaml")
    assert response.status_code == 400 and "malformed YAML" in response.json()["errors"][0]["message"]


def test_a_duplicate_pod_is_409(api, actors):
    assert api("member").post("/api/v1/pods/", train_pod_document(), format="json").status_code == 201
    assert api("lead").post("/api/v1/pods/", train_pod_document(), format="json").status_code == 409


def test_the_team_comes_from_membership_never_from_the_body(api, actors):
    document = train_pod_document()
    document["metadata"]["team"] = "inference"
    assert api("member").post("/api/v1/pods/", document, format="json").json()["metadata"]["team"] == "algorithm"
    response = api("member").post("/api/v1/pods/?team=inference", pod_document("x"), format="json")
    assert response.status_code == 400 and "team" in fields(response)


def test_admins_choose_the_team(api, actors):
    assert api("admin").post("/api/v1/pods/", pod_document("x"), format="json").status_code == 400
    response = api("admin").post("/api/v1/pods/?team=inference", pod_document("x", namespace="serving"), format="json")
    assert response.status_code == 201 and response.json()["metadata"]["team"] == "inference"


def test_the_list_filters_by_namespace_and_phase_in_constant_queries(api, actors, train_pool):
    for i in range(3):
        submit(actors["member"], f"a{i}", gpus=1)
    submit(actors["member"], "big", gpus=16, namespace="research")
    scheduler_pass(now=T0)
    client = api("member")
    assert [p["metadata"]["name"] for p in client.get("/api/v1/pods/?namespace=research").json()] == ["big"]
    assert len(client.get("/api/v1/pods/?phase=Running").json()) == 3
    with CaptureQueriesContext(connection) as few:
        client.get("/api/v1/pods/")
    for i in range(10):
        submit(actors["member"], f"b{i}", gpus=1)
    scheduler_pass(now=T0)
    with CaptureQueriesContext(connection) as many:
        assert len(client.get("/api/v1/pods/").json()) == 14
    assert len(many.captured_queries) == len(few.captured_queries)


def test_deleting_a_running_pod_frees_it_with_an_event(api, actors, train_pool):
    submit(actors["member"], "gone", gpus=8)
    scheduler_pass(now=T0)
    assert api("member").delete("/api/v1/pods/algorithm/gone/").status_code == 204
    assert not Pod.objects.exists()
    assert PoolEvent.objects.filter(pool=train_pool, reason="Killing").exists()


# --- authorization: own team / other team / member / finance / admin / anonymous ------------

READ = {"lead": 200, "member": 200, "finance": 200, "admin": 200, "other_lead": 404, None: 401}
DELETE = {"lead": 204, "member": 204, "admin": 204, "finance": 403, "other_lead": 404, None: 401}
CREATE = {"lead": 201, "member": 201, "other_lead": 201, "admin": 400, "finance": 403, None: 401}


@pytest.mark.parametrize("role", list(READ))
def test_reading_a_pod_by_role(api, actors, role):
    submit(actors["member"], "p")
    assert api(role).get("/api/v1/pods/algorithm/p/").status_code == READ[role]
    listed = api(role).get("/api/v1/pods/")
    if role is None:
        assert listed.status_code == 401
    else:
        assert len(listed.json()) == (0 if role == "other_lead" else 1)


@pytest.mark.parametrize("role", list(DELETE))
def test_deleting_a_pod_by_role(api, actors, role):
    submit(actors["member"], "p")
    assert api(role).delete("/api/v1/pods/algorithm/p/").status_code == DELETE[role]
    assert Pod.objects.exists() == (DELETE[role] != 204)


@pytest.mark.parametrize("role", list(CREATE))
def test_submitting_a_pod_by_role(api, actors, role):
    response = api(role).post("/api/v1/pods/", dump_yaml(pod_document("p", namespace="ns")), content_type="application/yaml")
    assert response.status_code == CREATE[role], response.content


# --- fragmentation ---------------------------------------------------------------------------


@pytest.fixture
def fragmented(actors):
    """Two nodes each a quarter used: the repack frees one."""
    pool = pool_with_nodes(actors["lead"], node_labels={"pool": "train"}, schedulingPolicy="spread")
    for i in range(2):
        submit(actors["member"], f"f{i}", gpus=2, checkpointable=True)
    scheduler_pass(now=T0)
    assert set(Pod.objects.values_list("node__name", flat=True)) == {"train-pool-a-0", "train-pool-a-1"}
    return pool


def test_the_fragmentation_report_lists_underused_nodes_and_free_fragments(api, fragmented):
    data = api("member").get("/api/v1/pools/train-pool-a/fragmentation/").json()
    assert data["underusedNodes"] == ["train-pool-a-0", "train-pool-a-1"]
    assert (data["totalGpus"], data["allocatedGpus"], data["unallocatedPct"]) == (16, 4, 75.0)
    assert data["freeFragmentHistogram"]["1000"] == 12 and "plan" not in data


def test_the_plan_moves_one_pod_and_frees_a_node(api, fragmented):
    plan = api("member").get("/api/v1/pools/train-pool-a/fragmentation/?plan=1").json()["plan"]
    assert len(plan["moves"]) == 1 and len(plan["freedNodes"]) == 1
    assert plan["gpuHoursSavedPerWeek"] == 8 * 168


def test_a_lead_applies_the_plan_and_every_move_is_an_event(api, fragmented):
    response = api("lead").post("/api/v1/pools/train-pool-a/fragmentation/apply/", {"maxNodes": 1}, format="json")
    assert response.status_code == 200, response.content
    data = response.json()
    assert len(data["applied"]) == 1
    assert len(set(Pod.objects.values_list("node__name", flat=True))) == 1
    reasons = set(PoolEvent.objects.filter(pool=fragmented).values_list("reason", flat=True))
    assert {"Evicted", "Repacked", "NodeFreed"} <= reasons
    assert data["underusedNodes"] == data["plan"]["freedNodes"]  # the other node is now half full


APPLY = {"lead": 200, "admin": 200, "member": 403, "finance": 403, "other_lead": 404, None: 401}


@pytest.mark.parametrize("role", list(APPLY))
def test_fragmentation_by_role(api, fragmented, role):
    assert api(role).get("/api/v1/pools/train-pool-a/fragmentation/").status_code == READ[role]
    assert api(role).post("/api/v1/pools/train-pool-a/fragmentation/apply/", {}, format="json").status_code == APPLY[role]


def test_a_disruption_budget_out_of_range_is_400(api, fragmented):
    response = api("lead").post("/api/v1/pools/train-pool-a/fragmentation/apply/", {"maxNodes": 0}, format="json")
    assert response.status_code == 400 and "maxNodes" in fields(response)


def test_the_plan_shows_every_freeable_node_and_apply_goes_one_wave_at_a_time(api, actors):
    pool_with_nodes(actors["lead"], nodes=4, node_labels={"pool": "train"}, schedulingPolicy="spread")
    for i in range(4):
        submit(actors["member"], f"w{i}", gpus=1)
    scheduler_pass(now=T0)
    assert len(set(Pod.objects.values_list("node__name", flat=True))) == 4
    plan = api("lead").get("/api/v1/pools/train-pool-a/fragmentation/?plan=1").json()["plan"]
    assert len(plan["freedNodes"]) == 3 and plan["gpuHoursSavedPerWeek"] == 3 * 8 * 168
    first = api("lead").post("/api/v1/pools/train-pool-a/fragmentation/apply/", {"maxNodes": 1}, format="json").json()
    assert first["plan"]["freedNodes"] == plan["freedNodes"][:1] and len(first["applied"]) == 1
    assert len(set(Pod.objects.values_list("node__name", flat=True))) == 3
    api("lead").post("/api/v1/pools/train-pool-a/fragmentation/apply/", {"maxNodes": 2}, format="json")
    assert len(set(Pod.objects.values_list("node__name", flat=True))) == 1


CLUSTER_READ = {"admin": 200, "finance": 200, "lead": 403, "member": 403, "other_lead": 403, None: 401}
CLUSTER_APPLY = {"admin": 200, "finance": 403, "lead": 403, "member": 403, "other_lead": 403, None: 401}


@pytest.mark.parametrize("role", list(CLUSTER_READ))
def test_the_cluster_report_is_for_admins_and_finance_and_only_admins_apply(api, fragmented, role):
    response = api(role).get("/api/v1/fragmentation/?plan=1")
    assert response.status_code == CLUSTER_READ[role]
    if response.status_code == 200:
        assert response.json()["scope"] == "cluster" and len(response.json()["plan"]["freedNodes"]) == 1
    assert api(role).post("/api/v1/fragmentation/apply/", {"maxNodes": 1}, format="json").status_code == CLUSTER_APPLY[role]


def test_the_plan_lists_nodes_that_run_no_pods_as_free_already(api, actors):
    """Issue 22 item 2: an idle node belongs to the plan (free without a move)."""
    pool_with_nodes(actors["lead"], nodes=3, node_labels={"pool": "train"}, schedulingPolicy="binpack")
    submit(actors["member"], "only", gpus=1)
    scheduler_pass(now=T0)
    busy = set(Pod.objects.values_list("node__name", flat=True))
    plan = api("lead").get("/api/v1/pools/train-pool-a/fragmentation/?plan=1").json()["plan"]
    assert plan["moves"] == [] and plan["freedNodes"] == []
    assert plan["emptyNodes"] == sorted({"train-pool-a-0", "train-pool-a-1", "train-pool-a-2"} - busy)


@pytest.mark.parametrize("phase", ["Nope", "running", "Running ", "Pending,Running"])
def test_an_unknown_phase_filter_is_a_400_naming_phase_and_the_phases(api, actors, phase):
    """It was a 200 with no pods, as if none were in that phase; /pools/?phase= and
    /orders/?status= already said which values there are."""
    response = api("member").get("/api/v1/pods/", {"phase": phase})
    assert response.status_code == 400, response.content
    (error,) = response.json()["errors"]
    assert error["field"] == "phase" and all(p in error["message"] for p in Pod.Phase.values), error
    assert api("member").get("/api/v1/pods/", {"phase": "Running"}).status_code == 200
