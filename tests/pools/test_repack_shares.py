"""Share repack: running GPU shares packed into the fewest GPUs so that whole GPUs come free
(issue 22 item 2; seeds C3 repack, P3 fragmentation). Every case is checked against the
exact optimum of the bin packing where the planner claims one."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from pools.core.disruption import DisruptionBudget
from pools.core.scheduling.cluster import ClusterScheduler
from pools.core.scheduling.nodes import MILLI, NodeState, Pod
from pools.core.scheduling.repack import make_room_plan, repack_plan
from pools.core.scheduling.repack_shares import repack_shares


def node(name, gpus=1, cpu=64_000, model="A100") -> NodeState:
    return NodeState(name, cpu, 256_000, gpus, model)


def share(name, milli, cpu=1000, **kw) -> Pod:
    return Pod(name=name, cpu_milli=cpu, memory_mib=1024, gpu_count=1, gpu_milli=milli, **kw)


def whole(name, cpu=8000) -> Pod:
    return Pod(name=name, cpu_milli=cpu, memory_mib=1024, gpu_count=1)


def bound(nodes, layout) -> list[NodeState]:
    """``layout``: node name -> one list of share sizes per GPU."""
    by_name = {n.name: n for n in nodes}
    for name, gpus in layout.items():
        for gpu, sizes in enumerate(gpus):
            for i, milli in enumerate(sizes):
                by_name[name].bind(share(f"{name}-{gpu}-{i}", milli), (gpu,))
    return nodes


def placements(nodes) -> dict[str, tuple[str, tuple[int, ...]]]:
    return {b.pod.name: (n.name, b.gpu_indices) for n in nodes for b in n.bound.values()}


def assert_consistent(nodes) -> None:
    """Each node's used CPU, memory and GPU milli are exactly what its pods request."""
    for n in nodes:
        assert n.cpu_used == sum(b.pod.cpu_milli for b in n.bound.values())
        assert n.memory_used == sum(b.pod.memory_mib for b in n.bound.values())
        used = Counter()
        for b in n.bound.values():
            for i in b.gpu_indices:
                used[i] += b.pod.gpu_milli
        assert [MILLI - used[i] for i in range(n.gpu_count)] == n.gpu_free


def random_cluster(shapes, sizes, rng, *, cpu: int) -> list[NodeState]:
    """Nodes of (GPUs, cores) ``shapes``, a share of each of ``sizes`` (``cpu`` milli each)
    placed first-fit in random order."""
    nodes = [node(f"n{i}", gpus=g, cpu=cores * 1000) for i, (g, cores) in enumerate(shapes)]
    slots = [(n, i) for n in nodes for i in range(n.gpu_count)]
    for k, milli in enumerate(sizes):
        rng.shuffle(slots)
        pod = share(f"p{k}", milli, cpu=cpu)
        for n, i in slots:
            if n.gpu_free[i] >= milli and n.cpu_free >= pod.cpu_milli:
                n.bind(pod, (i,))
                break
    return nodes


def min_gpus(sizes) -> int:
    """The exact bin-packing optimum (branch and bound), for small cases."""
    items, best = sorted(sizes, reverse=True), [len(sizes)]

    def place(i, bins):
        if len(bins) >= best[0]:
            return
        if i == len(items):
            best[0] = len(bins)
            return
        for k, used in enumerate(bins):
            if used + items[i] <= MILLI and used not in bins[:k]:
                bins[k] += items[i]
                place(i + 1, bins)
                bins[k] -= items[i]
        place(i + 1, [*bins, items[i]])

    place(0, [])
    return best[0]


# 500 | 300+300 | 700+200: no GPU's shares fit into the others' free milli (400, 100), yet
# 500+300+200 and 700+300 fill two GPUs exactly.
RECOMBINE = {"a": [[500]], "b": [[300, 300]], "c": [[700, 200]]}


def test_shares_recombine_to_free_a_gpu_that_no_single_move_empties():
    nodes = bound([node("a"), node("b"), node("c")], RECOMBINE)
    pending = [whole("train")]
    assert make_room_plan(pending, nodes).unplaced == ("train",)
    assert repack_plan(nodes).freed_nodes == ()
    scheduler = ClusterScheduler([n.clone() for n in nodes], "fgd-cpu")
    result = repack_shares(scheduler)
    assert result.gpus_freed == 1
    assert sum(1 for n in scheduler.nodes for f in n.gpu_free if f == MILLI) == 1
    assert sorted(placements(scheduler.nodes)) == sorted(placements(nodes))  # every share still runs
    assert {m[0] for m in result.moves} <= set(placements(nodes))
    assert_consistent(scheduler.nodes)
    assert scheduler.place(pending[0], explain_failure=False).node is not None


