"""The scheduler extender's `preempt` verb and its team rule for every pod (seed D1; team
isolation): kube-scheduler sends every pod, CPU-only ones too, so a pool's nodes refuse another
team's pods whatever they ask, pods of namespaces no team owns run everywhere, and preemption
never evicts a team's pods for a pod that may not run on their node."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pools.core.scheduling.extender import MAX_EXTENDER_PRIORITY, REASON_UNMANAGED
from pools.core.scheduling.nodes import REASON_TEAM
from pools.models import Team
from pools.models.pods import Pod
from tests.corpus import db_state
from tests.pools import test_extender_api
from tests.pools.test_extender_api import FILTER, PRIORITIZE, args, cluster_pod

# kube-scheduler's client, and team algorithm's pool of two 8-GPU nodes, one running a 6-GPU pod.
scheduler, pool = test_extender_api.scheduler, test_extender_api.pool

PREEMPT = "/api/scheduler/v1/preempt"
VICTIMS = {"Pods": [{"UID": "uid-of-big"}], "NumPDBViolations": 1}


def preemption(pod: dict, nodes: list[str]) -> dict:
    """What kube-scheduler posts with nodeCacheCapable: the victims it chose on each candidate."""
    return {"Pod": pod, "NodeNameToVictims": None, "NodeNameToMetaVictims": {name: VICTIMS for name in nodes}}


def cpu_pod(name: str, namespace: str = "algorithm") -> dict:
    return cluster_pod(name, namespace=namespace, gpus=0, cpu="2", memory="4Gi")


# --- preempt ---------------------------------------------------------------------------------


def test_preempt_drops_the_candidates_of_a_pool_the_pods_team_may_not_use(scheduler, pool):
    """team inference's pod may not use team algorithm's pool: no victim there is evicted for it."""
    response = scheduler.post(PREEMPT, preemption(cluster_pod("intruder", namespace="inference"), ["train-pool-a-1", "train-pool-a-0"]), format="json")
    assert response.status_code == 200, response.content
    assert response.json() == {"NodeNameToMetaVictims": {}}


def test_preempt_keeps_the_owners_candidates_with_their_victims_as_given(scheduler, pool):
    Pod.objects.filter(name="big").update(uid="uid-of-big")
    body = preemption(cluster_pod("owners-vip", gpus=4), ["train-pool-a-1", "cpu-node-7"])
    response = scheduler.post(PREEMPT, body, format="json")
    assert response.json() == {"NodeNameToMetaVictims": {"train-pool-a-1": VICTIMS}}  # a team's GPU pod: no plain node


def test_preempt_drops_a_candidate_whose_victims_free_nothing_the_pod_lacks(scheduler, pool):
    """`big` holds the GPUs the pod lacks; a victim the read model does not know yet frees
    nothing there in its view, so evicting it would not let the pod run."""
    body = preemption(cluster_pod("owners-vip", gpus=4), ["train-pool-a-1"])
    body["NodeNameToMetaVictims"]["train-pool-a-1"] = {"Pods": [{"UID": "not-mirrored-yet"}], "NumPDBViolations": 0}
    assert scheduler.post(PREEMPT, body, format="json").json() == {"NodeNameToMetaVictims": {}}


def test_a_guest_of_a_lent_pool_never_preempts_the_owners_pods(scheduler, pool):
    """A team a pool is lent to runs on its free capacity: kube-scheduler would evict the
    owner's pod `big` (mirrored, team algorithm) for inference's pod of a higher priority."""
    pool.document["spec"]["sharedWith"] = ["inference"]
    pool.save(update_fields=["document"])
    Pod.objects.filter(name="big").update(uid="uid-of-big")
    guest = cluster_pod("guest", namespace="inference")
    response = scheduler.post(PREEMPT, preemption(guest, ["train-pool-a-1"]), format="json")
    assert response.json() == {"NodeNameToMetaVictims": {}}
    unknown = {"Pod": guest, "NodeNameToMetaVictims": {"train-pool-a-1": {"Pods": [{"UID": "not-mirrored-yet"}], "NumPDBViolations": 0}}}
    assert scheduler.post(PREEMPT, unknown, format="json").json() == {"NodeNameToMetaVictims": {}}  # might be the owner's
    Pod.objects.filter(name="big").update(team=Team.objects.get(slug="inference"))  # a guest's own pod may go
    assert scheduler.post(PREEMPT, preemption(guest, ["train-pool-a-1"]), format="json").json() == {"NodeNameToMetaVictims": {"train-pool-a-1": VICTIMS}}
    Pod.objects.filter(name="big").update(team=Team.objects.get(slug="algorithm"))
    owners = scheduler.post(PREEMPT, preemption(cluster_pod("owners-vip", gpus=4), ["train-pool-a-1"]), format="json")
    assert owners.json() == {"NodeNameToMetaVictims": {"train-pool-a-1": VICTIMS}}


def test_preempt_answers_whole_victim_pods_as_their_uids(scheduler, pool):
    """Without nodeCacheCapable kube-scheduler sends the victims' Pods; it always reads MetaVictims back."""
    victim = cluster_pod("big")
    Pod.objects.filter(name="big").update(uid=victim["metadata"]["uid"])
    body = {"Pod": cluster_pod("owners-vip", gpus=4), "NodeNameToVictims": {"train-pool-a-1": {"Pods": [victim], "NumPDBViolations": 0}}}
    response = scheduler.post(PREEMPT, body, format="json")
    assert response.json() == {"NodeNameToMetaVictims": {"train-pool-a-1": {"Pods": [{"UID": victim["metadata"]["uid"]}], "NumPDBViolations": 0}}}


