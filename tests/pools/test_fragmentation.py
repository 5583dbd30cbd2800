"""Fragmentation measure, report and repack plan (seed C3 fragmentation/repack, P3
fragmentation). F_n is the FGD paper's (Weng et al., USENIX ATC 2023), as defined in
../shared/data/README.md."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pools.core.disruption import DisruptionBudget
from pools.core.scheduling.fragmentation import (
    FragmentationModel,
    PodShape,
    Workload,
    fragmentation_report,
    node_allocation_pct,
    workload_from_pods,
)
from pools.core.scheduling.nodes import NodeState, Pod, Taint, best_fit_gpus, filter_node
from pools.core.scheduling.repack import make_room_plan, repack_plan
from pools.core.scheduling.repack_milp import optimal_drain

SHARE = PodShape(cpu_milli=1000, gpu_count=1, gpu_milli=500)
WHOLE = PodShape(cpu_milli=1000, gpu_count=1, gpu_milli=1000)
CPU_ONLY = PodShape(cpu_milli=4000)


def node(name="n", gpus=2, cpu=32_000, free=None, model="A100", **kw) -> NodeState:
    return NodeState(name, cpu, 256_000, gpus, model, gpu_free=free, **kw)


def pod(name, cpu=1000, gpus=0, milli=0, **kw) -> Pod:
    return Pod(name=name, cpu_milli=cpu, memory_mib=1024, gpu_count=gpus, gpu_milli=milli, **kw)


def model_of(*shapes_and_counts, coverage=1.0) -> FragmentationModel:
    return FragmentationModel(Workload(tuple(shapes_and_counts)))


# --- expected workload --------------------------------------------------------------------------


def test_the_workload_keeps_the_most_frequent_shapes_covering_95_percent():
    pods = [pod(f"a{i}", gpus=1, milli=500) for i in range(90)]
    pods += [pod(f"b{i}", gpus=1) for i in range(6)]
    pods += [pod(f"c{i}", cpu=3000) for i in range(4)]
    workload = workload_from_pods(pods)
    assert [s for s, _ in workload.shapes] == [SHARE, WHOLE]
    assert workload.observed == 100
    assert [round(p, 4) for _, p in workload.probabilities()] == [
        round(90 / 96, 4),
        round(6 / 96, 4),
    ]


def test_the_workload_breaks_count_ties_by_the_larger_shape_first():
    workload = workload_from_pods([SHARE, WHOLE, CPU_ONLY], coverage=1.0)
    assert [s for s, _ in workload.shapes] == [CPU_ONLY, WHOLE, SHARE]


# --- F_n ----------------------------------------------------------------------------------------


def test_fragmentation_counts_gpus_too_small_for_a_shape_that_fits():
    model = model_of((SHARE, 1), (WHOLE, 1))
    # GPU 1 has 300 free: too small for both shapes, which still fit on the idle GPU 0.
    assert model.node_fragmentation(node(free=[1000, 300])) == 300


def test_fragmentation_counts_all_idle_gpu_for_a_shape_that_cannot_fit():
    model = model_of((SHARE, 1), (WHOLE, 1))
    assert model.node_fragmentation(node(free=[200, 300])) == 500
    assert model.node_fragmentation(node(free=[1000, 1000])) == 0


def test_a_cpu_only_shape_counts_all_idle_gpu_as_fragmented():
    assert model_of((CPU_ONLY, 1)).node_fragmentation(node()) == 2000


def test_gpus_stranded_by_exhausted_cpu_are_fragmented():
    model = model_of((SHARE, 1))
    starved = node(cpu=4000)
    starved.bind(pod("ns/cpu-hog", cpu=3500), ())
    assert model.node_fragmentation(starved) == 2000


def test_gpus_of_a_model_the_workload_cannot_use_are_fragmented():
    h100_only = PodShape(1000, 1, 500, ("H100",))
    assert model_of((h100_only, 1)).node_fragmentation(node(model="A100")) == 2000
    assert model_of((h100_only, 1)).node_fragmentation(node(model="H100")) == 0


def test_fgd_scores_50_when_fragmentation_does_not_change_and_higher_when_it_shrinks():
    model = model_of((SHARE, 1))
    assert model.placement_score(pod("p", gpus=1, milli=500), node(free=[1000, 500]))[0] == 50
    # Filling the 400-milli fragment that no 500-milli share could use shrinks F_n by 400.
    assert model.placement_score(pod("p", gpus=1, milli=400), node(free=[1000, 400])) == (59, (1,))


def test_fgd_takes_the_gpu_that_keeps_a_whole_gpu_free():
    model = model_of((SHARE, 1), (WHOLE, 1))
    score, gpus = model.placement_score(pod("p", gpus=1, milli=500), node(free=[1000, 700]))
    assert gpus == (1,)
    assert model.placement_delta(pod("p", gpus=1, milli=500), node(free=[1000, 700])) < 0


# --- report ---------------------------------------------------------------------------------


def test_the_report_shows_allocation_fragments_and_underused_nodes():
    busy, light, idle = node("busy", gpus=2), node("light", gpus=4), node("idle", gpus=1)
    busy.bind(pod("ns/a", gpus=2), (0, 1))
    light.bind(pod("ns/b", gpus=1, milli=300), (0,))
    report = fragmentation_report([busy, light, idle], Workload(((SHARE, 1), (WHOLE, 1))))
    assert [round(r.allocated_pct, 1) for r in report.nodes] == [100.0, 0.0, 7.5]
    assert report.underused_nodes == ("idle", "light")
    assert report.free_fragment_histogram == {
        "0": 2,
        "1-249": 0,
        "250-499": 0,
        "500-749": 1,
        "750-999": 0,
        "1000": 4,
    }
    assert (report.total_gpu_milli, report.allocated_gpu_milli, report.free_gpu_milli) == (
        7000,
        2300,
        4700,
    )
    assert report.cluster_fragmentation_milli == sum(r.fragmentation_milli for r in report.nodes)
    assert report.unallocated_pct == pytest.approx(100 * 4700 / 7000)
    assert node_allocation_pct(node(gpus=0)) == 0.0


# --- repack plan ------------------------------------------------------------------------------


def half_full_pair():
    a, b, c = node("a", gpus=4), node("b", gpus=4), node("c", gpus=4)
    a.bind(pod("ns/a1", gpus=2), (0, 1))
    b.bind(pod("ns/b1", gpus=1), (0,))
    b.bind(pod("ns/b2", gpus=1, milli=500), (1,))
    return [a, b, c]


def test_the_greedy_repack_plan_empties_the_emptiest_node_onto_running_nodes():
    plan = repack_plan(half_full_pair(), workload=Workload(((WHOLE, 1), (SHARE, 1))), optimise=False)
    assert plan.freed_nodes == ("b",)
    assert {(m.pod, m.from_node, m.to_node) for m in plan.moves} == {
        ("ns/b1", "b", "a"),
        ("ns/b2", "b", "a"),
    }
    assert plan.gpu_hours_saved_per_week == 4 * 168
    assert "c" not in {m.to_node for m in plan.moves}  # never wake an empty node


def test_the_repack_plan_counts_empty_nodes_as_free_without_moves():
    """Issue 22 item 2: a node at 0% is free already; the plan says so instead of 'no moves
    free a node' (seed C3: released nodes are the saving)."""
    plan = repack_plan(half_full_pair(), workload=Workload(((WHOLE, 1), (SHARE, 1))))
    assert plan.empty_nodes == ("c",) and plan.free_nodes == ("c", "a")
    a, b, c = half_full_pair()
    a.unbind("ns/a1")
    still = repack_plan([a, c], workload=Workload(((WHOLE, 1),)))
    assert still.moves == () and still.empty_nodes == ("a", "c")


