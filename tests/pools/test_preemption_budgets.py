"""Preemption counts PodDisruptionBudgets and explains its failures as kube-scheduler 1.37 does
(pkg/scheduler/framework/preemption: FilterVictimsWithPDBViolation, pickOneNodeForPreemption;
plugins/defaultpreemption: SelectVictimsOnNode), not as the Eviction API does: preemption deletes
its victims, so a pod two budgets select is not refused, it spends one of each.

The core first (no database), then the same through the simulated scheduler pass."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pools.core.disruption import (
    DisruptionBudget,
    PreemptionBudget,
    disruption_budgets,
    evictions,
    preemption_budgets,
)
from pools.core.scheduling.explain import explain
from pools.core.scheduling.nodes import REASON_GPU, REASON_GPU_SHARE, NodeState, Pod, Taint
from pools.core.scheduling.preempt import NO_VICTIMS, KubeCount, past_budget, preempt, victims_on

NS = "algorithm"


def node(name: str, *pods: tuple[Pod, tuple[int, ...]], gpus: int = 8, **kw) -> NodeState:
    state = NodeState(name=name, cpu_milli=64_000, memory_mib=512_000, gpu_count=gpus, gpu_model="A100", **kw)
    for running, indices in pods:
        state.bind(running, indices)
    return state


def pod(name: str, gpus: int = 8, priority: int = 0, labels=None, **kw) -> Pod:
    return Pod(f"{NS}/{name}", cpu_milli=1000, memory_mib=1024, gpu_count=gpus, priority=priority, labels=labels or {}, **kw)


def pdb(name: str, selector, allowed: int, *, namespace: str = NS, disrupted=()) -> dict:
    """A PodDisruptionBudget document as the API returns it, processed, allowing `allowed`."""
    return {
        "metadata": {"name": name, "namespace": namespace, "generation": 1},
        "spec": {"selector": selector},
        "status": {"observedGeneration": 1, "disruptionsAllowed": allowed, "disruptedPods": {p: "2026-12-01T08:00:00Z" for p in disrupted}},
    }


def budgets_over(documents: list[dict], nodes: list[NodeState]) -> list[DisruptionBudget]:
    """The budgets as the cluster backends read them: over every running pod, by its labels."""
    return disruption_budgets(documents, {b.pod.name: dict(b.pod.labels) for n in nodes for b in n.bound.values()})


def two_budgets_each_allowing_one() -> tuple[list[NodeState], list[DisruptionBudget]]:
    """The review's case: `a-guarded` under `g` (none allowed) on -0, `b-double` under `x` and
    `y` (one allowed each) on -1."""
    guarded = pod("a-guarded", labels={"app": "g"})
    double = pod("b-double", labels={"x": "1", "y": "1"})
    nodes = [node("train-0", (guarded, tuple(range(8)))), node("train-1", (double, tuple(range(8))))]
    documents = [
        pdb("g", {"matchLabels": {"app": "g"}}, 0),
        pdb("x", {"matchLabels": {"x": "1"}}, 1),
        pdb("y", {"matchLabels": {"y": "1"}}, 1),
    ]
    return nodes, budgets_over(documents, nodes)


# --- budgets as preemption counts them -----------------------------------------------------------


def test_a_pod_two_budgets_select_is_refused_by_the_eviction_api_but_not_past_either_budget():
    nodes, budgets = two_budgets_each_allowing_one()
    assert evictions([f"{NS}/b-double", f"{NS}/a-guarded"], budgets) == []  # the Eviction API: 500 and 429, unchanged
    counted = preemption_budgets(budgets)
    assert [(b.name, b.pods, b.allowed) for b in counted] == [
        (f"{NS}/g", {f"{NS}/a-guarded"}, 0),
        (f"{NS}/x", {f"{NS}/b-double"}, 1),
        (f"{NS}/y", {f"{NS}/b-double"}, 1),
    ]
    assert past_budget([pod("b-double"), pod("a-guarded")], counted) == {f"{NS}/a-guarded"}


def test_preemption_takes_the_pod_whose_two_budgets_each_allow_one_not_the_guarded_one():
    """Defect 1: the Eviction API's "more than one budget" refusal made `b-double` look past its
    budget, so `a-guarded`'s node (the smaller name) won the tie and its budget was violated."""
    nodes, budgets = two_budgets_each_allowing_one()
    plan = preempt(pod("vip", priority=100), nodes, budgets)
    assert (plan.node, plan.victim_names) == ("train-1", (f"{NS}/b-double",))
    assert victims_on(pod("vip", priority=100), nodes[0], preemption_budgets(budgets)).violations == 1
    assert victims_on(pod("vip", priority=100), nodes[1], preemption_budgets(budgets)).violations == 0


