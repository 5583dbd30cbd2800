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
    body = preemption(cluster_pod("owners-vip", gpus=4), ["train-pool-a-1", "cpu-node-7"])
    response = scheduler.post(PREEMPT, body, format="json")
    assert response.json() == {"NodeNameToMetaVictims": {"train-pool-a-1": VICTIMS}}  # a team's GPU pod: no plain node


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
        ({"Pod": cluster_pod("p"), "NodeNameToVictims": {"train-pool-a-0": {"Pods": [{}]}}}, "NodeNameToVictims.train-pool-a-0.Pods"),
        ({"Pod": bad_pod, "NodeNameToMetaVictims": {}}, "Pod"),
    ):
        response = scheduler.post(PREEMPT, body, format="json")
        assert response.status_code == 400, (body, response.content)
        assert response.json()["errors"][0]["field"] == field, response.json()


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