def test_the_optimiser_frees_as_many_gpus_with_fewer_moves():
    """Issue 22 item 2: draining a (one 2-GPU pod onto b's idle GPUs 2 and 3) frees 4 GPUs
    with one move; the greedy plan drains b, the emptiest, with two."""
    plan = repack_plan(half_full_pair(), workload=Workload(((WHOLE, 1), (SHARE, 1))))
    assert plan.freed_nodes == ("a",)
    assert [(m.pod, m.from_node, m.to_node, m.gpu_indices) for m in plan.moves] == [("ns/a1", "a", "b", (2, 3))]


def test_the_optimiser_frees_a_node_that_the_greedy_drain_order_blocks():
    """Issue 22 item 2: emptiest first, the greedy plan moves n1's pod onto n2, and n3's 2-GPU
    pod no longer fits there; the integer program frees n3's 2 GPUs instead of n1's one."""
    n1, n2, n3 = node("n1", gpus=1), node("n2", gpus=4), node("n3", gpus=2)
    n1.bind(pod("ns/p0", gpus=1), (0,))
    n2.bind(pod("ns/p1", gpus=1), (0,))
    n2.bind(pod("ns/p2", gpus=1), (1,))
    n3.bind(pod("ns/p3", gpus=2), (0, 1))
    workload = Workload(((WHOLE, 1),))
    greedy = repack_plan([n1, n2, n3], workload=workload, max_drained_nodes=3, optimise=False)
    optimal = repack_plan([n1, n2, n3], workload=workload, max_drained_nodes=3)
    assert greedy.freed_nodes == ("n1",) and greedy.gpu_hours_saved_per_week == 168
    assert optimal.freed_nodes == ("n3",) and optimal.gpu_hours_saved_per_week == 2 * 168
    assert [(m.pod, m.to_node, m.gpu_indices) for m in optimal.moves] == [("ns/p3", "n2", (2, 3))]


