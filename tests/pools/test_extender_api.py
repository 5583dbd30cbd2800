"""The scheduler extender's HTTP side on the simulated cluster's database (seed D1, O3; issue 19
items 3 and 5): only kube-scheduler's credential is let in, the answers follow the protocol, bad
input is a 4xx (or the protocol's `Error`) and never a 500, and the node prioritize puts on top
is the one the simulated scheduler pass binds the same pod to."""

from __future__ import annotations

import base64
import copy
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from pools.controllers.scheduler import scheduler_pass
from pools.core.scheduling.extender import MAX_EXTENDER_PRIORITY, REASON_UNMANAGED
from pools.core.scheduling.nodes import REASON_AFFINITY, REASON_GPU, REASON_TEAM
from pools.core.spec import DEFAULT_SCHEDULING_POLICY
from pools.models import Node
from pools.models.pods import Pod
from pools.services import pods as pod_services
from tests.corpus import db_state
from tests.pools.pod_helpers import T0, pod_document, pool_with_nodes, submit

SECRET = "s3cret-of-the-scheduler"
FILTER, PRIORITIZE, PREEMPT = "/api/scheduler/v1/filter", "/api/scheduler/v1/prioritize", "/api/scheduler/v1/preempt"


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture
def scheduler(settings) -> APIClient:
    settings.EBCLOUD_SCHEDULER_EXTENDER_TOKEN = SECRET
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=basic("kube-scheduler", SECRET))
    return client


@pytest.fixture
def pool(actors):
    """Two 8-GPU nodes of team algorithm's pool; node 1 already runs a 6-GPU pod."""
    pool = pool_with_nodes(actors["lead"], nodes=2, node_labels={"pool": "train"}, schedulingPolicy="bestfit")
    submit(actors["member"], "big", gpus=6)
    Pod.objects.filter(name="big").update(phase=Pod.Phase.RUNNING, node=Node.objects.get(name="train-pool-a-1"))
    return pool


def cluster_pod(name: str, **kwargs) -> dict:
    """A pod as kube-scheduler sends it: the API's JSON, with a uid."""
    document = copy.deepcopy(pod_document(name, **kwargs))
    document["metadata"]["uid"] = str(uuid.uuid4())
    return document


def args(pod: dict, names: list[str]) -> dict:
    return {"Pod": pod, "Nodes": None, "NodeNames": names}


# --- who may call ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", [FILTER, PRIORITIZE, PREEMPT])
def test_only_kube_schedulers_credential_is_let_in(db, settings, actors, path):
    settings.EBCLOUD_SCHEDULER_EXTENDER_TOKEN = SECRET
    body = args(cluster_pod("p"), [])
    user = APIClient()
    user.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=actors['admin']).key}")
    session = APIClient()
    session.force_login(actors["admin"])
    attempts = {
        "nobody": APIClient(),
        "an admin's API token": user,
        "an admin's session": session,
        "a wrong secret": _client(basic("kube-scheduler", SECRET + "x")),
        "another user name": _client(basic("admin", SECRET)),
        "not base64": _client("Basic !!!"),
        "a bearer token": _client(f"Bearer {SECRET}"),
    }
    for who, client in attempts.items():
        response = client.post(path, body, format="json")
        assert response.status_code == 401, (who, response.content)
        assert response["WWW-Authenticate"].startswith("Basic"), who
        assert "only kube-scheduler" in response.json()["errors"][0]["message"], who


def test_without_a_configured_secret_nobody_is_let_in(db, settings):
    settings.EBCLOUD_SCHEDULER_EXTENDER_TOKEN = ""
    response = _client(basic("kube-scheduler", "")).post(FILTER, args(cluster_pod("p"), []), format="json")
    assert response.status_code == 401


def test_the_scheduler_may_only_post(db, scheduler):
    assert scheduler.get(FILTER).status_code == 405
    assert scheduler.post(FILTER + "/", args(cluster_pod("p"), []), format="json").status_code == 200