def test_the_freed_gpu_is_on_the_node_with_cpu_for_a_whole_gpu_pod():
    nodes = [node("a", cpu=3000), node("b", cpu=64_000), node("c", cpu=3000)]
    bound(nodes, RECOMBINE)
    scheduler = ClusterScheduler([n.clone() for n in nodes], "fgd-cpu")
    assert repack_shares(scheduler).gpus_freed == 1
    freed = [n for n in scheduler.nodes if n.gpu_free == [MILLI]]
    assert [n.name for n in freed] == ["b"]
    assert scheduler.place(whole("train", cpu=32_000), explain_failure=False).node == "b"


def test_nothing_moves_where_the_shares_already_fill_the_fewest_gpus():
    nodes = bound([node("a", gpus=2), node("b")], {"a": [[500, 500], [700, 300]], "b": [[600]]})
    before = placements(nodes)
    scheduler = ClusterScheduler(nodes, "fgd-cpu")
    result = repack_shares(scheduler)
    assert (result.moves, result.gpus_freed) == ((), 0)
    assert placements(nodes) == before


def test_a_share_that_may_not_move_keeps_its_gpu_out_of_the_repack():
    nodes = bound([node("a"), node("b"), node("c")], RECOMBINE)
    pinned = nodes[2].bound["c-0-1"].pod  # the 200 the exact fit needs beside 500+300
    scheduler = ClusterScheduler([n.clone() for n in nodes], "fgd-cpu")
    result = repack_shares(scheduler, movable=lambda pod: pod.name != pinned.name)
    assert result.gpus_freed == 0 and result.moves == ()
    assert placements(scheduler.nodes) == placements(nodes)


def test_a_share_bound_to_a_gpu_model_is_repacked_only_among_that_models_gpus():
    nodes = [node("a", model="T4"), node("b", model="A100"), node("c", model="A100")]
    nodes[0].bind(share("t4-only", 500, gpu_models=("T4",)), (0,))
    bound(nodes, {"b": [[300, 300]], "c": [[700, 200]]})
    scheduler = ClusterScheduler([n.clone() for n in nodes], "fgd-cpu")
    result = repack_shares(scheduler)
    assert placements(scheduler.nodes)["t4-only"] == ("a", (0,))
    assert result.gpus_freed == 0  # 300+300+700+200 need two GPUs; only the T4 share could complete one


@settings(max_examples=60, deadline=None)
@given(
    st.lists(  # nodes: GPUs, CPU cores
        st.tuples(st.integers(1, 3), st.sampled_from([4, 16, 96])), min_size=1, max_size=4
    ),
    st.lists(st.sampled_from([110, 230, 320, 470, 500, 650, 810]), min_size=1, max_size=16),
    st.randoms(use_true_random=False),
)
def test_every_share_keeps_a_place_and_the_freed_gpus_never_exceed_the_optimum(shapes, sizes, rng):
    """Random clusters, shares placed first-fit in random order: after the repack every share
    runs exactly once, every node's books add up, and the GPUs freed are at most the exact
    optimum's; with CPU to spare everywhere, exactly the optimum's."""
    nodes = random_cluster(shapes, sizes, rng, cpu=1000)
    before = placements(nodes)
    used_before = sum(1 for n in nodes for f in n.gpu_free if f < MILLI)
    best = used_before - min_gpus([b.pod.gpu_milli for n in nodes for b in n.bound.values()])
    scheduler = ClusterScheduler([n.clone() for n in nodes], "fgd-cpu")
    result = repack_shares(scheduler)
    after = placements(scheduler.nodes)
    assert sorted(after) == sorted(before)
    assert_consistent(scheduler.nodes)
    used_after = sum(1 for n in scheduler.nodes for f in n.gpu_free if f < MILLI)
    assert result.gpus_freed == used_before - used_after
    assert 0 <= result.gpus_freed <= best
    assert {m[0] for m in result.moves} == {p for p in after if after[p] != before[p]}
    if all(cores == 96 for _, cores in shapes):
        assert result.gpus_freed == best


def test_hundreds_of_distinct_share_sizes_stay_within_the_time_limit_and_keep_every_share():
    """Every share a size of its own (as users asking any milli would give): the pricing runs
    a round per pattern, so it stops at the time limit, and what it found still holds."""
    import random

    rng = random.Random(7)
    nodes = [node(f"n{i:02d}", gpus=8, cpu=96_000) for i in range(30)]
    scheduler = ClusterScheduler(nodes, "fgd-cpu")
    for k in range(900):
        scheduler.place(share(f"p{k}", rng.randint(1, 999)), explain_failure=False)
    before = placements(scheduler.nodes)
    assert len({b.pod.gpu_milli for n in nodes for b in n.bound.values()}) > 400
    used_before = sum(1 for n in nodes for f in n.gpu_free if f < MILLI)
    result = repack_shares(scheduler, time_limit_s=0.5)
    assert sorted(placements(scheduler.nodes)) == sorted(before)
    assert_consistent(scheduler.nodes)
    assert result.gpus_freed == used_before - sum(1 for n in nodes for f in n.gpu_free if f < MILLI)


# 500+100 | 500+100: two GPUs, the fewest that hold them, so packing alone frees nothing; a
# waiting 800 fits nowhere as they are, yet 500+500 | 100+100+800 holds all five.
ROOM_FOR_A_WAITING_SHARE = {"a": [[500, 100], [500, 100]]}