def test_preempt_refuses_what_is_not_extender_preemption_args(scheduler, pool):
    bad_pod = cluster_pod("p")
    bad_pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    for body, field in (
        ([1], ""),
        ({"NodeNameToMetaVictims": {}}, "Pod"),
        ({"Pod": cluster_pod("p")}, "NodeNameToMetaVictims"),
        ({"Pod": cluster_pod("p"), "NodeNameToMetaVictims": ["train-pool-a-0"]}, "NodeNameToMetaVictims"),
        ({"Pod": cluster_pod("p"), "NodeNameToMetaVictims": {"train-pool-a-0": 3}}, "NodeNameToMetaVictims.train-pool-a-0"),
        ({"Pod": cluster_pod("p"), "NodeNameToVictims": {"train-pool-a-0": {"Pods": [{}]}}}, "NodeNameToVictims.train-pool-a-0.Pods[0]"),
        ({"Pod": bad_pod, "NodeNameToMetaVictims": {}}, "Pod"),
    ):
        response = scheduler.post(PREEMPT, body, format="json")
        assert response.status_code == 400, (body, response.content)
        assert response.json()["errors"][0]["field"] == field, response.json()


# Each value of ExtenderPreemptionArgs of a JSON type its Go struct does not have
# (k8s.io/kube-scheduler/extender/v1: MetaPod.UID string, MetaVictims.NumPDBViolations int64;
# a whole victim Pod's metadata.uid string). A list or an object as a UID was a 500
# (`unhashable type: 'list'`); other types, and any NumPDBViolations, were echoed back to
# kube-scheduler, which could not decode them.
WRONG = {"int": 5, "float": 1.5, "true": True, "string": "lots", "list": ["x"], "object": {"a": 1}, "null": None}
META, WHOLE = "NodeNameToMetaVictims.train-pool-a-1", "NodeNameToVictims.train-pool-a-1"


def _victims(kind: str, value) -> dict:
    """kind -> (body, the field refused) with `value` in one place of the preemption args."""
    meta = lambda entry: {"Pod": cluster_pod("p"), "NodeNameToMetaVictims": {"train-pool-a-1": entry}}  # noqa: E731
    whole = lambda entry: {"Pod": cluster_pod("p"), "NodeNameToVictims": {"train-pool-a-1": entry}}  # noqa: E731
    victim = cluster_pod("big")
    return {
        "meta-uid": (meta({"Pods": [{"UID": value}], "NumPDBViolations": 0}), f"{META}.Pods[0].UID"),
        "meta-pod": (meta({"Pods": [value], "NumPDBViolations": 0}), f"{META}.Pods[0]"),
        "meta-pods": (meta({"Pods": value}), f"{META}.Pods"),
        "meta-violations": (meta({"Pods": [{"UID": "u"}], "NumPDBViolations": value}), f"{META}.NumPDBViolations"),
        "whole-uid": (whole({"Pods": [{**victim, "metadata": {**victim["metadata"], "uid": value}}]}), f"{WHOLE}.Pods[0].metadata.uid"),
        "whole-metadata": (whole({"Pods": [{**victim, "metadata": value}]}), f"{WHOLE}.Pods[0]"),
        "whole-pod": (whole({"Pods": [value]}), f"{WHOLE}.Pods[0]"),
        "whole-violations": (whole({"Pods": [victim], "NumPDBViolations": value}), f"{WHOLE}.NumPDBViolations"),
    }