def test_a_budget_with_an_empty_selector_counts_for_nothing_in_preemption():
    """`if selector.Empty() || ...: continue`: kube-scheduler skips it, though the Eviction API
    applies it to every pod of its namespace."""
    low = Pod("team-a/low", gpu_count=8, priority=1, labels={"app": "a"})
    other = Pod("team-b/other", gpu_count=8, priority=5, labels={"app": "b"})
    nodes = [node("n0", (low, tuple(range(8)))), node("n1", (other, tuple(range(8))))]
    budgets = budgets_over([pdb("everything", {}, 0, namespace="team-a")], nodes)
    assert evictions(["team-a/low"], budgets) == []
    assert preemption_budgets(budgets) == []
    assert preempt(Pod("team-a/vip", gpu_count=8, priority=100), nodes, budgets).victim_names == ("team-a/low",)


def test_an_unlabelled_pod_and_one_already_disrupted_count_against_no_budget():
    nodes = [node("n0", (pod("bare", gpus=4), (0, 1, 2, 3)), (pod("gone", gpus=4, labels={"app": "g"}), (4, 5, 6, 7)))]
    documents = [
        pdb("no-app", {"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, 0),  # selects the unlabelled pod
        pdb("g", {"matchLabels": {"app": "g"}}, 0, disrupted=("gone",)),
    ]
    budgets = budgets_over(documents, nodes)
    assert evictions([f"{NS}/bare", f"{NS}/gone"], budgets) == []  # the Eviction API refuses both
    assert [(b.name, b.pods) for b in preemption_budgets(budgets)] == []
    assert victims_on(pod("vip", priority=9), nodes[0], preemption_budgets(budgets)).violations == 0


def test_an_unready_pod_the_eviction_api_lets_go_still_counts_against_its_budget_in_preemption():
    """The Eviction API lets a Running pod that is not Ready go without spending a healthy
    budget's disruption; kube-scheduler's preemption does not look at readiness."""
    document = pdb("g", {"matchLabels": {"app": "g"}}, 0)
    document["status"] |= {"currentHealthy": 1, "desiredHealthy": 1}
    budgets = disruption_budgets([document], {f"{NS}/sick": {"app": "g"}}, unready={f"{NS}/sick"})
    assert evictions([f"{NS}/sick"], budgets) == [f"{NS}/sick"]
    assert [(b.name, b.pods, b.allowed) for b in preemption_budgets(budgets)] == [(f"{NS}/g", {f"{NS}/sick"}, 0)]


def test_the_budgets_are_spent_in_order_of_importance_and_the_one_past_it_is_given_back_first():
    """FilterVictimsWithPDBViolation walks the victims most important first: of two pods under a
    budget that allows one, the lower-priority one is past it; SelectVictimsOnNode gives it back
    first, so evicting the other violates nothing."""
    high, low = pod("high", gpus=4, priority=5, labels={"app": "w"}), pod("low", gpus=4, priority=1, labels={"app": "w"})
    counted = [PreemptionBudget(f"{NS}/w", frozenset({high.name, low.name}), 1)]
    assert past_budget([high, low], counted) == {low.name}
    found = victims_on(pod("vip", gpus=4, priority=10), node("n0", (high, (0, 1, 2, 3)), (low, (4, 5, 6, 7))), counted)
    assert (found.victims, found.violations) == ((high,), 0)


def test_a_pod_past_one_budget_spends_none_of_the_budgets_after_it():
    a, b = pod("a", labels={"x": "1", "y": "1"}), pod("b", labels={"y": "1"})
    counted = [PreemptionBudget(f"{NS}/x", frozenset({a.name}), 0), PreemptionBudget(f"{NS}/y", frozenset({a.name, b.name}), 1)]
    assert past_budget([a, b], counted) == {a.name}  # a stopped at x: y still lets b go


def test_the_node_with_fewer_violations_wins_over_lower_priority_victims():
    guarded = pod("guarded", priority=1, labels={"app": "g"})
    free = pod("free", priority=5)
    nodes = [node("n0", (guarded, tuple(range(8)))), node("n1", (free, tuple(range(8))))]
    budgets = budgets_over([pdb("g", {"matchLabels": {"app": "g"}}, 0)], nodes)
    assert preempt(pod("vip", priority=100), nodes, budgets).node == "n1"
    assert preempt(pod("vip", priority=100), nodes).node == "n0"  # without the budget: the lowest priority


def test_the_sum_of_priorities_is_kube_schedulers_so_negative_priorities_do_not_make_more_victims_cheaper():
    """pickOneNodeForPreemption adds MaxInt32+1 to every victim's priority: two victims (5, -10)
    cost more than one of 5."""
    two = node("n0", (pod("a", gpus=4, priority=5, checkpointable=True), (0, 1, 2, 3)), (pod("b", gpus=4, priority=-10, checkpointable=True), (4, 5, 6, 7)))
    one = node("n1", (pod("c", priority=5, checkpointable=True), tuple(range(8))))
    assert preempt(pod("vip", priority=100), [two, one]).node == "n1"


# --- the message when preemption finds no victims (defect 2) -------------------------------------


def test_evicting_every_lower_priority_pod_still_short_gives_the_filters_reason():
    """kube-scheduler: "No preemption victims found" only where the node has no pod of lower
    priority; where evicting all of them still leaves the pod short, the filter's own reasons."""
    busy = node("n0", (pod("high", gpus=6, priority=100), (0, 1, 2, 3, 4, 5)), (pod("low", gpus=2), (6, 7)))
    mid = pod("mid", gpus=4, priority=50)
    assert victims_on(mid, busy).reasons == ("Insufficient nvidia.com/gpu",)
    assert preempt(mid, [busy]) is None
    assert explain(mid, [busy]).message == (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    )


def test_the_preemption_verdict_counts_each_nodes_reasons():
    """FitError counts each node's reasons, sorted as "<count> <reason>" strings: a node with no
    lower-priority pod, one still short of cpu and GPUs once they are gone, one the pod's
    taint keeps it off."""
    same = node("a", (pod("peer", priority=50), tuple(range(8))))
    short = node("b", (Pod(f"{NS}/big", cpu_milli=60_000, gpu_count=6, priority=100), tuple(range(6))), (pod("low", gpus=2), (6, 7)))
    tainted = node("c", taints=(Taint("pool", "infer", "NoSchedule"),))
    tainted.bind(pod("other"), tuple(range(8)))
    mid = Pod(f"{NS}/mid", cpu_milli=8000, gpu_count=4, priority=50)
    assert victims_on(mid, same).reasons == (NO_VICTIMS,)
    assert victims_on(mid, short).reasons == ("Insufficient cpu", "Insufficient nvidia.com/gpu")
    assert victims_on(mid, tainted) is None
    assert explain(mid, [same, short, tainted]).message.endswith(
        "preemption: 0/3 nodes are available: 1 Insufficient cpu, 1 Insufficient nvidia.com/gpu, "
        "1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling."
    )


def test_candidates_the_scheduler_extender_drops_leave_no_candidate_node():
    """kube-scheduler looks for victims by its own filters; the extender's preempt then drops a
    node of another GPU model, or one whose victims include the owner's pods for a guest's pod
    of a lent pool: with every candidate dropped its message is "no candidate node for
    preemption" (tests/k8s/test_extender.py checks the words on a real kube-scheduler)."""
    lent = node("lent", (Pod("owner/train", cpu_milli=1000, gpu_count=8, team="owner"), tuple(range(8))), teams=frozenset({"owner", "guest"}), owner="owner")
    other_model = NodeState(name="h100", cpu_milli=64_000, memory_mib=512_000, gpu_count=8, gpu_model="H100")
    other_model.bind(pod("low"), tuple(range(8)))
    guest = Pod("guest/eval", cpu_milli=1000, gpu_count=8, priority=100, team="guest", gpu_models=frozenset({"A100"}))
    assert preempt(guest, [lent, other_model]) is None
    assert explain(guest, [lent, other_model]).message == (
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: no candidate node for preemption"
    )
    own = node("own", (Pod("guest/low", cpu_milli=1000, gpu_count=8, team="guest"), tuple(range(8))), teams=frozenset({"owner", "guest"}), owner="owner")
    assert preempt(guest, [lent, other_model, own]).node == "own"


def test_no_hint_offers_a_preemption_the_scheduler_extender_would_drop():
    """kube-scheduler gives the guest's own pod back first (the higher priority) and picks the
    owner's as the victim, which the extender's preempt refuses: the hint offers waiting, not
    preemption, beside the message that says none happens."""
    members = frozenset({"owner", "guest"})
    lent = node("lent", (Pod("owner/train", cpu_milli=1000, gpu_count=1, priority=5, team="owner"), (0,)),
                (Pod("guest/eval", cpu_milli=1000, gpu_count=1, priority=10, team="guest"), (1,)), gpus=2, teams=members, owner="owner")  # fmt: skip
    verdict = explain(Pod("guest/urgent", cpu_milli=1000, gpu_count=1, priority=100, team="guest"), [lent])
    assert verdict.message.endswith("preemption: no candidate node for preemption"), verdict.message
    assert "preempt" not in verdict.hints[-1] and "Wait for the pods there to finish" in verdict.hints[-1], verdict.hints


def test_a_whole_gpu_finds_no_victim_where_kube_scheduler_counts_the_shares_apart():
    """kube-scheduler counts whole GPUs and GPU shares apart: a node whose 8 GPUs are each partly
    shared by lower-priority pods has 8 whole GPUs free by its count, so its preemption removes
    them, gives every one back and finds no victim, an error it says as such
    (tests/k8s/test_extender.py has the words from a real kube-scheduler); no hint offers
    preemption there."""
    shared = node("halves-0", *((Pod(f"{NS}/share-{i}", cpu_milli=1000, gpu_count=1, gpu_milli=600), (i,)) for i in range(8)))
    whole = pod("whole", gpus=1, priority=1000)
    verdict = explain(whole, [shared])
    assert verdict.message == '0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: expected at least one victim pod on node "halves-0"'
    assert "preempt" not in verdict.hints[-1], verdict.hints
    assert victims_on(whole, shared).victims  # the simulated cluster's own preemption does evict shares (ours)


def test_a_pod_asking_whole_gpus_and_shares_too_counts_each_as_kube_scheduler_does():
    """A real cluster's pod may ask `nvidia.com/gpu: 1` and `ebcloud.io/gpu-milli: 500` both (the
    product's API refuses that): it holds two whole GPUs here, and kube-scheduler counts one GPU
    and 500 thousandths. Four of them fill an 8-GPU node for our filter, while kube-scheduler's
    count has four GPUs to spare: its preemption for a two-GPU pod finds no victim, and says so
    (tests/k8s/test_extender.py has the words from a real kube-scheduler)."""
    both = [(Pod(f"{NS}/both-{i}", cpu_milli=1000, gpu_count=2, gpu_shares=500), (2 * i, 2 * i + 1)) for i in range(4)]
    full = node("both-0", *both)
    counted = KubeCount.of(full)
    assert (counted.gpus, counted.shares) == (4, 2000)
    verdict = explain(pod("two", gpus=2, priority=1000), [full])
    assert verdict.message == '0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: expected at least one victim pod on node "both-0"'
    assert "preempt" not in verdict.hints[-1], verdict.hints
    five_and_shares = Pod(f"{NS}/five", gpu_count=12, gpu_shares=6500)  # asked 5 GPUs and 6500 thousandths
    assert counted.short(five_and_shares) == [REASON_GPU, REASON_GPU_SHARE]


def test_kube_schedulers_victims_that_would_not_make_room_on_the_gpus_are_no_candidate():
    """Seven whole-GPU pods and a share of the eighth GPU: kube-scheduler's count leaves one GPU
    to spare, so for a two-GPU pod it picks one whole-GPU victim, after which the pod would
    still not fit; the extender drops the node (tests/k8s/test_extender.py, on a real
    kube-scheduler) and no hint offers preemption. The simulated cluster's own preemption
    frees two GPUs."""
    running = [(Pod(f"{NS}/whole-{i}", cpu_milli=1000, gpu_count=1), (i,)) for i in range(7)]
    sevens = node("sevens-0", *running, (Pod(f"{NS}/share", cpu_milli=1000, gpu_count=1, gpu_milli=600), (7,)))
    two = pod("two", gpus=2, priority=1000)
    verdict = explain(two, [sevens])
    assert verdict.message == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: no candidate node for preemption"
    assert "preempt" not in verdict.hints[-1], verdict.hints
    assert len(victims_on(two, sevens, ours=False).victims) == 1
    assert len(victims_on(two, sevens).victims) == 2


def test_a_node_of_another_gpu_model_that_kube_schedulers_count_passes_is_no_preemption_candidate():
    """kube-scheduler's own count passes a B200 node whose GPUs each hold a share for a whole
    A100, so the extender is asked and refuses the node for its GPU model: unresolvable, not
    tried by preemption (tests/k8s/test_extender.py has the words of a real kube-scheduler)."""
    shared = node("b200-0", *((Pod(f"{NS}/share-{i}", cpu_milli=1000, gpu_count=1, gpu_milli=600), (i,)) for i in range(8)))
    shared.gpu_model = "B200"
    whole = pod("whole", gpus=1, priority=1000, gpu_models=("A100",))
    assert explain(whole, [shared]).message == (
        "0/1 nodes are available: 1 node(s) didn't match pod's GPU model. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    )


# --- through the simulated scheduler pass -------------------------------------------------------


def budget(actors, name: str, spec: dict) -> None:
    from pools.services.disruption_budgets import budget_create

    budget_create(user=actors["lead"], document={"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": NS}, "spec": spec})


@pytest.mark.django_db
def test_the_scheduler_pass_preempts_the_pod_under_two_budgets_and_keeps_the_guarded_one(actors):
    from pools.controllers.scheduler import scheduler_pass
    from pools.models.pods import Pod as PodRow
    from tests.pools.pod_helpers import T0, pool_with_nodes, submit

    pool_with_nodes(actors["lead"], nodes=2, node_labels={"pool": "train"})
    submit(actors["member"], "a-guarded", gpus=8, cpu="1", memory="1Gi", labels={"app": "g"})
    submit(actors["member"], "b-double", gpus=8, cpu="1", memory="1Gi", labels={"x": "1", "y": "1"})
    scheduler_pass(now=T0)
    assert dict(PodRow.objects.values_list("name", "node__name")) == {"a-guarded": "train-pool-a-0", "b-double": "train-pool-a-1"}
    budget(actors, "g", {"minAvailable": 1, "selector": {"matchLabels": {"app": "g"}}})  # allows 0
    budget(actors, "x", {"maxUnavailable": 1, "selector": {"matchLabels": {"x": "1"}}})  # allows 1
    budget(actors, "y", {"maxUnavailable": 1, "selector": {"matchLabels": {"y": "1"}}})  # allows 1
    submit(actors["member"], "vip", gpus=8, cpu="1", memory="1Gi", priority=100)
    result = scheduler_pass(now=T0 + timedelta(minutes=1))
    assert result.preempted == [f"{NS}/b-double"]
    assert PodRow.objects.get(name="a-guarded").phase == "Running"
    assert PodRow.objects.get(name="vip").node.name == "train-pool-a-1"


@pytest.mark.django_db
def test_the_scheduler_pass_explains_victims_that_do_not_suffice_in_kube_schedulers_words(actors):
    from pools.controllers.scheduler import scheduler_pass
    from pools.models.pods import Pod as PodRow
    from tests.pools.pod_helpers import T0, pool_with_nodes, submit

    pool_with_nodes(actors["lead"], nodes=1, node_labels={"pool": "train"})
    submit(actors["member"], "high", gpus=6, cpu="1", memory="1Gi", priority=100)
    submit(actors["member"], "low", gpus=2, cpu="1", memory="1Gi", priority=0)
    scheduler_pass(now=T0)
    submit(actors["member"], "mid", gpus=4, cpu="1", memory="1Gi", priority=50)
    result = scheduler_pass(now=T0 + timedelta(minutes=1))
    assert result.preempted == []
    mid = PodRow.objects.get(name="mid")
    assert (mid.phase, mid.explanation) == (
        "Pending",
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
    )
