"""Placement core (seed O3 placement, T2 pending explanation): filters, tolerations, affinity,
scores, ties, sharing best fit, explanations with hints, preemption, and the invariants that
must hold after any sequence of binds and evictions."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pools.core.scheduling.cluster import ClusterScheduler
from pools.core.scheduling.explain import explain
from pools.core.scheduling.fragmentation import workload_from_pods
from pools.core.scheduling.nodes import (
    REASON_AFFINITY,
    REASON_CPU,
    REASON_GPU,
    REASON_GPU_MODEL,
    REASON_GPU_SHARE,
    REASON_MEMORY,
    REASON_UNSCHEDULABLE,
    NodeSelectorRequirement,
    NodeState,
    OversubscribedError,
    Pod,
    Taint,
    Toleration,
    best_fit_gpus,
    filter_node,
    matches_affinity,
)
from pools.core.scheduling.preempt import preempt
from pools.core.scheduling.schedule import schedule

TRAIN = Taint("pool", "train", "NoSchedule")


def gpu_node(name="n1", gpus=8, cpu=64_000, mem=512_000, **kw) -> NodeState:
    return NodeState(
        name=name, cpu_milli=cpu, memory_mib=mem, gpu_count=gpus, gpu_model="A100", **kw
    )


def pod(name="ns/p", cpu=1000, mem=1024, gpus=0, milli=0, **kw) -> Pod:
    return Pod(name=name, cpu_milli=cpu, memory_mib=mem, gpu_count=gpus, gpu_milli=milli, **kw)


# --- tolerations: Kubernetes' ToleratesTaint ------------------------------------------------


def test_an_exists_toleration_with_an_empty_key_tolerates_every_taint():
    everything = Toleration(operator="Exists")
    assert everything.tolerates(TRAIN)
    assert everything.tolerates(Taint("gpu", "", "NoExecute"))


def test_a_toleration_with_an_empty_effect_matches_every_effect():
    tol = Toleration("pool", "Equal", "train")
    assert all(tol.tolerates(Taint("pool", "train", e)) for e in ("NoSchedule", "NoExecute"))


def test_an_equal_toleration_needs_the_same_value():
    assert not Toleration("pool", "Equal", "infer").tolerates(TRAIN)
    assert Toleration("pool", "Equal", "train", "NoSchedule").tolerates(TRAIN)


def test_an_exists_toleration_ignores_the_value():
    assert Toleration("pool", "Exists").tolerates(TRAIN)


def test_a_toleration_for_another_effect_does_not_tolerate():
    assert not Toleration("pool", "Exists", effect="NoExecute").tolerates(TRAIN)


def test_an_equal_toleration_with_an_empty_key_matches_any_key_with_that_value():
    assert Toleration("", "Equal", "train").tolerates(TRAIN)
    assert not Toleration("", "Equal", "x").tolerates(TRAIN)


def test_an_unknown_taint_effect_is_rejected():
    with pytest.raises(ValueError):
        Taint("pool", "train", "NoWay")


# --- node affinity operators ------------------------------------------------------------------

LABELS = {"zone": "a", "gpus": "8", "tier": "gold"}


@pytest.mark.parametrize(
    ("operator", "key", "values", "expected"),
    [
        ("In", "zone", ("a", "b"), True),
        ("In", "zone", ("b",), False),
        ("In", "missing", ("a",), False),
        ("NotIn", "zone", ("b",), True),
        ("NotIn", "zone", ("a",), False),
        ("NotIn", "missing", ("a",), True),
        ("Exists", "tier", (), True),
        ("Exists", "missing", (), False),
        ("DoesNotExist", "missing", (), True),
        ("DoesNotExist", "tier", (), False),
        ("Gt", "gpus", ("4",), True),
        ("Gt", "gpus", ("8",), False),
        ("Lt", "gpus", ("9",), True),
        ("Lt", "gpus", ("8",), False),
        ("Gt", "zone", ("1",), False),
        ("Gt", "missing", ("1",), False),
    ],
)
def test_each_affinity_operator_follows_kubernetes(operator, key, values, expected):
    assert NodeSelectorRequirement(key, operator, values).matches(LABELS) is expected


def test_affinity_terms_are_ored_and_expressions_anded():
    zone_b = NodeSelectorRequirement("zone", "In", ("b",))
    zone_a = NodeSelectorRequirement("zone", "In", ("a",))
    gold = NodeSelectorRequirement("tier", "In", ("gold",))
    silver = NodeSelectorRequirement("tier", "In", ("silver",))
    assert matches_affinity([[zone_b], [zone_a, gold]], LABELS)
    assert not matches_affinity([[zone_b], [zone_a, silver]], LABELS)


def test_an_empty_affinity_term_matches_nothing_but_no_terms_match_everything():
    assert matches_affinity([], LABELS)
    assert not matches_affinity([[]], LABELS)


# --- filters ----------------------------------------------------------------------------------


def test_it_rejects_a_pod_without_the_pool_toleration():
    node = gpu_node(taints=(TRAIN,))
    assert filter_node(pod(gpus=1), node) == "node(s) had untolerated taint(s)"
    tolerating = pod(gpus=1, tolerations=(Toleration("pool", "Equal", "train", "NoSchedule"),))
    assert filter_node(tolerating, node) is None


def test_a_no_execute_taint_also_rejects():
    node = gpu_node(taints=(Taint("maintenance", "", "NoExecute"),))
    assert filter_node(pod(), node) == "node(s) had untolerated taint(s)"


def test_a_prefer_no_schedule_taint_only_makes_a_node_a_last_resort():
    soft = gpu_node("a-soft", taints=(Taint("spot", "true", "PreferNoSchedule"),))
    plain = gpu_node("b-plain")
    assert filter_node(pod(gpus=1), soft) is None
    assert schedule(pod(gpus=1), [soft, plain], "bestfit").node == "b-plain"
    assert schedule(pod(gpus=1), [soft], "bestfit").node == "a-soft"


def test_it_rejects_a_cordoned_node_unless_the_pod_tolerates_unschedulable():
    node = gpu_node(unschedulable=True)
    assert filter_node(pod(), node) == REASON_UNSCHEDULABLE
    tol = Toleration("node.kubernetes.io/unschedulable", "Exists", effect="NoSchedule")
    assert filter_node(pod(tolerations=(tol,)), node) is None


def test_it_rejects_a_node_that_is_not_ready_with_the_not_ready_taint():
    node = gpu_node(ready=False)
    assert (
        filter_node(pod(), node) == "node(s) had untolerated taint(s)"
    )


def test_it_rejects_a_node_without_the_selected_label():
    node = gpu_node(labels={"gpu-class": "t4"})
    assert filter_node(pod(node_selector={"gpu-class": "a100"}), node) == REASON_AFFINITY
    assert filter_node(pod(node_selector={"gpu-class": "t4"}), node) is None


def test_it_rejects_a_node_failing_required_affinity():
    req = NodeSelectorRequirement("zone", "In", ("b",))
    assert (
        filter_node(pod(affinity_terms=[[req]]), gpu_node(labels={"zone": "a"})) == REASON_AFFINITY
    )


def test_it_rejects_a_gpu_pod_on_a_disallowed_model_but_not_a_cpu_pod():
    node = gpu_node()
    assert filter_node(pod(gpus=1, gpu_models=("H100",)), node) == REASON_GPU_MODEL
    assert filter_node(pod(gpu_models=("H100",)), node) is None


def test_it_rejects_insufficient_cpu_memory_and_gpus():
    node = gpu_node(gpus=2, cpu=4000, mem=8000)
    assert filter_node(pod(cpu=5000), node) == REASON_CPU
    assert filter_node(pod(mem=9000), node) == REASON_MEMORY
    assert filter_node(pod(gpus=4), node) == REASON_GPU
    assert filter_node(pod(gpus=1), gpu_node(gpus=0)) == REASON_GPU


def test_a_pod_pinned_by_node_name_counts_the_nodes_it_does_not_name_under_node_affinity():
    """kube-scheduler's NodeAffinity PreFilter (tests/k8s/test_preemption_on_kubernetes.py checks
    the same against the real one): the nodes the required affinity does not name fail it before
    any filter, a cordoned one included; a name no node has leaves every node so."""
    nodes = [gpu_node("n-0"), gpu_node("n-1"), gpu_node("n-2", unschedulable=True)]

    def pinned(*names, gpus=9):
        return pod(gpus=gpus, affinity_terms=((NodeSelectorRequirement("metadata.name", "In", names, field=True),),))

    assert explain(pinned("n-0"), nodes).message.startswith(
        "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) didn't satisfy plugin(s) [NodeAffinity]."
    )
    assert explain(pinned("no-such-node"), nodes).message.startswith("0/3 nodes are available: 3 node(s) didn't satisfy plugin(s) [NodeAffinity].")
    assert explain(pinned("n-2", gpus=1), nodes).message.startswith(
        "0/3 nodes are available: 1 node(s) were unschedulable, 2 node(s) didn't satisfy plugin(s) [NodeAffinity]."
    )


def test_a_share_needs_one_gpu_with_enough_free_milli():
    """A share is refused naming the resource it asks for, as kube-scheduler's NodeResourcesFit
    names the one that is short (tests/k8s/test_extender.py sees the same from the real one)."""
    node = gpu_node(gpus=2, gpu_free=[400, 400])
    assert filter_node(pod(gpus=1, milli=500), node) == REASON_GPU_SHARE == "Insufficient ebcloud.io/gpu-milli"
    assert filter_node(pod(gpus=1, milli=400), node) is None
    assert filter_node(pod(gpus=1), node) == REASON_GPU  # a whole GPU needs an idle one


def test_filters_run_in_kube_scheduler_order_and_report_the_first_failure():
    node = gpu_node(gpus=1, cpu=100, unschedulable=True, taints=(TRAIN,), labels={})
    greedy = pod(cpu=9000, gpus=4, node_selector={"x": "y"})
    assert filter_node(greedy, node) == REASON_UNSCHEDULABLE
    node.unschedulable = False
    assert filter_node(greedy, node).startswith("node(s) had untolerated taint")
    node.taints = ()
    assert filter_node(greedy, node) == REASON_AFFINITY
    node.labels = {"x": "y"}
    assert filter_node(greedy, node) == REASON_CPU


# --- pods, binds and GPU choice --------------------------------------------------------------


def test_a_whole_gpu_request_is_normalised_to_1000_milli():
    assert pod(gpus=2).gpu_milli == 1000
    assert pod(gpus=1, milli=250).is_sharing


def test_a_gpu_share_on_more_than_one_gpu_is_refused():
    with pytest.raises(ValueError):
        pod(gpus=2, milli=500)


def test_a_share_takes_the_best_fitting_gpu():
    assert best_fit_gpus(pod(gpus=1, milli=250), [1000, 300, 600]) == (1,)
    assert best_fit_gpus(pod(gpus=1, milli=250), [300, 1000, 300]) == (0,)


def test_whole_gpus_take_the_lowest_numbered_idle_gpus():
    assert best_fit_gpus(pod(gpus=2), [1000, 500, 1000, 1000]) == (0, 2)
    assert best_fit_gpus(pod(gpus=3), [1000, 500, 1000]) is None


def test_a_bind_that_would_oversubscribe_is_refused_and_changes_nothing():
    node = gpu_node(gpus=1, cpu=2000)
    node.bind(pod("ns/a", cpu=1500, gpus=1, milli=600), (0,))
    with pytest.raises(OversubscribedError):
        node.bind(pod("ns/b", cpu=100, gpus=1, milli=500), (0,))
    with pytest.raises(OversubscribedError):
        node.bind(pod("ns/c", cpu=1000), ())
    assert (node.cpu_used, node.gpu_free) == (1500, [400])


def test_an_unbind_gives_the_resources_back():
    node = gpu_node(gpus=2)
    node.bind(pod("ns/a", gpus=2), (0, 1))
    node.unbind("ns/a")
    assert (node.cpu_used, node.memory_used, node.gpu_free, node.bound) == (0, 0, [1000, 1000], {})


# --- scores and ties --------------------------------------------------------------------------


def test_ties_go_to_the_node_with_the_smallest_name():
    nodes = [gpu_node("node-b"), gpu_node("node-c"), gpu_node("node-a")]
    for policy in ("spread", "binpack", "bestfit"):
        assert schedule(pod(gpus=1), nodes, policy).node == "node-a"


def test_spread_prefers_the_emptier_node_and_binpack_the_fuller():
    busy, idle = gpu_node("busy"), gpu_node("idle")
    busy.bind(pod("ns/x", cpu=32_000, gpus=4), (0, 1, 2, 3))
    assert schedule(pod(gpus=1), [busy, idle], "spread").node == "idle"
    assert schedule(pod(gpus=1), [busy, idle], "binpack").node == "busy"


def test_bestfit_prefers_the_node_left_with_the_least_cpu_and_gpu():
    big, small = gpu_node("big", gpus=8), gpu_node("small", gpus=2, cpu=16_000)
    assert schedule(pod(gpus=2), [big, small], "bestfit").node == "small"


def test_fgd_puts_a_share_where_it_does_not_break_a_whole_gpu():
    shares = [pod(f"ns/s{i}", gpus=1, milli=500) for i in range(5)]
    wholes = [pod(f"ns/w{i}", gpus=1) for i in range(5)]
    workload = workload_from_pods(shares + wholes)
    half, empty = gpu_node("a-empty", gpus=2), gpu_node("b-half", gpus=2, gpu_free=[1000, 500])
    decision = schedule(pod("ns/new", gpus=1, milli=500), [half, empty], "fgd", workload=workload)
    assert (decision.node, decision.gpu_indices) == ("b-half", (1,))


def test_fgd_learns_the_workload_from_bound_pods_when_none_is_given():
    node = gpu_node("a", gpus=2)
    node.bind(pod("ns/s", gpus=1, milli=500), (0,))
    assert (
        schedule(pod("ns/t", gpus=1, milli=500), [node, gpu_node("b", gpus=2)], "fgd").node == "a"
    )


def test_random_is_seeded_and_only_picks_feasible_nodes():
    nodes = [gpu_node(f"n{i}", gpus=1 if i % 2 else 0) for i in range(10)]
    picks = [schedule(pod(gpus=1), nodes, "random", seed=s).node for s in range(20)]
    assert all(int(p[1:]) % 2 for p in picks)
    assert picks == [schedule(pod(gpus=1), nodes, "random", seed=s).node for s in range(20)]


def test_an_unknown_policy_is_refused():
    with pytest.raises(ValueError):
        schedule(pod(), [gpu_node()], "first-come")


# --- explanations (T2) -------------------------------------------------------------------


def twelve_nodes() -> list[NodeState]:
    train = [
        gpu_node(f"train-{i}", pool="train", taints=(TRAIN,), labels={"gpu-class": "h100"})
        for i in range(4)
    ]
    infer = [gpu_node(f"infer-{i}", pool="infer", labels={"gpu-class": "t4"}) for i in range(6)]
    full = [gpu_node(f"batch-{i}", pool="batch", labels={"gpu-class": "a100"}) for i in range(2)]
    for node in full:
        node.bind(pod(f"ns/hog-{node.name}", gpus=8), tuple(range(8)))
    return train + infer + full


def test_the_explanation_is_kube_schedulers_message():
    """kube-scheduler 1.37's wording: the taint is not named (the hints name it), and its
    preemption's verdict follows: the hogs are of the pod's own priority, so no victims."""
    pending = pod(gpus=2, node_selector={"gpu-class": "a100"})
    decision = schedule(pending, twelve_nodes())
    assert decision.node is None
    assert decision.explanation.message == (
        "0/12 nodes are available: 2 Insufficient nvidia.com/gpu, "
        "4 node(s) had untolerated taint(s), "
        "6 node(s) didn't match Pod's node affinity/selector. "
        "preemption: 0/12 nodes are available: 10 Preemption is not helpful for scheduling, "
        "2 No preemption victims found for incoming pod."
    )
    assert decision.explanation.reasons == {
        "node(s) had untolerated taint(s)": 4,
        REASON_AFFINITY: 6,
        REASON_GPU: 2,
    }


def test_the_hints_name_the_toleration_and_the_missing_pool_label():
    hints = "\n".join(
        explain(pod(gpus=2, node_selector={"gpu-class": "a100"}), twelve_nodes()).hints
    )
    assert (
        'tolerations:\n- key: "pool"\n  operator: "Equal"\n  value: "train"\n  effect: "NoSchedule"'
        in hints
    )
    assert "pool infer (6 nodes)" in hints
    assert "nodeLabels: {gpu-class: a100}" in hints
    assert "gpu-class=t4" in hints


def test_the_hints_say_a_16_gpu_pod_exceeds_the_largest_node():
    hints = explain(pod(gpus=16), [gpu_node("a"), gpu_node("b", gpus=4)]).hints
    assert any("16 GPUs but the largest node has 8" in h for h in hints)


def test_the_hints_name_every_request_that_can_never_fit_not_only_the_first_failure():
    explanation = explain(pod(gpus=16, cpu=200_000), [gpu_node("a")])
    assert explanation.reasons == {REASON_CPU: 1, REASON_GPU: 1}  # kube-scheduler lists each resource the node lacks
    assert explanation.message.endswith("preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")
    assert any("16 GPUs" in h for h in explanation.hints)
    assert any("200000 milli-CPU" in h for h in explanation.hints)


def test_the_hints_say_which_resource_is_in_use_when_it_could_fit():
    node = gpu_node("a", gpus=2, pool="p", gpu_free=[300, 500])
    assert explain(pod(gpus=1, milli=700), [node]).hints == (
        "pool p (1 node): no GPU has 700 milli free (the largest free share is 500 milli). "
        "Wait for shares to free up or repack the pool (`ebcloud node-pool fragmentation p --plan`).",  # 300 + 500 free on one node
    )


def test_the_hints_suggest_a_label_for_required_affinity():
    req = NodeSelectorRequirement("zone", "In", ("b",))
    hints = explain(pod(affinity_terms=[[req]]), [gpu_node(pool="p", labels={"zone": "a"})]).hints
    assert any("zone In [b]" in h and "nodeLabels: {zone: b}" in h for h in hints)


def test_the_hints_mention_cordoned_and_not_ready_nodes_and_gpu_models():
    nodes = [gpu_node("a", unschedulable=True, pool="p"), gpu_node("b", ready=False, pool="p")]
    hints = explain(pod(gpus=1, gpu_models=("H100",)), nodes + [gpu_node("c", pool="q")]).hints
    text = "\n".join(hints)
    assert "pool p (1 node): 1 node cordoned" in text and "Uncordon" not in text  # a lead has no uncordon (QA)
    assert "not Ready" in text
    assert "allows GPU models H100 but these nodes offer A100" in text


def test_with_no_nodes_the_message_says_so():
    assert explain(pod(), []).message == "no nodes available to schedule pods"


# --- preemption ---------------------------------------------------------------------------------


def occupied(name, *pods_and_gpus, gpus=2) -> NodeState:
    node = gpu_node(name, gpus=gpus)
    for victim, indices in pods_and_gpus:
        node.bind(victim, indices)
    return node


def test_it_never_evicts_equal_or_higher_priority_pods():
    node = occupied(
        "n", (pod("ns/a", gpus=1, priority=10), (0,)), (pod("ns/b", gpus=1, priority=20), (1,))
    )
    assert preempt(pod("ns/new", gpus=1, priority=10), [node]) is None
    plan = preempt(pod("ns/new", gpus=2, priority=30), [node])
    assert plan.victim_names == ("ns/a", "ns/b")
    assert preempt(pod("ns/new", gpus=2, priority=20), [node]) is None


def test_it_prefers_checkpointable_victims():
    node = occupied(
        "n",
        (pod("ns/keep", gpus=1, priority=1), (0,)),
        (pod("ns/ckpt", gpus=1, priority=5, checkpointable=True), (1,)),
    )
    plan = preempt(pod("ns/new", gpus=1, priority=10), [node])
    assert (plan.node, plan.victim_names, plan.gpu_indices) == ("n", ("ns/ckpt",), (1,))


def test_it_evicts_the_lowest_priority_and_as_few_pods_as_possible():
    node = occupied(
        "n",
        (pod("ns/low", gpus=1, priority=1), (0,)),
        (pod("ns/mid", gpus=1, priority=5), (1,)),
        (pod("ns/tiny", cpu=10, priority=0), ()),
    )
    plan = preempt(pod("ns/new", gpus=1, priority=10), [node])
    assert plan.victim_names == ("ns/low",)


def test_it_chooses_the_node_with_the_least_harmful_victims_and_ties_by_name():
    b = occupied("b", (pod("ns/b1", gpus=2, priority=3), (0, 1)))
    a = occupied("a", (pod("ns/a1", gpus=2, priority=3), (0, 1)))
    c = occupied("c", (pod("ns/c1", gpus=2, priority=1), (0, 1)))
    assert preempt(pod("ns/new", gpus=2, priority=9), [b, a]).node == "a"
    assert preempt(pod("ns/new", gpus=2, priority=9), [b, a, c]).node == "c"


def test_it_does_not_preempt_where_taints_or_affinity_forbid_the_pod():
    node = occupied("n", (pod("ns/low", gpus=2, priority=0), (0, 1)))
    node.taints = (TRAIN,)
    assert preempt(pod("ns/new", gpus=2, priority=9), [node]) is None


def test_it_does_not_preempt_when_the_pod_already_fits():
    assert preempt(pod("ns/new", gpus=1, priority=9), [gpu_node()]) is None


# --- incremental scheduler and invariants -------------------------------------------------------

pod_requests = st.builds(
    lambda cpu, mem, kind, milli, prio, name: Pod(
        name=f"ns/p{name}",
        cpu_milli=cpu,
        memory_mib=mem,
        gpu_count={"cpu": 0, "share": 1, "one": 1, "two": 2, "eight": 8}[kind],
        gpu_milli=milli if kind == "share" else 0,
        priority=prio,
    ),
    cpu=st.integers(0, 40_000),
    mem=st.integers(0, 200_000),
    kind=st.sampled_from(["cpu", "share", "one", "two", "eight"]),
    milli=st.integers(1, 999),
    prio=st.integers(0, 3),
    name=st.integers(0, 10**9),
)


def small_cluster() -> list[NodeState]:
    return [
        NodeState("n0", 32_000, 128_000, 2, "T4", pool="a"),
        NodeState("n1", 64_000, 256_000, 4, "A100", pool="a"),
        NodeState("n2", 96_000, 512_000, 8, "A100", pool="b", taints=(TRAIN,)),
        NodeState("n3", 16_000, 64_000, 1, "T4", pool="b", unschedulable=True),
    ]


def assert_not_oversubscribed(nodes):
    for node in nodes:
        assert 0 <= node.cpu_used <= node.cpu_milli
        assert 0 <= node.memory_used <= node.memory_mib
        assert all(0 <= free <= 1000 for free in node.gpu_free)
        bound = [b.pod for b in node.bound.values()]
        assert node.cpu_used == sum(p.cpu_milli for p in bound)
        assert node.memory_used == sum(p.memory_mib for p in bound)
        used = [0] * node.gpu_count
        for b in node.bound.values():
            for i in b.gpu_indices:
                used[i] += b.pod.gpu_milli
        assert [1000 - u for u in used] == node.gpu_free


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(st.tuples(pod_requests, st.booleans(), st.integers(0, 10**6)), max_size=40),
    policy=st.sampled_from(["spread", "binpack", "bestfit", "fgd", "random"]),
)
def test_no_node_is_ever_oversubscribed_and_pods_only_go_where_every_filter_passes(steps, policy):
    nodes = small_cluster()
    workload = workload_from_pods([p for p, _, _ in steps] or [pod()])
    scheduler = ClusterScheduler(nodes, policy, workload=workload, seed=7)
    placed: list[tuple[str, str]] = []
    for request, evict, pick in steps:
        if evict and placed:
            name, node = placed.pop(pick % len(placed))
            scheduler.unbind(name, node)
        elif not any(request.name in n.bound for n in nodes):
            decision = scheduler.schedule(request)
            if decision.node is not None:
                assert filter_node(request, scheduler.node(decision.node)) is None
                scheduler.bind(request, decision.node, decision.gpu_indices)
                placed.append((request.name, decision.node))
            else:
                assert all(filter_node(request, n) is not None for n in nodes)
        assert_not_oversubscribed(nodes)


@settings(max_examples=60, deadline=None)
@given(
    history=st.lists(pod_requests, max_size=30),
    probe=pod_requests,
    policy=st.sampled_from(["spread", "binpack", "bestfit", "fgd"]),
)
def test_the_incremental_scheduler_decides_exactly_like_schedule(history, probe, policy):
    workload = workload_from_pods(history + [probe])
    nodes = [n for n in small_cluster() if not n.taints]
    scheduler = ClusterScheduler(nodes, policy, workload=workload)
    for i, request in enumerate(history):
        scheduler.schedule(probe)  # warm the caches between changes
        scheduler.place(dataclasses.replace(request, name=f"ns/h{i}"), explain_failure=False)
        expected = schedule(probe, nodes, policy, workload=workload)
        got = scheduler.schedule(probe, explain_failure=False)
        assert (got.node, got.gpu_indices) == (expected.node, expected.gpu_indices)


@settings(max_examples=60, deadline=None)
@given(history=st.lists(pod_requests, max_size=25), probe=pod_requests)
def test_explanation_counts_every_node_that_fails(history, probe):
    nodes = small_cluster() + [NodeState("n4", 8000, 32_000, 0, ready=False)]
    scheduler = ClusterScheduler(nodes, "bestfit")
    for i, request in enumerate(history):
        scheduler.place(dataclasses.replace(request, name=f"ns/h{i}"), explain_failure=False)
    explanation = explain(probe, nodes)
    assert len(explanation.node_reasons) + explanation.available == len(nodes)
    # kube-scheduler 1.37 counts a node under every resource it lacks: at least once each
    assert len(explanation.node_reasons) <= sum(explanation.reasons.values()) <= len(explanation.node_reasons) * 3
    if explanation.available == 0:
        assert explanation.message.startswith(f"0/{len(nodes)} nodes are available: ")


@settings(max_examples=60, deadline=None)
@given(
    history=st.lists(st.tuples(pod_requests, st.booleans(), st.integers(0, 10**6)), max_size=30),
    probe=pod_requests,
    policy=st.sampled_from(["spread", "binpack", "fgd"]),
)
def test_the_incremental_scheduler_stays_exact_through_evictions(history, probe, policy):
    """Spread re-scores a node only when its stale entry surfaces (its score only falls as the
    node fills); an eviction raises scores, so it must still re-score at once (seed O3)."""
    workload = workload_from_pods([p for p, _, _ in history] + [probe])
    nodes = [n for n in small_cluster() if not n.taints]
    scheduler = ClusterScheduler(nodes, policy, workload=workload)
    placed: list[tuple[str, str]] = []
    for i, (request, evict, pick) in enumerate(history):
        scheduler.schedule(probe, explain_failure=False)  # warm the caches between changes
        if evict and placed:
            scheduler.unbind(*placed.pop(pick % len(placed)))
        else:
            decision = scheduler.place(dataclasses.replace(request, name=f"ns/h{i}"), explain_failure=False)
            if decision.node is not None:
                placed.append((f"ns/h{i}", decision.node))
        expected = schedule(probe, nodes, policy, workload=workload)
        got = scheduler.schedule(probe, explain_failure=False)
        assert (got.node, got.gpu_indices) == (expected.node, expected.gpu_indices)


def test_a_pod_that_may_not_preempt_says_so_and_one_that_could_gets_no_verdict():
    """kube-scheduler's preemption speaks only when it ran and failed: `preemptionPolicy: Never`
    is not eligible; where lower-priority pods could make room the scheduler preempts instead."""
    node = gpu_node("a")
    node.bind(pod("ns/low", gpus=8, priority=0), tuple(range(8)))
    never = dataclasses.replace(pod("ns/never", gpus=8, priority=100), preemption_policy="Never")
    assert explain(never, [node]).message == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: not eligible due to preemptionPolicy=Never."
    assert explain(pod("ns/high", gpus=8, priority=100), [node]).message == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."


@pytest.mark.parametrize("policy", ["spread", "binpack", "bestfit", "fgd", "fgd-cpu"])
def test_a_preferred_node_affinity_term_wins_over_the_packing_policy(policy):
    """NodeAffinity's score (preferredDuringScheduling terms, by weight) ranks before the pool's
    policy, as a PreferNoSchedule taint does; among equally preferred nodes the policy decides."""
    zone = lambda value: (NodeSelectorRequirement("zone", "In", (value,)),)  # noqa: E731
    nodes = [gpu_node("a-node", labels={"zone": "a"}), gpu_node("b-node", labels={"zone": "b"}), gpu_node("c-node", labels={"zone": "c"})]
    nodes[0].bind(pod("ns/other", gpus=4), (0, 1, 2, 3))  # binpack and bestfit would take a-node
    prefers_b = pod("ns/p", gpus=1, preferred_terms=((50, zone("b")), (10, zone("c"))))
    assert schedule(prefers_b, nodes, policy=policy).node == "b-node"
    assert ClusterScheduler([n.clone() for n in nodes], policy).place(prefers_b, explain_failure=False).node == "b-node"
    prefers_c_more = pod("ns/q", gpus=1, preferred_terms=((10, zone("b")), (50, zone("c"))))
    assert schedule(prefers_c_more, nodes, policy=policy).node == "c-node"
    tainted = [dataclasses.replace(nodes[1], taints=(Taint("spot", "", "PreferNoSchedule"),)), nodes[2]]
    assert schedule(prefers_b, tainted, policy=policy).node == "c-node"  # the untolerated PreferNoSchedule taint weighs more