ALLOWED = {("meta-violations", "int"), ("whole-violations", "int"), ("meta-uid", "string"), ("whole-uid", "string"),
           ("meta-violations", "null"), ("whole-violations", "null")}  # fmt: skip  (Go leaves an int64 at 0 for null)
# Where the refusal lands one level deeper: an object is a MetaPod (or metadata) without a UID,
# a list of one string is a list of victims whose first is no MetaPod.
DEEPER = {("meta-pod", "object"): ".UID", ("whole-metadata", "object"): ".metadata.uid", ("meta-pods", "list"): "[0]"}
PREEMPT_TYPES = [(place, kind) for place in _victims("x", 0) for kind in WRONG if (place, kind) not in ALLOWED]


@pytest.mark.parametrize(("place", "kind"), PREEMPT_TYPES, ids=[f"{p}-{k}" for p, k in PREEMPT_TYPES])
def test_preempt_refuses_a_value_of_another_json_type_on_its_field(scheduler, pool, place, kind):
    body, field = _victims(kind, WRONG[kind])[place]
    field += DEEPER.get((place, kind), "")
    before = db_state()
    response = scheduler.post(PREEMPT, body, format="json")
    assert response.status_code == 400, response.content[:300]
    assert [e["field"] for e in response.json()["errors"]] == [field], response.json()
    assert db_state() == before


def test_preempt_refuses_the_reviewers_list_and_object_uids(scheduler, pool):
    for uid in (["x"], {"a": 1}):
        response = scheduler.post(PREEMPT, {"Pod": cluster_pod("p"), "NodeNameToMetaVictims": {"train-pool-a-1": {"Pods": [{"UID": uid}]}}}, format="json")
        assert response.status_code == 400 and response.json()["errors"] == [
            {"field": f"{META}.Pods[0].UID", "message": "required: the victim pod's UID, a string"}]
    lots = {"Pod": cluster_pod("p"), "NodeNameToMetaVictims": {"train-pool-a-1": {"Pods": [{"UID": "u"}], "NumPDBViolations": "lots"}}}
    response = scheduler.post(PREEMPT, lots, format="json")
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == f"{META}.NumPDBViolations"


def test_preempt_reads_victims_as_go_does_whatever_the_case_of_their_keys(scheduler, pool):
    """Go's decoder matches a field's key in any case: the victim's UID is read (a guest's own
    pod may go), and the answer is in the protocol's spelling."""
    pool.document["spec"]["sharedWith"] = ["inference"]
    pool.save(update_fields=["document"])
    Pod.objects.filter(name="big").update(uid="uid-of-big", team=Team.objects.get(slug="inference"))
    body = {"Pod": cluster_pod("guest", namespace="inference"), "NodeNameToMetaVictims": {"train-pool-a-1": {"pods": [{"uid": "uid-of-big"}], "numPDBViolations": 1}}}
    assert scheduler.post(PREEMPT, body, format="json").json() == {"NodeNameToMetaVictims": {"train-pool-a-1": VICTIMS}}


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(victims=st.recursive(st.none() | st.integers() | st.text(max_size=8),
                            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=12))  # fmt: skip
def test_no_preemption_body_makes_the_extender_fail(scheduler, pool, victims):
    for key in ("NodeNameToMetaVictims", "NodeNameToVictims"):
        response = scheduler.post(PREEMPT, {"Pod": cluster_pod("p"), key: victims}, format="json")
        assert response.status_code in (200, 400), (response.status_code, response.content[:300])


# --- every pod, CPU-only ones too ------------------------------------------------------------


def test_another_teams_cpu_only_pod_is_refused_on_the_pool_for_good(scheduler, pool):
    response = scheduler.post(FILTER, args(cpu_pod("theirs", namespace="inference"), ["train-pool-a-0", "cpu-node-7"]), format="json").json()
    assert response["NodeNames"] == ["cpu-node-7"]  # a node outside the pools is not the product's to refuse
    assert response["FailedAndUnresolvableNodes"] == {"train-pool-a-0": REASON_TEAM} and response["FailedNodes"] == {}