def test_the_optimiser_steps_aside_where_the_program_would_be_too_big():
    """Issue 22 item 2: 'where the size allows': past max_columns the greedy plan stands."""
    from pools.core.scheduling.repack_milp import optimal_drain

    nodes = half_full_pair()
    assert optimal_drain(nodes, nodes[:2], max_drained_nodes=2, max_columns=1) is None
    assert optimal_drain(nodes, nodes[:2], max_drained_nodes=2).nodes == ("a",)


def test_the_repack_plan_honours_the_disruption_budget():
    nodes = [node(f"n{i}", gpus=4) for i in range(4)]
    for i, n in enumerate(nodes):
        n.bind(pod(f"ns/p{i}", gpus=1), (0,))
    assert len(repack_plan(nodes, max_drained_nodes=1).freed_nodes) == 1
    assert len(repack_plan(nodes, max_drained_nodes=2).freed_nodes) == 2
    assert len(repack_plan(nodes, max_drained_nodes=0).moves) == 0


def test_the_repack_plan_never_moves_pods_above_the_priority_it_makes_room_for():
    nodes = half_full_pair()
    nodes[1].unbind("ns/b1")
    nodes[1].bind(pod("ns/b1", gpus=1, priority=100), (0,))
    plan = repack_plan(nodes, max_priority=50)
    assert "ns/b1" not in {m.pod for m in plan.moves}
    assert "b" in plan.skipped


def test_the_repack_plan_moves_no_pod_a_disruption_budget_protects():
    """Issue 22 item 2 (PDB-like limits on moves): a move is an eviction, so a pod whose
    disruption budget lets none go stays, and so does its node. The optimiser would drain a
    (its one pod onto b's idle GPUs); protected, the plan drains b instead, and says why a
    stays."""
    workload = Workload(((WHOLE, 1), (SHARE, 1)))
    plan = repack_plan(half_full_pair(), workload=workload, max_drained_nodes=2, budgets=[DisruptionBudget(frozenset({"ns/a1"}), 0)])
    assert plan.freed_nodes == ("b",) and "ns/a1" not in {m.pod for m in plan.moves}
    assert plan.skipped["a"] == "a disruption budget keeps pod ns/a1 in place"
    both = repack_plan(half_full_pair(), workload=workload, budgets=[DisruptionBudget(frozenset({"ns/a1", "ns/b2"}), 0)])
    assert both.moves == () and both.freed_nodes == ()