def test_a_waiting_share_is_packed_in_with_the_running_ones():
    nodes = bound([node("a", gpus=2)], ROOM_FOR_A_WAITING_SHARE)
    waiting = share("infer", 800)
    assert ClusterScheduler([n.clone() for n in nodes], "fgd-cpu").place(waiting, explain_failure=False).node is None
    assert repack_shares(ClusterScheduler([n.clone() for n in nodes], "fgd-cpu")).moves == ()
    scheduler = ClusterScheduler([n.clone() for n in nodes], "fgd-cpu")
    result = repack_shares(scheduler, waiting=[waiting])
    assert [name for name, *_ in result.placed] == ["infer"]
    after = placements(scheduler.nodes)
    assert sorted(after) == sorted([*placements(nodes), "infer"])  # every running share still runs
    on_its_gpu = sorted(b.pod.gpu_milli for b in scheduler.nodes[0].bound.values() if b.gpu_indices == after["infer"][1])
    assert on_its_gpu == [100, 100, 800]
    assert result.gpus_freed == 0 and len(result.moves) == 2  # a 500 and a 100 swap GPUs
    assert_consistent(scheduler.nodes)


def test_a_gpu_freed_for_a_waiting_whole_gpu_pod_is_worth_more_than_a_waiting_share():
    """500 | 500 pack into one GPU: the other is a whole GPU for the waiting whole-GPU pod,
    worth more than the waiting 500 it could hold instead."""
    layout = {"a": [[500], [500]]}
    nodes = bound([node("a", gpus=2)], layout)
    scheduler = ClusterScheduler([n.clone() for n in nodes], "fgd-cpu")
    result = repack_shares(scheduler, waiting=[share("infer", 500), whole("train")])
    assert (result.placed, result.gpus_freed) == ((), 1)
    assert scheduler.place(whole("train"), explain_failure=False).node == "a"


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 3), st.sampled_from([4, 16, 96])), min_size=1, max_size=4),
    st.lists(st.sampled_from([110, 230, 320, 470, 500, 650, 810]), min_size=1, max_size=14),
    st.lists(st.sampled_from([230, 320, 470, 650, 810]), min_size=1, max_size=5),
    st.randoms(use_true_random=False),
)
def test_waiting_shares_never_cost_a_running_share_its_place(shapes, sizes, waiting_sizes, rng):
    """Random clusters with shares waiting: every running share still runs once, a waiting
    share is bound only where it fits, the books add up, and what the repack reports (moves,
    bound, GPUs freed) is what happened to the nodes."""
    nodes = random_cluster(shapes, sizes, rng, cpu=2000)
    waiting = [share(f"w{k}", milli, cpu=2000) for k, milli in enumerate(waiting_sizes)]
    before = placements(nodes)
    used_before = sum(1 for n in nodes for f in n.gpu_free if f < MILLI)
    scheduler = ClusterScheduler([n.clone() for n in nodes], "fgd-cpu")
    result = repack_shares(scheduler, waiting=waiting)
    after = placements(scheduler.nodes)
    assert sorted(after) == sorted([*before, *(name for name, *_ in result.placed)])
    assert all(after[name] == (to, gpus) for name, to, gpus in result.placed)
    assert {m[0] for m in result.moves} == {p for p in before if after[p] != before[p]}
    assert_consistent(scheduler.nodes)
    assert result.gpus_freed == used_before - sum(1 for n in scheduler.nodes for f in n.gpu_free if f < MILLI)
    assert result.placed or result.gpus_freed > 0 or not result.moves


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 3), st.sampled_from([4, 16, 96])), min_size=1, max_size=4),
    st.lists(st.sampled_from([110, 230, 320, 470, 500, 650, 810]), min_size=1, max_size=14),
    st.lists(st.tuples(st.sets(st.integers(0, 13), max_size=6), st.integers(0, 2)), max_size=3),
    st.randoms(use_true_random=False),
)
def test_no_plan_moves_more_of_a_disruption_budgets_pods_than_it_lets_go(shapes, sizes, budgets, rng):
    """Issue 22 item 2 (PDB-like limits on moves): random clusters and budgets over random
    pods (no pod under two): the drains and the share packing each move at most ``allowed`` of
    a budget's pods, and a pod whose budget lets none go never moves."""
    nodes = random_cluster(shapes, sizes, rng, cpu=1000)
    taken: set[str] = set()
    guarded = []
    for members, allowed in budgets:
        pods = frozenset(f"p{k}" for k in members if k < len(sizes)) - taken
        taken |= pods
        guarded.append(DisruptionBudget(pods, allowed))
    plan = repack_plan(nodes, max_drained_nodes=len(nodes), budgets=guarded)
    for moves in (plan.moves, plan.share_moves):
        moved = Counter(m.pod for m in moves)
        assert all(count == 1 for count in moved.values())
        for budget in guarded:
            assert sum(moved[name] for name in budget.pods) <= budget.allowed, (budget, moves)