def test_a_pod_of_no_teams_namespace_runs_on_every_node(scheduler, pool):
    """kube-system (the device plugin's DaemonSet, ...): not a team's pods, asking GPUs or not."""
    for document in (cpu_pod("coredns", namespace="kube-system"), cluster_pod("validator", namespace="kube-system", gpus=1)):
        response = scheduler.post(FILTER, args(document, ["train-pool-a-0", "train-pool-a-1", "cpu-node-7"]), format="json").json()
        assert response["NodeNames"] == ["train-pool-a-0", "train-pool-a-1", "cpu-node-7"], response


def test_a_cpu_only_pod_prefers_a_node_outside_the_pools_and_a_teams_gpu_pod_cannot_be_scored_there(scheduler, pool):
    response = scheduler.post(PRIORITIZE, args(cpu_pod("prep"), ["train-pool-a-0", "train-pool-a-1", "cpu-node-7"]), format="json")
    scores = {entry["Host"]: entry["Score"] for entry in response.json()}
    assert scores["cpu-node-7"] == MAX_EXTENDER_PRIORITY > max(scores["train-pool-a-0"], scores["train-pool-a-1"]), scores
    gpu = scheduler.post(PRIORITIZE, args(cluster_pod("gpu"), ["train-pool-a-0", "cpu-node-7"]), format="json")
    assert gpu.status_code == 400 and gpu.json()["errors"][0]["field"] == "NodeNames[1]"


# --- a namespace's team on a real cluster: its label ---------------------------------------------


class Namespaces:
    """The cluster's namespaces' `ebcloud.io/team` labels, as ClusterPods reads them."""

    def __init__(self, labels: dict[str, str], broken: frozenset[str] = frozenset()):
        self.labels, self.broken, self.reads = labels, broken, []

    def __call__(self):
        return self

    def namespace_team(self, name: str, *, timeout: float | None = None) -> str:
        assert timeout is not None  # kube-scheduler waits for the extender's answer
        self.reads.append(name)
        if name in self.broken:
            raise ConnectionError("the API server is away")
        return self.labels.get(name, "")


@pytest.fixture
def namespaces(monkeypatch, settings):
    settings.EBCLOUD_CLUSTER_BACKEND = "kubernetes"
    cluster = Namespaces({"inference-prod": "inference", "ghost-team": "nobody-has-this-slug"}, broken=frozenset({"unreadable"}))
    monkeypatch.setattr("pools.selectors.extender.ClusterPods", cluster)
    return cluster


def test_a_pod_the_mirror_has_not_recorded_is_placed_by_its_namespaces_label(scheduler, pool, namespaces):
    def verdict(namespace: str) -> dict:
        body = args(cpu_pod(f"p-{namespace}", namespace=namespace), ["train-pool-a-0"])
        return scheduler.post(FILTER, body, format="json").json()

    assert verdict("inference-prod")["FailedAndUnresolvableNodes"] == {"train-pool-a-0": REASON_TEAM}
    assert verdict("monitoring")["NodeNames"] == ["train-pool-a-0"]  # no label: no team's
    assert verdict("ghost-team")["FailedAndUnresolvableNodes"] == {"train-pool-a-0": REASON_TEAM}  # a team the product lacks
    assert verdict("unreadable")["FailedAndUnresolvableNodes"] == {"train-pool-a-0": REASON_TEAM}  # unknown: fail closed
    assert verdict("algorithm")["NodeNames"] == ["train-pool-a-0"]  # named like its team: no read
    assert verdict("inference-prod")["FailedAndUnresolvableNodes"] == {"train-pool-a-0": REASON_TEAM}
    assert verdict("unreadable")["FailedAndUnresolvableNodes"] == {"train-pool-a-0": REASON_TEAM}
    assert sorted(namespaces.reads) == ["ghost-team", "inference-prod", "monitoring", "unreadable"]  # each read once


def test_a_teams_gpu_pod_is_refused_outside_the_pools_with_its_reason(scheduler, pool):
    response = scheduler.post(FILTER, args(cluster_pod("g"), ["cpu-node-7"]), format="json").json()
    assert response["FailedAndUnresolvableNodes"] == {"cpu-node-7": REASON_UNMANAGED}