def test_the_repack_plan_moves_no_more_of_a_budgets_pods_than_it_lets_go():
    """Four nodes with one pod each: four drains, unless a budget over three of the pods lets
    one go (the greedy plan and the integer program alike)."""
    nodes = [node(f"n{i}", gpus=4) for i in range(4)]
    for i, n in enumerate(nodes):
        n.bind(pod(f"ns/p{i}", gpus=1), (0,))
    guarded = DisruptionBudget(frozenset({"ns/p0", "ns/p1", "ns/p2"}), 1)
    assert len(repack_plan(nodes, max_drained_nodes=3).moves) == 3
    greedy = repack_plan(nodes, max_drained_nodes=3, budgets=[guarded], optimise=False)
    assert len({m.pod for m in greedy.moves} & guarded.pods) == 1 and len(greedy.freed_nodes) == 2
    assert "a disruption budget lets no more of its pods move now (ns/p" in " ".join(greedy.skipped.values())
    limits = [({n.name: len(guarded.pods & n.bound.keys()) for n in nodes}, guarded.allowed)]
    drain = optimal_drain(nodes, nodes, max_drained_nodes=3, limits=limits)
    assert len(drain.nodes) == 2 and len(set(drain.targets) & guarded.pods) == 1


def test_the_share_packing_moves_no_more_of_a_budgets_shares_than_it_lets_go():
    """500 | 500 | 300 | 300 pack into two GPUs: a budget over the four shares that lets as
    many go as that packing moves allows it; with one fewer, only the first shares it moved may
    move again (a share that stays keeps its GPU out of the packing), and fewer GPUs come free."""
    n = node("n", gpus=4)
    for i, milli in enumerate((500, 500, 300, 300)):
        n.bind(pod(f"ns/s{i}", gpus=1, milli=milli), (i,))
    free = repack_plan([n], pack_shares=True)
    assert free.share_gpus_freed == 2
    shares = frozenset(f"ns/s{i}" for i in range(4))
    enough = repack_plan([n], pack_shares=True, budgets=[DisruptionBudget(shares, len(free.share_moves))])
    assert enough.share_moves == free.share_moves and enough.share_gpus_freed == 2
    short = repack_plan([n], pack_shares=True, budgets=[DisruptionBudget(shares, len(free.share_moves) - 1)])
    assert 0 < len(short.share_moves) < len(free.share_moves) and short.share_gpus_freed == 1
    assert {m.pod for m in short.share_moves} <= {m.pod for m in free.share_moves}


def test_the_repack_plan_never_moves_a_pod_where_a_filter_fails():
    a, b = node("a", gpus=4, taints=(Taint("pool", "train"),)), node("b", gpus=4)
    a.bind(pod("ns/a1", gpus=1, tolerations=()), (0,))  # bound before the taint mattered
    b.bind(pod("ns/b1", gpus=1), (0,))
    plan = repack_plan([a, b])
    assert ("ns/b1", "a") not in {(m.pod, m.to_node) for m in plan.moves}


def test_the_repack_plan_moves_nothing_off_a_node_it_cannot_empty():
    a, b = node("a", gpus=2), node("b", gpus=2)
    a.bind(pod("ns/a1", gpus=1), (0,))
    a.bind(pod("ns/a2", gpus=1), (1,))
    b.bind(pod("ns/b1", gpus=1), (0,))
    plan = repack_plan([a, b], max_drained_nodes=5)
    # a1 alone would fit on b, but a2 would not: a keeps both rather than half-draining.
    assert plan.moves == () and plan.freed_nodes == ()
    assert set(plan.skipped) == {"a", "b"}