def _client(header: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    return client


# --- the protocol ----------------------------------------------------------------------------


def test_filter_passes_the_fitting_nodes_and_names_the_reasons_of_the_others(scheduler, pool):
    response = scheduler.post(FILTER, args(cluster_pod("p", gpus=4), ["train-pool-a-1", "train-pool-a-0", "cpu-node-7"]), format="json")
    assert response.status_code == 200, response.content
    assert response.json() == {
        "NodeNames": ["train-pool-a-0"],
        "FailedNodes": {"train-pool-a-1": REASON_GPU},  # evicting pods could make room there
        "FailedAndUnresolvableNodes": {"cpu-node-7": REASON_UNMANAGED},  # nothing evicted could
        "Error": "",
    }
    elsewhere = scheduler.post(FILTER, args(cluster_pod("q", pool_affinity="infer"), ["train-pool-a-0"]), format="json").json()
    assert elsewhere["FailedAndUnresolvableNodes"] == {"train-pool-a-0": REASON_AFFINITY} and elsewhere["FailedNodes"] == {}
    too_big = scheduler.post(FILTER, args(cluster_pod("r", gpus=9), ["train-pool-a-0"]), format="json").json()
    assert too_big["FailedAndUnresolvableNodes"] == {"train-pool-a-0": REASON_GPU}  # more GPUs than the node has


def test_another_teams_pod_is_refused_on_the_pool_and_lent_pools_take_it(scheduler, pool, actors):
    """Team isolation (issue 19 item 1) holds in the extender: it filters with the core's rule.
    A pod of team inference's namespace may not use team algorithm's pool until it is lent."""
    foreign = cluster_pod("theirs", namespace="inference")
    refused = scheduler.post(FILTER, args(foreign, ["train-pool-a-0"]), format="json").json()
    assert refused["FailedAndUnresolvableNodes"] == {"train-pool-a-0": REASON_TEAM} and refused["FailedNodes"] == {}
    pool.document["spec"]["sharedWith"] = ["inference"]
    pool.save(update_fields=["document"])
    assert scheduler.post(FILTER, args(foreign, ["train-pool-a-0"]), format="json").json()["NodeNames"] == ["train-pool-a-0"]


def test_filter_answers_whole_nodes_when_kube_scheduler_sends_them(scheduler, pool):
    items = [{"metadata": {"name": name}, "status": {}} for name in ("train-pool-a-0", "train-pool-a-1")]
    response = scheduler.post(FILTER, {"Pod": cluster_pod("p", gpus=4), "Nodes": {"items": items}, "NodeNames": None}, format="json")
    assert response.json()["Nodes"] == {"items": [items[0]]}


def test_prioritize_puts_on_top_the_node_the_simulated_scheduler_binds(scheduler, pool, actors):
    """bestfit: the node that already runs 6 GPUs is the tighter fit for 2 more."""
    pod = cluster_pod("fits-both", gpus=2)
    response = scheduler.post(PRIORITIZE, args(pod, ["train-pool-a-0", "train-pool-a-1"]), format="json")
    assert response.status_code == 200, response.content
    scores = {entry["Host"]: entry["Score"] for entry in response.json()}
    assert set(scores) == {"train-pool-a-0", "train-pool-a-1"} and all(0 <= s <= MAX_EXTENDER_PRIORITY for s in scores.values())
    pod_services.pod_create(user=actors["member"], document=pod, now=T0)
    scheduler_pass(now=T0)
    bound = Pod.objects.get(name="fits-both").node.name
    assert bound == "train-pool-a-1" and scores[bound] == MAX_EXTENDER_PRIORITY > scores["train-pool-a-0"]


def test_a_pool_is_scored_with_the_policy_the_simulated_scheduler_gives_it(actors):
    """Its `schedulingPolicy`, else the product's default (an FGD variant), on both clusters."""
    pool = pool_with_nodes(actors["lead"], nodes=1)
    assert pool.scheduling_policy == DEFAULT_SCHEDULING_POLICY == "fgd-cpu"
    pool.document["spec"]["schedulingPolicy"] = "spread"
    assert pool.scheduling_policy == "spread"


# --- bad input -------------------------------------------------------------------------------


def test_a_body_that_is_not_extender_args_is_a_400_with_the_field(scheduler, pool):
    for path in (FILTER, PRIORITIZE):
        malformed = scheduler.post(path, b'{"Pod": ', content_type="application/json")
        assert malformed.status_code == 400 and "JSON parse error" in malformed.json()["errors"][0]["message"]
        for body, field in (
            ([1, 2], ""),
            ({"NodeNames": []}, "Pod"),
            ({"Pod": cluster_pod("p"), "NodeNames": "train-pool-a-0"}, "NodeNames"),
            ({"Pod": cluster_pod("p"), "NodeNames": ["train-pool-a-0", 7]}, "NodeNames[1]"),
            ({"Pod": cluster_pod("p"), "Nodes": {"items": [{"metadata": {}}]}}, "Nodes.items[0]"),
            ({"Pod": cluster_pod("p")}, "NodeNames"),
        ):
            response = scheduler.post(path, body, format="json")
            assert response.status_code == 400, (path, body, response.content)
            assert response.json()["errors"][0]["field"] == field, (path, response.json())


def test_a_pod_that_cannot_be_read_is_the_filters_error_and_a_400_from_prioritize(scheduler, pool):
    bad = cluster_pod("p")
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    nameless = cluster_pod("q")
    del nameless["metadata"]["name"]
    endless = cluster_pod("r", cpu="1e999999", memory="Infinity")
    for pod in (bad, nameless, endless):
        response = scheduler.post(FILTER, args(pod, ["train-pool-a-0"]), format="json")
        assert response.status_code == 200 and response.json()["Error"].startswith("Pod: "), response.content
        assert response.json()["NodeNames"] is None
        response = scheduler.post(PRIORITIZE, args(pod, ["train-pool-a-0"]), format="json")
        assert response.status_code == 400 and response.json()["errors"][0]["field"] == "Pod", response.content


@pytest.mark.parametrize(
    ("key", "operator", "values"),
    [(["a", 1], "In", ["x"]), ({}, "Exists", []), ("pool", "In", [["train"]]), ("gen", "Gt", [{"a": 1}]), ("pool", None, ["train"]), (None, "In", ["x"])],
)
def test_a_node_affinity_of_other_json_types_is_the_filters_error_and_a_400_from_prioritize(scheduler, pool, key, operator, values):
    """kube-scheduler sends what the API server stored, and no such pod passes its validation,
    but the extender may not answer a 500 (a list as the requirement's key was one, at filter
    and preempt alike): the pod cannot be read, and says so."""
    pod = cluster_pod("p")
    term = {"matchExpressions": [{"key": key, "operator": operator, "values": values}]}
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    response = scheduler.post(FILTER, args(pod, ["train-pool-a-0"]), format="json")
    assert response.status_code == 200 and response.json()["Error"].startswith("Pod: not a readable Pod"), response.content
    for path in (PRIORITIZE, PREEMPT):
        response = scheduler.post(path, {**args(pod, ["train-pool-a-0"]), "NodeNameToMetaVictims": {}}, format="json")
        assert response.status_code == 400 and response.json()["errors"][0]["field"] == "Pod", response.content


def test_prioritize_refuses_a_node_it_does_not_know(scheduler, pool):
    response = scheduler.post(PRIORITIZE, args(cluster_pod("p"), ["train-pool-a-0", "ghost"]), format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == [{"field": "NodeNames[1]", "message": "no live node 'ghost' in any pool"}]


# Each value of ExtenderArgs of a JSON type its Go struct does not have
# (k8s.io/kube-scheduler/extender/v1 ExtenderArgs: Pod *v1.Pod, Nodes *v1.NodeList, NodeNames
# *[]string). A Node's metadata that is no object was a 500; a Pod's name, namespace or UID
# that is no string, and a priority that is no int32, were taken and placed (`true` as 1).
WRONG = {"int": 5, "float": 1.5, "true": True, "string": "lots", "list": ["x"], "object": {"a": 1}, "null": None}


def _with(path: str, value) -> dict:
    pod = cluster_pod("p")
    *parents, key = path.split(".")
    target = pod
    for parent in parents:
        target = target[parent]
    target[key] = value
    return pod


def _extender_args(kind: str, value) -> dict:
    """place -> (body, the field refused) with `value` in one place of ExtenderArgs."""
    nodes = lambda items: {"Pod": cluster_pod("p"), "Nodes": items, "NodeNames": None}  # noqa: E731
    return {
        "node-names": ({"Pod": cluster_pod("p"), "NodeNames": value}, "NodeNames"),
        "node-name": ({"Pod": cluster_pod("p"), "NodeNames": [value]}, "NodeNames[0]"),
        "nodes": (nodes(value), "Nodes"),
        "nodes-items": (nodes({"items": value}), "Nodes.items"),
        "node": (nodes({"items": [value]}), "Nodes.items[0]"),
        "node-metadata": (nodes({"items": [{"metadata": value}]}), "Nodes.items[0]"),
        "node-metadata-name": (nodes({"items": [{"metadata": {"name": value}}]}), "Nodes.items[0]"),
        **{f"pod-{key}": ({"Pod": _with(f"metadata.{key}", value), "NodeNames": ["train-pool-a-0"]}, f"Pod.metadata.{key}")
           for key in ("name", "namespace", "uid")},
        "pod-priority": ({"Pod": _with("spec.priority", value), "NodeNames": ["train-pool-a-0"]}, "Pod.spec.priority"),
        "pod-preemption-policy": ({"Pod": _with("spec.preemptionPolicy", value), "NodeNames": ["train-pool-a-0"]}, "Pod.spec.preemptionPolicy"),
    }  # fmt: skip


FINE = {("node-name", "string"), ("node-metadata-name", "string"), ("pod-name", "string"), ("pod-namespace", "string"),
        ("pod-uid", "string"), ("pod-priority", "int"), ("pod-preemption-policy", "string"),
        ("node-names", "list"), ("node-names", "null"), ("pod-priority", "null"), ("pod-preemption-policy", "null")}  # fmt: skip  (null: absent)
FIELD = {("nodes", "null"): "NodeNames", ("nodes", "object"): "Nodes.items", ("nodes-items", "list"): "Nodes.items[0]"}
ARGS_TYPES = [(place, kind) for place in _extender_args("x", 0) for kind in WRONG if (place, kind) not in FINE]


@pytest.mark.parametrize(("place", "kind"), ARGS_TYPES, ids=[f"{p}-{k}" for p, k in ARGS_TYPES])
def test_a_value_of_another_json_type_is_refused_on_its_field(scheduler, pool, place, kind):
    """prioritize: a 400 naming it; filter: the same, or for the Pod the protocol's `Error`."""
    body, field = _extender_args(kind, WRONG[kind])[place]
    field = FIELD.get((place, kind), field)
    before = db_state()
    for path in (FILTER, PRIORITIZE):
        response = scheduler.post(path, body, format="json")
        if path == FILTER and field.startswith("Pod."):
            assert response.status_code == 200 and response.json()["Error"].startswith(f"{field}: "), response.content[:300]
            assert response.json()["NodeNames"] is None
            continue
        assert response.status_code == 400, (path, response.content[:300])
        assert [e["field"] for e in response.json()["errors"]] == [field], (path, response.json())
    assert db_state() == before


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
POD_PARTS = st.fixed_dictionaries({}, optional={
    "metadata": st.dictionaries(st.sampled_from(["name", "namespace", "uid", "annotations", "labels"]), JSON, max_size=5),
    "spec": st.dictionaries(st.sampled_from(["containers", "tolerations", "nodeSelector", "affinity", "priority", "overhead"]), JSON, max_size=6),
})  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(pod=POD_PARTS | JSON, names=JSON)
def test_no_body_makes_the_extender_fail(scheduler, pool, pod, names):
    """Whatever kube-scheduler (or anyone holding its secret) sends: an answer or a 4xx, never a 500."""
    for path in (FILTER, PRIORITIZE):
        response = scheduler.post(path, {"Pod": pod, "NodeNames": names}, format="json")
        assert response.status_code in (200, 400), (path, response.status_code, response.content[:300])
