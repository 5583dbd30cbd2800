"""The repack plan's second part on the database, the API and the page: GPU shares packed into
fewer GPUs so that a whole GPU comes free (issue 22 item 2; seeds C3 repack, P3)."""

from __future__ import annotations

import pytest

from pools.controllers.scheduler import scheduler_pass
from pools.models import PoolEvent
from pools.models.pods import Pod
from pools.providers.simulated import EVICT, failure_inject
from pools.services import pods as pod_services
from tests.pools.pod_helpers import SHARE_LAYOUT as LAYOUT
from tests.pools.pod_helpers import (
    T0,
    pod_document,
    pool_with_nodes,
    pool_with_share_layout,
    submit,
)

URL = "/api/v1/pools/train-pool-a/fragmentation/"


@pytest.fixture
def shared(actors):
    return pool_with_share_layout(actors)


def gpus_of(name):
    return Pod.objects.get(name=name).gpu_indices


def test_the_plan_lists_the_share_moves_and_the_gpus_they_free(api, shared):
    plan = api("member").get(f"{URL}?plan=1").json()["plan"]
    assert plan["freedNodes"] == [] and plan["moves"] == []
    assert plan["shareGpusFreed"] == 1
    moved = {m["pod"] for m in plan["shareMoves"]}
    assert moved and moved <= {f"algorithm/{n}" for on in LAYOUT.values() for n, _ in on}
    assert all(m["from"] == m["to"] == "train-pool-a-0" for m in plan["shareMoves"])


def test_a_lead_applies_the_share_moves_and_the_waiting_pod_gets_the_freed_gpu(api, shared):
    response = api("lead").post(f"{URL}apply/", {"shares": True}, format="json")
    assert response.status_code == 200, response.content
    applied = response.json()["applied"]
    assert applied and len(applied) == PoolEvent.objects.filter(pool=shared, reason="Repacked").count()
    evicted = PoolEvent.objects.filter(pool=shared, reason="Evicted").values_list("message", flat=True)
    assert all("to pack GPU shares into fewer GPUs" in m for m in evicted) and len(evicted) == len(applied)
    used = {}
    for on in LAYOUT.values():
        for name, milli in on:
            (gpu,) = gpus_of(name)
            used[gpu] = used.get(gpu, 0) + milli
    assert sorted(used.values()) == [1000, 1000]  # the shares now fill two GPUs exactly
    scheduler_pass(now=T0)
    waiting = Pod.objects.get(name="waiting")
    assert waiting.phase == Pod.Phase.RUNNING and set(waiting.gpu_indices) <= {0, 1, 2} - set(used)


# 500+100 | 500+100 fill no fewer GPUs, and a waiting 800 fits neither; 500+500 | 100+100+800 holds all.
ROOM_LAYOUT = {0: [("a1", 500), ("a2", 100)], 1: [("b1", 500), ("b2", 100)]}