shapes = st.sampled_from([(0, 0), (1, 250), (1, 500), (1, 1000), (2, 1000)])


@settings(max_examples=50, deadline=None)
@given(
    placements=st.lists(st.tuples(st.integers(0, 5), shapes, st.integers(0, 8000)), max_size=25),
    budget=st.integers(0, 6),
)
def test_an_applied_repack_plan_oversubscribes_nothing_and_empties_the_freed_nodes(
    placements, budget
):
    nodes = [node(f"n{i}", gpus=4, cpu=16_000) for i in range(6)]
    for k, (i, (gpus, milli), cpu) in enumerate(placements):
        candidate = pod(f"ns/p{k}", cpu=cpu, gpus=gpus, milli=milli if gpus else 0)
        if filter_node(candidate, nodes[i]) is None:
            nodes[i].bind(candidate, best_fit_gpus(candidate, nodes[i].gpu_free))
    plan = repack_plan(nodes, max_drained_nodes=budget)
    assert len(plan.freed_nodes) <= budget
    by_name = {n.name: n for n in nodes}
    for move in plan.moves:
        binding = by_name[move.from_node].unbind(move.pod)
        target = by_name[move.to_node]
        moved = dataclasses.replace(binding.pod)
        assert filter_node(moved, target) is None
        target.bind(moved, move.gpu_indices)
    for name in plan.freed_nodes:
        assert not by_name[name].bound
    for n in nodes:
        assert 0 <= n.cpu_used <= n.cpu_milli and all(0 <= f <= 1000 for f in n.gpu_free)


# --- making room for pending pods -------------------------------------------------------------


def shares_everywhere(mover_priority=0):
    a, b = node("a", gpus=2), node("b", gpus=2)
    a.bind(pod("ns/a0", gpus=1, milli=600, priority=mover_priority), (0,))
    a.bind(pod("ns/a1", gpus=1, milli=600, priority=mover_priority), (1,))
    b.bind(pod("ns/b0", gpus=1, milli=300, priority=mover_priority), (0,))
    b.bind(pod("ns/b1", gpus=1, milli=300, priority=mover_priority), (1,))
    return [a, b]


def test_make_room_moves_a_share_so_that_a_whole_gpu_pod_fits():
    nodes = shares_everywhere()
    plan = make_room_plan([pod("ns/train", gpus=1, priority=5)], nodes)
    assert plan.unplaced == ()
    # The lightest move: the 300-milli share from b joins a 600 share on a, clearing b's GPU.
    assert [(m.pod, m.from_node, m.to_node) for m in plan.moves] == [("ns/b0", "b", "a")]
    assert plan.placements["ns/train"] == ("b", (0,))
    by_name = {n.name: n for n in nodes}
    for move in plan.moves:  # apply: moves in order, then placements
        moved = by_name[move.from_node].unbind(move.pod).pod
        by_name[move.to_node].bind(moved, move.gpu_indices)
    node_name, gpus = plan.placements["ns/train"]
    by_name[node_name].bind(pod("ns/train", gpus=1, priority=5), gpus)
    assert all(0 <= f <= 1000 for n in nodes for f in n.gpu_free)


def test_make_room_never_moves_a_higher_priority_pod_for_a_lower_one():
    plan = make_room_plan(
        [pod("ns/train", gpus=1, priority=5)], shares_everywhere(mover_priority=9)
    )
    assert plan.unplaced == ("ns/train",) and plan.moves == ()


def test_make_room_places_pods_that_already_fit_without_moving_anything():
    plan = make_room_plan([pod("ns/small", gpus=1, milli=200)], shares_everywhere())
    assert plan.moves == () and plan.placements["ns/small"][0] in {"a", "b"}