def test_the_share_packing_makes_room_for_a_waiting_share_and_starts_it(api, actors, browser):
    pool = pool_with_share_layout(actors, ROOM_LAYOUT, gpus=1, milli=800, cpu="1", memory="1Gi")
    plan = api("member").get(f"{URL}?plan=1").json()["plan"]
    assert plan["sharePlacements"] == [{"pod": "algorithm/waiting", "node": "train-pool-a-0", "gpuIndices": [plan["sharePlacements"][0]["gpuIndices"][0]]}]
    assert plan["shareGpusFreed"] == 0 and len(plan["shareMoves"]) == 2
    page = browser("lead").get("/pools/train-pool-a/fragmentation/?part=plan", headers={"HX-Request": "true"}).content.decode()
    assert "make room for <strong>1 waiting pod(s)</strong>" in page and "algorithm/waiting on train-pool-a-0" in page
    response = api("lead").post(f"{URL}apply/", {"shares": True}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["started"] == ["algorithm/waiting"] and len(response.json()["applied"]) == 2
    waiting = Pod.objects.get(name="waiting")
    assert (waiting.phase, waiting.reason, waiting.node.name) == (Pod.Phase.RUNNING, "Scheduled", "train-pool-a-0")
    used = {}
    for pod in Pod.objects.filter(phase=Pod.Phase.RUNNING, gpu_milli__lt=1000):
        (gpu,) = pod.gpu_indices
        used[gpu] = used.get(gpu, 0) + pod.gpu_milli
    assert sorted(used.values()) == [1000, 1000]  # 500+500 and 100+100+800
    scheduled = PoolEvent.objects.filter(pool=pool, reason="Scheduled", message__contains="in the room packing GPU shares made")
    assert scheduled.count() == 1 and "algorithm/waiting" in scheduled.get().message
    assert scheduler_pass(now=T0).scheduled == []  # nothing left to place, nothing placed twice


def test_room_is_made_only_for_the_highest_priority_that_waits(api, actors):
    """A higher-priority pod that no packing can place (two whole GPUs) still outranks the
    waiting share: no room is made for the share ahead of it."""
    pool_with_share_layout(actors, ROOM_LAYOUT, gpus=1, milli=800, cpu="1", memory="1Gi")
    submit(actors["member"], "urgent", gpus=2, cpu="1", priority=1000)
    plan = api("member").get(f"{URL}?plan=1").json()["plan"]
    assert plan["sharePlacements"] == [] and plan["shareMoves"] == []


def test_a_member_may_not_apply_and_a_non_boolean_is_400_with_nothing_moved(api, shared):
    before = {p.name: p.gpu_indices for p in Pod.objects.all()}
    assert api("member").post(f"{URL}apply/", {"shares": True}, format="json").status_code == 403
    response = api("lead").post(f"{URL}apply/", {"shares": "sometimes"}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == [{"field": "shares", "message": "Must be a valid boolean."}]
    assert {p.name: p.gpu_indices for p in Pod.objects.all()} == before


def test_the_page_shows_the_share_part_and_applies_it(browser, shared):
    plan = browser("lead").get("/pools/train-pool-a/fragmentation/?part=plan", headers={"HX-Request": "true"}).content.decode()
    assert "Packing GPU shares" in plan and "<strong>1 whole GPU(s) freed</strong>" in plan
    assert "Apply: pack GPU shares" in plan and "No moves free a running node" in plan
    member = browser("member").get("/pools/train-pool-a/fragmentation/?part=plan", headers={"HX-Request": "true"}).content.decode()
    assert "Packing GPU shares" in member and "Apply: pack GPU shares" not in member
    lead = browser("lead")
    response = lead.post("/pools/train-pool-a/fragmentation/apply/", {"part": "shares"})
    assert response.status_code == 302
    page = lead.get(response["Location"]).content.decode()
    assert "GPU shares repacked:" in page and "1 whole GPU(s) freed." in page
    again = lead.get("/pools/train-pool-a/fragmentation/?part=plan", headers={"HX-Request": "true"}).content.decode()
    assert "No moves of GPU shares free a whole GPU or make room for a waiting pod." in again


# 500 | 500 | 300 | 300 pack into 500+500 | 300+300, two GPUs freed; with d's eviction refused, one.
PAIRS_LAYOUT = {0: [("a", 500)], 1: [("b", 500)], 2: [("c", 300)], 3: [("d", 300)]}


@pytest.mark.parametrize("times", [None, 1])
def test_a_share_whose_eviction_a_disruption_budget_refuses_is_not_moved(api, actors, times):
    """Issue 22 item 2 (PDB-like limits on moves): the plan asks the cluster which evictions a
    disruption budget refuses, without using up a refusal, and packs around those pods."""
    pool_with_share_layout(actors, PAIRS_LAYOUT)
    assert api("member").get(f"{URL}?plan=1").json()["plan"]["shareGpusFreed"] == 2
    budget = failure_inject(step=EVICT, times=times, token_prefix="algorithm/d", message="disruption budget")
    plan = api("member").get(f"{URL}?plan=1").json()["plan"]
    assert plan["shareGpusFreed"] == 1 and "algorithm/d" not in {m["pod"] for m in plan["shareMoves"]}
    response = api("lead").post(f"{URL}apply/", {"shares": True}, format="json")
    assert response.status_code == 200, response.content
    assert "algorithm/d" not in response.json()["applied"] and gpus_of("d") == [3]
    assert gpus_of("a") == gpus_of("b")  # the two 500s now share a GPU
    budget.refresh_from_db()
    assert budget.remaining == times  # asking used up no refusal


def test_the_drain_plan_says_a_disruption_budget_keeps_a_node(api, browser, actors):
    pool = pool_with_nodes(actors["lead"], nodes=2, node_labels={"pool": "train"})
    for name in ("p0", "p1"):
        submit(actors["member"], name, gpus=1, cpu="1")
    scheduler_pass(now=T0)
    Pod.objects.filter(name="p1").update(node=pool.nodes.get(name="train-pool-a-1"), gpu_indices=[0])
    on = {"p0": "train-pool-a-0", "p1": "train-pool-a-1"}  # either node drains onto the other
    assert {p.name: p.node.name for p in Pod.objects.filter(phase=Pod.Phase.RUNNING)} == on
    assert len(api("member").get(f"{URL}?plan=1").json()["plan"]["freedNodes"]) == 1
    failure_inject(step=EVICT, times=None, token_prefix="algorithm/p", message="disruption budget")
    plan = api("member").get(f"{URL}?plan=1").json()["plan"]
    assert plan["moves"] == [] and plan["freedNodes"] == []
    assert set(plan["skipped"].values()) == {f"a disruption budget keeps pod algorithm/{name} in place" for name in on}
    page = browser("lead").get("/pools/train-pool-a/fragmentation/?part=plan", headers={"HX-Request": "true"}).content.decode()
    assert "No moves free a running node." in page and "Why 2 running node(s) stay as they are" in page
    assert "<li>train-pool-a-1: a disruption budget keeps pod algorithm/p1 in place</li>" in page
    assert 'The <a href="/disruption-budgets/">disruption budgets</a> say how many of their pods may move now.' in page
    response = api("lead").post(f"{URL}apply/", {"maxNodes": 1}, format="json")
    assert response.status_code == 200 and "applied" not in response.json()
    assert {p.name: p.node.name for p in Pod.objects.filter(phase=Pod.Phase.RUNNING)} == on
    assert not pool.events.filter(reason="Evicted").exists()


@pytest.mark.parametrize(
    ("annotation", "value"),
    [("cluster-autoscaler.kubernetes.io/safe-to-evict", "false"), ("karpenter.sh/do-not-disrupt", "true")],
)
def test_the_repack_moves_no_pod_whose_annotation_forbids_it(api, actors, annotation, value):
    """As Cluster Autoscaler's scale-down and Karpenter's consolidation never move such a pod,
    nor does the repack (it moved it, and said the node was freed)."""
    pool = pool_with_nodes(actors["lead"], nodes=2, node_labels={"pool": "train"})
    for name in ("p0", "p1"):
        document = pod_document(name, gpus=1, cpu="1")
        document["metadata"]["annotations"][annotation] = value
        pod_services.pod_create(user=actors["member"], document=document, now=T0)
    scheduler_pass(now=T0)
    Pod.objects.filter(name="p1").update(node=pool.nodes.get(name="train-pool-a-1"), gpu_indices=[0])
    on = {"p0": "train-pool-a-0", "p1": "train-pool-a-1"}
    plan = api("member").get(f"{URL}?plan=1").json()["plan"]
    assert plan["moves"] == [] and plan["freedNodes"] == []
    assert set(plan["skipped"].values()) == {f'pod algorithm/{name} is annotated {annotation}: "{value}"' for name in on}
    assert api("lead").post(f"{URL}apply/", {"maxNodes": 1}, format="json").status_code == 200
    assert {p.name: p.node.name for p in Pod.objects.filter(phase=Pod.Phase.RUNNING)} == on
